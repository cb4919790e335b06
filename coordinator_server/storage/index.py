"""The sparse offset index of one segment, Kafka's `%020d.index` format.

Each entry is 8 bytes, `relative offset int32 | position int32`: the last offset of a batch minus the
segment's base offset, and the byte position where that batch starts. An entry is added whenever more than
`index_interval_bytes` (Kafka's index.interval.bytes, 4096) were appended since the previous one, so a
lookup lands at most ~4 KiB plus one batch before the batch it wants, and the index costs 8 bytes per
4 KiB of log.

Only the active segment keeps its entries in memory (it is the one growing). A sealed segment's index
lives in its file and is searched there with a handful of `pread`s, so memory does not grow with the
history. The file is written whole when the segment is sealed (rolled, or at a clean shutdown) and fsynced
before the recovery point moves past the segment; an index that fails `load`'s sanity checks is simply
rebuilt by scanning the segment, so a torn or stale index file costs time, never correctness.
"""
from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path
from typing import Final

ENTRY: Final = struct.Struct(">ii")
DEFAULT_INDEX_INTERVAL_BYTES: Final = 4096  # Kafka's index.interval.bytes
_INT32_MAX: Final = (1 << 31) - 1


def index_name(base_offset: int) -> str:
    return f"{base_offset:020d}.index"


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int, interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self.path = path
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        # In memory while the segment is active; None once sealed (then the file is the index).
        self._rel: array[int] | None = array("i")
        self._pos: array[int] | None = array("i")
        self._bytes_since_entry = 0

    @property
    def in_memory(self) -> bool:
        return self._rel is not None

    def __len__(self) -> int:
        if self._rel is not None:
            return len(self._rel)
        try:
            return os.path.getsize(self.path) // ENTRY.size
        except FileNotFoundError:
            return 0

    def on_batch(self, last_offset: int, position: int, size: int) -> None:
        """A batch of `size` bytes ending at `last_offset` was appended at `position` (Kafka's
        LogSegment.append: index the batch when the interval was exceeded, then count its bytes)."""
        assert self._rel is not None and self._pos is not None, "a sealed segment takes no appends"
        rel = last_offset - self.base_offset
        if self._bytes_since_entry > self.interval_bytes and rel <= _INT32_MAX and position <= _INT32_MAX:
            self._rel.append(rel)
            self._pos.append(position)
            self._bytes_since_entry = 0
        self._bytes_since_entry += size

    def lookup(self, offset: int) -> int:
        """Start position of the last indexed batch whose last offset is <= `offset` (0 if none)."""
        target = offset - self.base_offset
        if target < 0:
            return 0
        if self._rel is not None and self._pos is not None:
            i = bisect.bisect_right(self._rel, min(target, _INT32_MAX)) - 1
            return self._pos[i] if i >= 0 else 0
        return _lookup_file(self.path, min(target, _INT32_MAX))

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the last entry."""
        if self._rel is not None and self._pos is not None:
            return (self.base_offset + self._rel[-1], self._pos[-1]) if self._rel else None
        entries = _read_file(self.path)
        return (self.base_offset + entries[0][-1], entries[1][-1]) if entries and entries[0] else None

    def to_bytes(self) -> bytes:
        assert self._rel is not None and self._pos is not None
        out = bytearray(ENTRY.size * len(self._rel))
        for i, (rel, pos) in enumerate(zip(self._rel, self._pos, strict=True)):
            ENTRY.pack_into(out, i * ENTRY.size, rel, pos)
        return bytes(out)

    def write_file(self) -> None:
        """Write the in-memory entries to the index file (not fsynced: the caller's sync plan does)."""
        with open(self.path, "wb") as f:
            f.write(self.to_bytes())

    def seal(self) -> None:
        """Drop the in-memory entries: lookups read the file from now on."""
        self._rel = self._pos = None

    def load(self, segment_size: int) -> bool:
        """Load the entries from the file into memory (for the active segment) if it passes the sanity
        checks; False when it does not (the caller rebuilds it)."""
        entries = _read_file(self.path, segment_size)
        if entries is None:
            return False
        self._rel, self._pos = entries
        return True

    def reset(self) -> None:
        self._rel, self._pos = array("i"), array("i")
        self._bytes_since_entry = 0

    def set_bytes_since_entry(self, n: int) -> None:
        self._bytes_since_entry = n


def _read_file(path: Path, segment_size: int | None = None) -> tuple[array[int], array[int]] | None:
    """The entries, or None when the file is missing or fails Kafka's sanity checks (whole entries,
    strictly increasing offsets and positions, positions inside the segment)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) % ENTRY.size:
        return None
    rel, pos = array("i"), array("i")
    prev_rel = prev_pos = -1
    for r, p in ENTRY.iter_unpack(data):
        if r <= prev_rel or p <= prev_pos or r < 0 or (segment_size is not None and p >= segment_size):
            return None
        rel.append(r)
        pos.append(p)
        prev_rel, prev_pos = r, p
    return rel, pos


def _lookup_file(path: Path, target: int) -> int:
    """Binary search of the index file with preads: the last entry whose relative offset <= target."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        n = os.fstat(fd).st_size // ENTRY.size
        lo, hi, found = 0, n - 1, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            rel, pos = ENTRY.unpack(os.pread(fd, ENTRY.size, mid * ENTRY.size))
            if rel <= target:
                found, lo = pos, mid + 1
            else:
                hi = mid - 1
        return found
    finally:
        os.close(fd)
