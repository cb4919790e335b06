"""Compaction of a `__consumer_offsets` partition, after Kafka's log cleaner.

Theory of operation
-------------------
Only the newest record per key matters to replay (`group.loader` applies records in order, the latest per
key wins, a tombstone removes its key), so the cleaner rewrites the *sealed* segments keeping, for every
key (the raw key bytes: a GroupMetadataKey or an OffsetCommitKey), only its newest record, and dropping
tombstones older than `delete_retention_ms` (Kafka's log.cleaner.delete.retention.ms). Dropping such a
tombstone changes nothing for replay, because every older record of its key was dropped with it. The
active segment is never touched, so appends carry on meanwhile.

1. `snapshot` (on the thread that appends): the sealed segments and the first offset past them.
2. `clean` (in the cleaner's own thread; the heavy part): pass 1 maps each key to its newest offset, pass 2
   writes the survivors. Sources are grouped like Kafka's `groupSegmentsBySize` (consecutive, together at
   most segment_bytes) and each group becomes one `X.log.cleaned` + `X.index.cleaned`, X being the group's
   first base offset (Kafka's name, which the swap recovery below relies on). Each batch keeps its
   surviving records' offsets and timestamps, so offsets get gaps within and between batches; a batch
   with no survivor disappears. Both files are fsynced.
3. `swap_in_files` (in a thread: only renames, unlinks and fsyncs of files no append touches): write the
   cleaner checkpoint (below it recovery accepts offset gaps), rename every `.cleaned` to `.swap` and
   fsync the directory — the commit point — then delete the old segments, rename the swaps into place and
   fsync the directory; then `swap_in_memory`, on the thread that appends, replaces the segments in
   memory. A crash before the commit leaves `.cleaned` files, which recovery deletes (rollback); after it,
   `.swap` files, which recovery completes.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from coordinator_server.storage.batch import (
    LEADER_EPOCH,
    LEADER_EPOCH_POS,
    BatchInfo,
    DefaultRecordBatch,
    LogRecord,
    batch_records,
    build_batch,
    read_records,
)
from coordinator_server.storage.index import index_name
from coordinator_server.storage.log import PartitionLog
from coordinator_server.storage.segment import Segment, fsync_dir, segment_name, write_cleaner_offset

log = structlog.get_logger(__name__)

DEFAULT_MIN_CLEANABLE_DIRTY_RATIO = 0.5  # Kafka's min.cleanable.dirty.ratio
DEFAULT_DELETE_RETENTION_MS = 86_400_000  # Kafka's log.cleaner.delete.retention.ms
DEFAULT_CLEANER_BACKOFF_MS = 15_000  # Kafka's log.cleaner.backoff.ms: how often to check the ratio
_MAX_RELATIVE_OFFSET = (1 << 31) - 1
_CLEANED = ".cleaned"
_SWAP = ".swap"


class CleanerAborted(Exception):
    """The log is closing: the cleaning stopped and its files were deleted."""


@dataclass
class Snapshot:
    sources: list[Segment]
    end_offset: int  # the active segment's base: everything below is sealed
    cleaner_offset: int


@dataclass
class CleanedGroup:
    sources: list[Segment]
    segment: Segment  # at its final name; the files are still `.cleaned`


@dataclass
class CleanResult:
    groups: list[CleanedGroup]
    end_offset: int
    records_read: int = 0
    records_kept: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


def dirty_ratio(plog: PartitionLog) -> float:
    """Bytes of sealed segments not cleaned yet over all sealed bytes (Kafka's cleanable ratio)."""
    sealed = plog.sealed_segments()
    total = sum(s.size for s in sealed)
    dirty = sum(s.size for s in sealed if s.base_offset >= plog.cleaner_offset)
    return dirty / total if total else 0.0


def snapshot(plog: PartitionLog) -> Snapshot | None:
    """What to clean; call on the thread that appends (the list of segments changes on a roll)."""
    sources = plog.sealed_segments()
    if not sources:
        return None
    return Snapshot(sources, plog._segments[-1].base_offset, plog.cleaner_offset)


def clean(snap: Snapshot, now_ms: int, delete_retention_ms: int, segment_bytes: int,
          stop: threading.Event | None = None) -> CleanResult:
    """Write the cleaned copies of `snap`'s segments as fsynced `.cleaned` files (any thread)."""
    latest: dict[bytes, int] = {}
    result = CleanResult([], snap.end_offset)
    for seg in snap.sources:
        for rec in _records(seg, snap.cleaner_offset, stop):
            result.records_read += 1
            if rec.key is not None:
                latest[rec.key] = rec.offset
    horizon = now_ms - delete_retention_ms
    try:
        for group in _group_by_size(snap.sources, segment_bytes):
            _clean_group(group, latest, horizon, snap.cleaner_offset, result, stop)
    except BaseException:
        discard(result)
        raise
    result.bytes_before = sum(s.size for s in snap.sources)
    result.bytes_after = sum(g.segment.size for g in result.groups)
    return result


def _records(seg: Segment, cleaner_offset: int, stop: threading.Event | None) -> Iterator[LogRecord]:
    with open(seg.path, "rb") as f:
        for _pos, raw in read_records(f, seg.size):
            _check_stop(stop)
            yield from batch_records(DefaultRecordBatch(raw), gaps=seg.base_offset < cleaner_offset)


def _group_by_size(sources: list[Segment], segment_bytes: int) -> Iterator[list[Segment]]:
    group: list[Segment] = []
    size = 0
    for seg in sources:
        if group and (size + seg.size > segment_bytes
                      or seg.next_offset - group[0].base_offset > _MAX_RELATIVE_OFFSET):
            yield group
            group, size = [], 0
        group.append(seg)
        size += seg.size
    if group:
        yield group


def _clean_group(group: list[Segment], latest: dict[bytes, int], horizon: int, cleaner_offset: int,
                 result: CleanResult, stop: threading.Event | None) -> CleanedGroup:
    pdir = group[0].path.parent
    base = group[0].base_offset
    out = Segment.at(pdir, base, 0, 0, group[0].index.interval_bytes)
    log_tmp = pdir / (segment_name(base) + _CLEANED)
    index_tmp = pdir / (index_name(base) + _CLEANED)
    cleaned = CleanedGroup(group, out)
    result.groups.append(cleaned)  # before writing: an abort deletes this one's files too
    with open(log_tmp, "wb") as f:
        for seg in group:
            with open(seg.path, "rb") as src:
                for _pos, raw in read_records(src, seg.size):
                    _check_stop(stop)
                    kept = [r for r in batch_records(DefaultRecordBatch(raw), gaps=seg.base_offset < cleaner_offset)
                            if r.key is None or (latest[r.key] == r.offset
                                                 and not (r.value is None and r.timestamp_ms <= horizon))]
                    if not kept:
                        continue
                    first = kept[0].offset
                    batch = build_batch([(r.key, r.value) for r in kept], first, kept[0].timestamp_ms,
                                        offset_deltas=[r.offset - first for r in kept],
                                        timestamps=[r.timestamp_ms for r in kept],
                                        leader_epoch=LEADER_EPOCH.unpack_from(raw, LEADER_EPOCH_POS)[0])
                    out.on_batch(BatchInfo.parse(batch), out.size)
                    f.write(batch)
                    out.size += len(batch)
                    result.records_kept += len(kept)
        f.flush()
        os.fsync(f.fileno())
    with open(index_tmp, "wb") as f:
        f.write(out.index.to_bytes())
        f.flush()
        os.fsync(f.fileno())
    out.index.seal()
    return cleaned


def _check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise CleanerAborted()


def discard(result: CleanResult) -> None:
    """Delete the `.cleaned` files of a cleaning that will not be swapped in."""
    for g in result.groups:
        for path in _cleaned_paths(g.segment):
            path.unlink(missing_ok=True)


def _cleaned_paths(seg: Segment) -> tuple[Path, Path]:
    return (seg.index.path.with_name(seg.index.path.name + _CLEANED),
            seg.path.with_name(seg.path.name + _CLEANED))


def swap_in(plog: PartitionLog, result: CleanResult) -> None:
    """Replace the cleaned segments on disk and in memory (`swap_in_files`, then `swap_in_memory`)."""
    swap_in_files(plog, result)
    swap_in_memory(plog, result)


def swap_in_files(plog: PartitionLog, result: CleanResult) -> None:
    """Replace the cleaned segments on disk (any thread: only the sealed segments' files, the cleaner
    checkpoint and directory fsyncs, none of which an append touches)."""
    pdir = plog.directory
    # Before the commit: once the swaps exist, recovery must already accept the gaps they have.
    write_cleaner_offset(pdir, result.end_offset)
    for g in result.groups:
        index_c, log_c = _cleaned_paths(g.segment)
        os.replace(index_c, _with_suffix(g.segment.index.path, _SWAP))
        os.replace(log_c, _with_suffix(g.segment.path, _SWAP))
    fsync_dir(pdir)  # the commit point: from here on recovery completes the swap
    for g in result.groups:
        for old in g.sources:
            old.path.unlink(missing_ok=True)
            old.index.path.unlink(missing_ok=True)
        os.replace(_with_suffix(g.segment.index.path, _SWAP), g.segment.index.path)
        os.replace(_with_suffix(g.segment.path, _SWAP), g.segment.path)
    fsync_dir(pdir)


def swap_in_memory(plog: PartitionLog, result: CleanResult) -> None:
    """Replace the cleaned segments in memory, after `swap_in_files`; call on the thread that appends
    (the list of segments changes on a roll)."""
    plog.cleaner_offset = result.end_offset
    for g in result.groups:
        plog.replace_segments(g.sources, [g.segment])
    log.info("log_cleaned", dir=str(plog.directory), segments_before=sum(len(g.sources) for g in result.groups),
             segments_after=len(result.groups), records_read=result.records_read,
             records_kept=result.records_kept, bytes_before=result.bytes_before, bytes_after=result.bytes_after)


def _with_suffix(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)
