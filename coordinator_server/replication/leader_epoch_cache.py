"""Kafka's LeaderEpochFileCache: which leader epoch started at which offset, and its checkpoint file.

Theory of operation
-------------------
Every batch carries the epoch of the leader that appended it. The cache keeps one entry per epoch, the
offset of its first batch, in increasing order of both. A follower that meets a new leader asks it for the
end offset of its own latest epoch (OffsetsForLeaderEpoch, KIP-101) and truncates to where their logs
agree; ``end_offset_for`` is what answers that question on either side.

The ``leader-epoch-checkpoint`` file is Kafka's text format, so an operator can read it as they would a
broker's::

    0               <- version
    2               <- number of entries
    0 0             <- "epoch start_offset"
    3 1042

It is rewritten whole on every change: temp file, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator_server.storage.segment import write_atomically

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_VERSION = 0
CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"


class CheckpointCorrupted(Exception):
    """The checkpoint file does not parse (Kafka's CheckpointFile throws a KafkaStorageException)."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Kafka's LeaderEpochFileCache: epochs in increasing order with the offset each one started at.

    With a ``checkpoint_path`` every change is flushed to it before the method returns, as Kafka's
    ``flush`` does under the write lock.
    """

    __slots__ = ("_entries", "checkpoint_path")

    def __init__(self, entries: list[EpochEntry] | None = None, checkpoint_path: Path | None = None) -> None:
        self._entries: list[EpochEntry] = list(entries or [])
        self.checkpoint_path = checkpoint_path

    @classmethod
    def load(cls, checkpoint_path: Path) -> LeaderEpochCache:
        """Read the checkpoint if it exists (an absent file is an empty cache, as for a new replica)."""
        if not checkpoint_path.exists():
            return cls(checkpoint_path=checkpoint_path)
        text = checkpoint_path.read_text(encoding="utf-8")
        cache = cls()
        # As Kafka's constructor: each entry goes through assign, so a file out of order comes back monotonic.
        for entry in parse_checkpoint(text, checkpoint_path):
            if entry.epoch < 0 or entry.start_offset < 0:
                raise CheckpointCorrupted(f"negative entry {entry} in {checkpoint_path}")
            cache.assign(entry.epoch, entry.start_offset)
        cache.checkpoint_path = checkpoint_path
        return cache

    # ------------------------------------------------------------------------------------------ reads

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_epoch(self) -> int | None:
        """Kafka's latestEpoch: the newest epoch, or None for an empty cache."""
        return self._entries[-1].epoch if self._entries else None

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds offset (Kafka's epochForOffset)."""
        found = None
        for entry in self._entries:
            if entry.start_offset <= offset:
                found = entry.epoch
            else:
                break
        return found

    def start_offset_of(self, epoch: int) -> int | None:
        for entry in self._entries:
            if entry.epoch == epoch:
                return entry.start_offset
        return None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's LeaderEpochFileCache.endOffsetFor: (largest epoch <= requested, the offset it ended at).

        - UNDEFINED_EPOCH asked (a bootstrapping follower): (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        - The latest epoch asked: it is still being written, so it ends at the log end offset.
        - An epoch with no later epoch known (cannot happen while the latest is the largest): undefined.
        - An epoch older than every entry: (requested, start offset of the first entry) — the largest offset
          it can have ended at, since epochs in between may have been truncated away from the start.
        - Otherwise the floor entry's epoch and the start offset of the first epoch after the requested one.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        latest = self.latest_epoch()
        if latest is not None and latest == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for entry in self._entries:
            if entry.epoch <= requested_epoch:
                floor = entry
            else:
                break
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    # ----------------------------------------------------------------------------------------- writes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Kafka's LeaderEpochFileCache.assign: record that epoch starts at start_offset.

        No change (returns False) when the latest entry is the same epoch starting at or before
        start_offset: a batch appended later in the epoch says nothing new. Otherwise every entry that
        is not strictly older in *both* epoch and offset is removed first
        (maybeTruncateNonMonotonicEntries), so the cache stays monotonic in both; a follower's log may
        carry such entries after it accepted a new leader's batches over a truncated tail.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be >= 0")
        latest = self.latest_entry()
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Kafka's truncateFromEnd: the log was cut to end_offset; drop epochs that start at or after it."""
        latest = self.latest_entry()
        if end_offset >= 0 and latest is not None and latest.start_offset >= end_offset:
            while self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries.pop()
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Kafka's truncateFromStart: the log now starts at start_offset (retention, DeleteRecords).

        Entries starting at or before it are removed, and the last of them comes back starting at
        start_offset, so the epoch that covers the new log start is still known.
        """
        removed = [e for e in self._entries if e.start_offset <= start_offset]
        if not removed:
            return
        self._entries = [EpochEntry(removed[-1].epoch, start_offset), *self._entries[len(removed):]]
        self._flush()

    def clear(self) -> None:
        """Kafka's clearAndFlush (a replica whose log was deleted)."""
        self._entries = []
        self._flush()

    def _flush(self) -> None:
        if self.checkpoint_path is not None:
            write_atomically(self.checkpoint_path, format_checkpoint(self._entries))


def format_checkpoint(entries: list[EpochEntry]) -> str:
    """Kafka's CheckpointFile text: version, count, then one "epoch start_offset" line per entry."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(f"{e.epoch} {e.start_offset}" for e in entries)
    return "\n".join(lines) + "\n"


def parse_checkpoint(text: str, path: Path | None = None) -> list[EpochEntry]:
    """Parse Kafka's CheckpointFile text; anything irregular raises CheckpointCorrupted naming the file."""
    where = f" in {path}" if path is not None else ""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CheckpointCorrupted(f"malformed header{where}: {lines[:2]!r}") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointCorrupted(f"unrecognized checkpoint version {version}{where}")
    body = lines[2:]
    if len(body) != count:
        raise CheckpointCorrupted(f"expected {count} entries but found {len(body)}{where}")
    entries = []
    for line in body:
        parts = line.split(" ")
        if len(parts) != 2:
            raise CheckpointCorrupted(f"malformed line {line!r}{where}")
        try:
            entries.append(EpochEntry(int(parts[0]), int(parts[1])))
        except ValueError:
            raise CheckpointCorrupted(f"malformed line {line!r}{where}") from None
    return entries
