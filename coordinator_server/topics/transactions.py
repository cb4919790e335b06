"""The transactions of one partition: which producers have one open, the last stable offset, and the
aborted-transaction index that read_committed fetches are answered with.

Theory of operation. A producer's first transactional batch opens its transaction at that batch's first
offset; the COMMIT or ABORT marker the transaction coordinator writes (a control batch) closes it at the
marker's own offset. A closed transaction stays *unreplicated* until the high watermark passes its marker.
The first unstable offset is the oldest first offset of a transaction open or unreplicated; the last
stable offset (LSO) is that offset when it is below the high watermark, else the high watermark: a
read_committed consumer reads below it only. Each aborted transaction is an index entry (producer id, first
offset, last offset = the marker's, and the LSO when it was aborted: the first offset of the oldest other
open transaction, or the marker's offset + 1), which a fetch of [start, upper) is answered with so the
client can skip that producer's records. Synchronous and clock-free; the same calls rebuild it at load.

Markers themselves: a control record's key is an int16 version (0) and an int16 type (ABORT 0, COMMIT 1);
its value an int16 version (0) and the int32 coordinator epoch.
"""
from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Final

ABORT: Final = 0
COMMIT: Final = 1
_MARKER_KEY: Final = struct.Struct(">hh")
_MARKER_VALUE: Final = struct.Struct(">hi")
_ABORTED_ENTRY: Final = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
ABORTED_ENTRY_SIZE: Final = _ABORTED_ENTRY.size


class BadMarker(ValueError):
    pass


def marker_key(commit: bool) -> bytes:
    return _MARKER_KEY.pack(0, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _MARKER_VALUE.pack(0, coordinator_epoch)


def parse_marker(key: bytes | None, value: bytes | None) -> tuple[bool, int]:
    """(commit?, coordinator epoch) of a control record."""
    if key is None or len(key) < _MARKER_KEY.size or value is None or len(value) < _MARKER_VALUE.size:
        raise BadMarker("a control record needs a 4-byte key and a 6-byte value")
    _version, kind = _MARKER_KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        raise BadMarker(f"unknown control record type {kind}")
    _version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return kind == COMMIT, coordinator_epoch


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ABORTED_ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset,
                                   self.last_stable_offset)

    @classmethod
    def from_bytes(cls, data: bytes, at: int = 0) -> AbortedTxn:
        _version, pid, first, last, lso = _ABORTED_ENTRY.unpack_from(data, at)
        return cls(pid, first, last, lso)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class PartitionTransactions:
    def __init__(self) -> None:
        self._open: dict[int, int] = {}  # producer id -> first offset, in the order they opened
        self._unreplicated: deque[CompletedTxn] = deque()
        self._aborted: list[AbortedTxn] = []

    @property
    def idle(self) -> bool:
        """Nothing open or unreplicated: the last stable offset is the high watermark."""
        return not self._open and not self._unreplicated

    def is_open(self, producer_id: int) -> bool:
        return producer_id in self._open

    def open_transactions(self) -> dict[int, int]:
        return dict(self._open)

    @property
    def aborted(self) -> list[AbortedTxn]:
        return list(self._aborted)

    def on_transactional_batch(self, producer_id: int, first_offset: int) -> None:
        """A transactional data batch was appended: it opens the producer's transaction unless one is open."""
        self._open.setdefault(producer_id, first_offset)

    def on_marker(self, producer_id: int, marker_offset: int, commit: bool) -> CompletedTxn | None:
        """A marker was appended at `marker_offset`: the producer's open transaction, if any, ends there.
        None: nothing was open (a marker for a producer that wrote nothing here is normal)."""
        first = self._open.pop(producer_id, None)
        if first is None:
            return None
        done = CompletedTxn(producer_id, first, marker_offset, not commit)
        self._unreplicated.append(done)
        if not commit:
            others = min(self._open.values(), default=None)
            self._aborted.append(AbortedTxn(producer_id, first, marker_offset,
                                            marker_offset + 1 if others is None else others))
        return done

    def on_high_watermark(self, high_watermark: int) -> None:
        while self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            self._unreplicated.popleft()

    def first_unstable_offset(self) -> int | None:
        candidates = list(self._open.values())
        if self._unreplicated:
            candidates.append(min(t.first_offset for t in self._unreplicated))
        return min(candidates, default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        unstable = self.first_unstable_offset()
        return unstable if unstable is not None and unstable < high_watermark else high_watermark

    def aborted_between(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [start, upper) must be told of: those that end
        at or after `start` and began before `upper`. The walk stops at the first entry whose LSO reaches
        `upper`: no transaction aborted after it began before `upper`."""
        out = []
        for entry in self._aborted:
            if entry.last_offset >= start and entry.first_offset < upper:
                out.append(entry)
            if entry.last_stable_offset >= upper:
                break
        return out

    def truncate_to(self, offset: int) -> None:
        """The log was cut back to `offset`: what began at or after it is forgotten, and a transaction whose
        marker was cut away is open again (as a replay of the log that is left would find it)."""
        reopened = {t.producer_id: t.first_offset for t in self._unreplicated
                    if t.first_offset < offset <= t.last_offset}
        kept = {pid: first for pid, first in self._open.items() if first < offset}
        self._open = dict(sorted({**kept, **reopened}.items(), key=lambda item: item[1]))
        self._unreplicated = deque(t for t in self._unreplicated if t.last_offset < offset)
        self._aborted = [a for a in self._aborted if a.last_offset < offset]
