"""The embedded topic store (data plane): topics, produce, fetch, list offsets, retention."""
