"""Reads of a partition log's segments (storage/log.py's `PartitionLog` answers with these): a fetch's
whole batches from an offset, the batch holding an offset, lookups by timestamp, what retention decides on,
and replay's checked walk over every batch.

Each takes the segment list as it is when called and changes no log state: only a segment's cached largest
timestamp, filled in from its batch headers the first time one is asked for. A read at an offset bisects
the segments' base offsets, seeks to the indexed position at or before it and walks at most ~4 KiB of batch
headers (`locate`).
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from pathlib import Path

from coordinator_server.storage.batch import (
    BASE_OFFSET,
    LOG_OVERHEAD,
    BadBatch,
    BatchInfo,
    DefaultRecordBatch,
    check_batch,
    read_records,
    walk_headers,
)
from coordinator_server.storage.errors import CorruptLogError
from coordinator_server.storage.segment import Segment


def checked_batches(segments: list[Segment], cleaner_offset: int) -> Iterator[tuple[Path, int, bytes, bool]]:
    """(segment, position, batch bytes, gaps) of every batch, in offset order, up to the end of the
    log as it is when this is called: what `PartitionLog.read()` decodes, for a caller that parses the
    records itself (replay). A caller that finds the records unparseable raises CorruptLogError(segment,
    position, ...), as `read()` does; `gaps` says whether record offsets may skip (cleaned batch).

    Each batch is CRC-checked exactly once per start: segments scanned by recovery are not checked
    again, trusted ones (never read at open) are checked here. Header offsets are re-checked.
    """
    snapshot = [(s.path, s.size, s.verified, s.base_offset < cleaner_offset) for s in segments]
    expected = segments[0].base_offset if segments else 0
    header = DefaultRecordBatch.HEADER_STRUCT
    for path, size, verified, gaps in snapshot:
        with open(path, "rb") as f:
            try:
                for pos, raw in read_records(f, size):
                    try:
                        if not verified:
                            check_batch(raw, expected, gaps=True)
                        base = BASE_OFFSET.unpack_from(raw)[0]
                        # Offsets only increase; without compaction, contiguously within a segment.
                        if base < expected or (not gaps and pos > 0 and base != expected):
                            raise BadBatch(f"base offset {base}, expected {expected}")
                    except BadBatch as e:
                        raise CorruptLogError(path, pos, e.reason) from e
                    yield path, pos, raw, gaps
                    expected = base + header.unpack_from(raw)[6] + 1  # LastOffsetDelta
            except BadBatch as e:
                raise CorruptLogError(path, 0, f"batch changed on disk after recovery: {e.reason}") from e


def read_batches(segments: list[Segment], next_offset: int, offset: int, max_bytes: int, min_one: bool,
                 max_offset: int | None) -> bytes:
    """Whole batches from the one holding `offset` on, up to `max_bytes` (but at least one batch when
    `min_one`: KIP-74), from a single segment as Kafka reads. b"" at or past the end. With `max_offset`
    (a replicated partition's high watermark, always a batch boundary) no batch at or past it is read."""
    located = locate(segments, next_offset, offset)
    if located is None or (max_offset is not None and located[1].base_offset >= max_offset):
        return b""
    seg, info = located
    with open(seg.path, "rb") as f:
        buf = os.pread(f.fileno(), max(0, min(max_bytes, seg.size - info.position)), info.position)
        end = 0
        while end + LOG_OVERHEAD <= len(buf):
            if max_offset is not None and int.from_bytes(buf[end:end + 8], "big", signed=True) >= max_offset:
                return buf[:end]
            total = LOG_OVERHEAD + int.from_bytes(buf[end + 8:end + 12], "big", signed=True)
            if end + total > len(buf):
                break
            end += total
        if end == 0:
            return os.pread(f.fileno(), info.size, info.position) if min_one else b""
        return buf[:end]


def batch_at(segments: list[Segment], next_offset: int, offset: int) -> bytes | None:
    """The one whole batch holding `offset`, or None past the end."""
    located = locate(segments, next_offset, offset)
    if located is None:
        return None
    seg, info = located
    with open(seg.path, "rb") as f:
        return os.pread(f.fileno(), info.size, info.position)


def bytes_from(segments: list[Segment], next_offset: int, offset: int) -> int:
    """How many bytes of batches a fetch at `offset` could return (0 at or past the end)."""
    located = locate(segments, next_offset, offset)
    if located is None:
        return 0
    seg, info = located
    later = segments[segments.index(seg) + 1:]
    return seg.size - info.position + sum(s.size for s in later)


def first_batch_with_timestamp(segments: list[Segment], timestamp_ms: int) -> int | None:
    """Base offset of the first batch whose max timestamp is >= timestamp_ms (Kafka's time index
    lookup at batch granularity), or None."""
    for seg in list(segments):
        if max_timestamp(seg) < timestamp_ms:
            continue
        for info in headers(seg):
            if info.max_timestamp >= timestamp_ms:
                return info.base_offset
    return None


def batch_infos(segments: list[Segment]) -> Iterator[BatchInfo]:
    """Every batch header in log order, read from disk (startup: producer state is rebuilt from it)."""
    for seg in list(segments):
        known = seg.max_timestamp is not None
        best, best_base = -1, -1
        for info in headers(seg):
            if info.max_timestamp > best:
                best, best_base = info.max_timestamp, info.base_offset
            yield info
        if not known and seg.size:
            seg.max_timestamp, seg.max_timestamp_base = best, best_base


def segment_stats(segments: list[Segment]) -> list[tuple[int, int, int]]:
    """(base offset, size in bytes, largest timestamp or the file's mtime if it has no batch) per
    segment, oldest first: what retention decides on."""
    return [(s.base_offset, s.size, max_timestamp(s) if s.size else s.created_ms) for s in segments]


def max_timestamp_offset(segments: list[Segment]) -> tuple[int, int] | None:
    """(base offset, max timestamp) of the first batch holding the log's largest timestamp."""
    best: tuple[int, int] | None = None
    for seg in list(segments):
        if seg.size and (best is None or max_timestamp(seg) > best[1]):
            best = (seg.max_timestamp_base, max_timestamp(seg))
    return best


def max_timestamp(seg: Segment) -> int:
    """The segment's largest timestamp (-1 if empty), read from its batch headers the first time."""
    if seg.max_timestamp is None:
        best, best_base = -1, -1
        for info in headers(seg):
            if info.max_timestamp > best:
                best, best_base = info.max_timestamp, info.base_offset
        seg.max_timestamp, seg.max_timestamp_base = best, best_base
    return seg.max_timestamp


def headers(seg: Segment, start: int = 0) -> Iterator[BatchInfo]:
    size = seg.size
    with open(seg.path, "rb") as f:
        try:
            yield from walk_headers(f.fileno(), start, size)
        except BadBatch as e:
            raise CorruptLogError(seg.path, start, f"batch changed on disk after recovery: {e.reason}") from e


def locate(segments: list[Segment], next_offset: int, offset: int) -> tuple[Segment, BatchInfo] | None:
    """The segment and header of the batch holding `offset`, or of the first one after it (a gap):
    the index gives a position at or before it, then at most ~4 KiB of headers are walked."""
    if offset >= next_offset:
        return None
    k = max(0, bisect.bisect_right([s.base_offset for s in segments], offset) - 1)
    for seg in segments[k:]:
        start = seg.index.lookup(offset) if seg.base_offset <= offset else 0
        for info in headers(seg, start):
            if info.last_offset >= offset:
                return seg, info
    return None

