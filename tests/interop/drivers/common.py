"""Shared plumbing of the Python drivers: the command line and the JSON-lines report on stdout.

Every driver prints one JSON object per line, flushed at once, each with `t` (time.time()) and `ev`:

    {"ev": "start", "client": "kafka-python", "version": "3.0.12"}
    {"ev": "assigned", "partitions": [0, 1], "owned": [0, 1]}     # newly assigned; `owned` = whole set now
    {"ev": "revoked", "partitions": [1], "owned": [0]}
    {"ev": "lost", "partitions": [0], "owned": []}
    {"ev": "records", "recs": [[partition, offset], ...]}
    {"ev": "committed", "offsets": {"0": 12}}                     # next offset to read, per partition
    {"ev": "stall", "ms": 15000} / {"ev": "stall_end"}             # --stall-revoke-ms in action
    {"ev": "produced", "count": 100}
    {"ev": "poll_error", "error": "...", "retriable": true}         # a poll that raised; the driver polls on
    {"ev": "error", "error": "..."} / {"ev": "exit"}
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    line = json.dumps({"t": time.time(), "ev": ev, **fields})
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="interop")
    p.add_argument("--role", choices=["consumer", "producer"], default="consumer")
    p.add_argument("--assignor", choices=["range", "roundrobin", "cooperative-sticky"], default="range")
    p.add_argument("--instance-id", default=None, help="group.instance.id (static membership)")
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic",
                   help="consumer: KIP-848, the coordinator assigns (librdkafka's group.protocol)")
    p.add_argument("--client-id", default=None)
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=300)
    p.add_argument("--rebalance-timeout-ms", type=int, default=10_000,
                   help="max.poll.interval.ms (= the JoinGroup rebalance timeout of these clients)")
    p.add_argument("--stall-revoke-ms", type=int, default=0,
                   help="sleep this long in the first revoke callback that revokes something (a slow member)")
    p.add_argument("--count", type=int, default=100, help="producer: records to write")
    p.add_argument("--debug", default=None, help="client debug logging (librdkafka: e.g. cgrp,protocol)")
    return p.parse_args(argv)


class Ownership:
    """The partitions a member owns, updated from its rebalance callbacks, reported with each event."""

    def __init__(self, stall_revoke_ms: int = 0) -> None:
        self.owned: set[int] = set()
        self.stall_revoke_ms = stall_revoke_ms

    def assigned(self, partitions: list[int], **extra: Any) -> None:
        self.owned |= set(partitions)
        emit("assigned", partitions=sorted(partitions), owned=sorted(self.owned), **extra)

    def revoked(self, partitions: list[int], ev: str = "revoked") -> None:
        self.owned -= set(partitions)
        emit(ev, partitions=sorted(partitions), owned=sorted(self.owned))

    def take_stall(self, partitions: list[int]) -> float:
        """Seconds to stall in this revoke callback (once, and only when something is revoked)."""
        if self.stall_revoke_ms and partitions:
            ms, self.stall_revoke_ms = self.stall_revoke_ms, 0
            return ms / 1000
        return 0.0


class Stop:
    """SIGTERM / SIGINT ask the main loop to close the client gracefully (LeaveGroup)."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_: Any) -> None:
        self.requested = True
