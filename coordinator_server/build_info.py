"""Whether this process runs the hot path compiled by mypyc (setup.py) or as plain Python."""
from __future__ import annotations

import importlib.machinery


def compiled() -> bool:
    from coordinator_server.net import connection

    return (connection.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
