"""Which leader epoch started at which offset, per partition replica (Kafka's LeaderEpochFileCache), and
its `leader-epoch-checkpoint` file.

A leader appends an entry when it takes the partition (its epoch starts at its log end); a follower adds
one whenever a fetched batch carries a newer epoch than its latest. The cache answers OffsetForLeaderEpoch:
where a given epoch ends, which is where a follower's log must be truncated to agree with the leader's.
"""
from __future__ import annotations

import bisect
from pathlib import Path

from coordinator_server.storage.segment import write_atomically

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_CHECKPOINT_VERSION = 0


class LeaderEpochCache:
    def __init__(self, path: Path | None = None, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self._epochs: list[int] = [e for e, _ in entries or []]
        self._offsets: list[int] = [o for _, o in entries or []]

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache:
        """Read the checkpoint (Kafka's text format: version, count, then "epoch start_offset" lines)."""
        if not path.exists():
            return cls(path)
        lines = path.read_text(encoding="utf-8").split("\n")
        if int(lines[0]) != _CHECKPOINT_VERSION:
            raise ValueError(f"{path}: unknown checkpoint version {lines[0]}")
        count = int(lines[1])
        entries = []
        for line in lines[2:2 + count]:
            epoch, offset = line.split()
            entries.append((int(epoch), int(offset)))
        return cls(path, entries)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (Kafka's assign): ignored unless the epoch is newer
        than the latest; entries at or past the new start offset are dropped first (they can only be
        leftovers of a log that was truncated). True when the cache changed."""
        if epoch < 0 or start_offset < 0:
            return False
        if self._epochs and epoch <= self._epochs[-1]:
            return False
        while self._offsets and self._offsets[-1] >= start_offset:
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's endOffsetFor: for the latest epoch, the log end offset; for an
        older epoch it holds, the start offset of the next epoch it holds; for an epoch it never had, the
        largest epoch below it with that epoch's end; UNDEFINED when nothing is at or below it."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        # The first entry whose epoch is greater than the requested one.
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == 0:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # older than every epoch we know
        if higher == len(self._epochs):
            return self._epochs[-1], log_end_offset  # newer than our latest: ours runs to our end
        return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: epochs starting at or after it are gone."""
        while self._offsets and self._offsets[-1] >= end_offset:
            self._epochs.pop()
            self._offsets.pop()

    def flush(self) -> None:
        if self.path is None:
            return
        lines = [str(_CHECKPOINT_VERSION), str(len(self._epochs))]
        lines += [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        write_atomically(self.path, "\n".join(lines) + "\n")
