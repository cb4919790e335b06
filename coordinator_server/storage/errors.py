"""Storage failures, by severity.

`StorageError` is per request: an append could not be made durable, the waiting clients get a retriable
error and nothing was applied. `CorruptLogError` and `RecordDecodeError` are per process: the log is
damaged before its tail, or a record cannot be read, so the server refuses to start rather than load a
partial state.
"""
from __future__ import annotations

from pathlib import Path


class StorageError(Exception):
    """An append or fsync failed. `errno` is the OS error number when there was one (e.g. ENOSPC)."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno


class RecordTooLargeError(StorageError):
    """A batch over the log's maximum size (Kafka's message.max.bytes): refused before anything is written."""


class CorruptLogError(Exception):
    """A bad batch that is not a torn tail: recovery stopped and changed nothing on disk."""

    def __init__(self, path: Path | str, position: int, reason: str) -> None:
        self.path = Path(path)
        self.position = position
        self.reason = reason
        super().__init__(
            f"corrupt log segment {self.path} at byte position {position}: {reason}. "
            "Nothing was changed on disk. `coordinator-server repair-log "
            f"{self.path.parent}` verifies every batch and reports the first bad one; with --truncate it "
            "backs the affected files up and cuts the log there, losing the records from that batch on. "
            f"Alternatively inspect the file (kafka-dump-log.sh --offsets-decoder --files {self.path}) and "
            "move the segment aside to start without the records it holds."
        )


class RecordDecodeError(Exception):
    """A `__consumer_offsets` key or value of a known record type does not decode."""
