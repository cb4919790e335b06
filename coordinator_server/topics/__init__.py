"""Topics this node reports in Metadata (an in-memory registry until the embedded topic store lands)."""
