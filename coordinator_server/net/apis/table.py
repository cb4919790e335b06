"""The APIs the connection serves on the request's own path, by the first two bytes of a frame (the api key):
each module's `serve` parses the frame (by hand where it can, else the generic decode), calls the runtime
once, and answers framed bytes or a future of them. Every other API goes through the connection's generic
task and the handler table (net/handlers.py); an advertised API is in exactly one of the two (checked when
the handlers are built)."""
from __future__ import annotations

from typing import Final

from . import heartbeat, join_group, leave_group, offset_commit, offset_fetch, sync_group
from .context import Serve

_LEAVE_GROUP_API_KEY: Final = 13

SERVED: Final[dict[bytes, Serve]] = {
    heartbeat.HEARTBEAT_API_KEY.to_bytes(2, "big"): heartbeat.serve,
    join_group.JOIN_GROUP_API_KEY.to_bytes(2, "big"): join_group.serve,
    sync_group.SYNC_GROUP_API_KEY.to_bytes(2, "big"): sync_group.serve,
    _LEAVE_GROUP_API_KEY.to_bytes(2, "big"): leave_group.serve,
    offset_commit.OFFSET_COMMIT_API_KEY.to_bytes(2, "big"): offset_commit.serve,
    offset_fetch.OFFSET_FETCH_API_KEY.to_bytes(2, "big"): offset_fetch.serve,
}
SERVED_API_KEYS: Final = frozenset(int.from_bytes(key, "big") for key in SERVED)
