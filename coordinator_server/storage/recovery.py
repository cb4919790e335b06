"""Recovery of one partition directory at open: finish a cleaner swap, trust what the recovery point
covers, scan the rest with CRCs, truncate a torn tail.

Theory of operation
-------------------
Every append is one batch and one write at the end of the active (last) segment, so a crash can only
leave a *torn tail*: part of the last batch, or zeros the file system allocated but never filled.

1. **Swaps** (`complete_swaps`). The cleaner commits a cleaned segment by renaming `X.log.cleaned` to
   `X.log.swap`. A `.swap` found at open is therefore complete and fsynced: the old segments it replaces
   (base offsets from X up to the swap's next offset) are deleted and it is renamed into place. A
   `.cleaned` file is an unfinished cleaning and is deleted: the old segments are still all there.
2. **Trust** (`recover`). `recovery-point.checkpoint` says below which offset every batch is fsynced and
   was verified (written after a roll's fsync, after recovery, and at clean shutdown with the last
   segment's size). A segment wholly below it is *trusted*: its `.index` is loaded and sanity-checked and
   its end is found from the last index entry, without reading its batches. Only the segments from the
   recovery point on are scanned with CRC verification, and their index is rebuilt. No checkpoint: all are.
3. **Torn tail vs corruption** in a scanned segment: a bad batch at the end of the last segment (short,
   failing its CRC, or zeros) with nothing that parses as a valid batch after it is a torn tail and is
   truncated with a warning; anything else raises `CorruptLogError` naming file and byte position, and
   nothing on disk has been changed (all checks run before the truncation). Nothing is ever skipped.

Offsets: within a segment the cleaner never touched, batches must be contiguous (this writer leaves no
gap, and BaseOffset is outside the CRC, so a gap means a damaged header). Below the cleaner checkpoint,
compaction removed records, so offsets only have to increase; between segments, a later segment may
always start past the end of the previous one (compaction, or an operator who moved a segment aside).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from coordinator_server.storage.batch import BadBatch, read_batch, valid_batch_after, walk_headers
from coordinator_server.storage.errors import CorruptLogError
from coordinator_server.storage.index import index_name
from coordinator_server.storage.segment import (
    SEGMENT_NAME,
    RecoveryPoint,
    Segment,
    fsync_dir,
    fsync_path,
    read_cleaner_offset,
    read_recovery_point,
)

log = structlog.get_logger("coordinator_server.storage.log")


@dataclass
class ScanResult:
    good_end: int  # byte position after the last good batch
    next_offset: int
    bad: BadBatch | None = None


@dataclass
class RecoveryStats:
    trusted: int = 0
    scanned: int = 0


def list_segments(pdir: Path, interval_bytes: int) -> list[Segment]:
    segments = []
    for p in pdir.iterdir():
        m = SEGMENT_NAME.match(p.name)
        if m:
            st = p.stat()
            segments.append(Segment.at(pdir, int(m.group(1)), st.st_size, st.st_mtime_ns // 1_000_000,
                                       interval_bytes))
        elif p.name.endswith(".log"):
            log.warning("log_file_ignored", file=str(p), reason="not named like a segment (%020d.log)")
    segments.sort(key=lambda s: s.base_offset)
    return segments


def complete_swaps(pdir: Path) -> None:
    """Finish (`.swap`) or roll back (`.cleaned`) a cleaner swap interrupted by a crash."""
    changed = False
    for p in sorted(pdir.glob("*.cleaned")):
        log.warning("cleaner_unfinished_file_deleted", file=str(p))
        p.unlink()
        changed = True
    for swap in sorted(pdir.glob("*.log.swap")):
        base = int(swap.name[:20])
        next_offset = _swap_next_offset(swap, base)
        for old in sorted(pdir.glob("*.log")):
            m = SEGMENT_NAME.match(old.name)
            if m and base <= int(m.group(1)) < next_offset:
                old.unlink()
                (pdir / index_name(int(m.group(1)))).unlink(missing_ok=True)
        index_swap = pdir / (index_name(base) + ".swap")
        if index_swap.exists():
            os.replace(index_swap, pdir / index_name(base))
        os.replace(swap, pdir / swap.name[: -len(".swap")])
        log.warning("cleaner_swap_completed", file=str(swap), replaced_below=next_offset)
        changed = True
    for orphan in pdir.glob("*.index.swap"):  # its log swap completed already
        orphan.unlink()
        changed = True
    if changed:
        fsync_dir(pdir)


def _swap_next_offset(swap: Path, base: int) -> int:
    """One past the last offset in a (fsynced, complete) swap segment."""
    next_offset = base
    with open(swap, "rb") as f:
        for info in walk_headers(f.fileno(), 0, os.fstat(f.fileno()).st_size):
            next_offset = info.last_offset + 1
    return next_offset


def recover(pdir: Path, segments: list[Segment], deep: bool = True) -> tuple[int, RecoveryStats]:
    """Trust or scan every segment; truncate a torn tail of the last one. Returns the next offset."""
    rp = read_recovery_point(pdir)
    gaps_below = read_cleaner_offset(pdir)
    stats = RecoveryStats()
    next_offset = segments[0].base_offset if segments else 0
    scans: list[ScanResult | None] = []
    for i, seg in enumerate(segments):
        if seg.base_offset < next_offset:
            raise CorruptLogError(seg.path, 0, f"segment starts at offset {seg.base_offset}, before the end "
                                  f"({next_offset}) of the previous segment")
        is_last = i == len(segments) - 1
        if _is_trusted(segments, i, rp) and load_trusted(seg, is_last):
            stats.trusted += 1
            scans.append(None)
        else:
            scan = scan_segment(seg, is_last, deep, gaps=seg.base_offset < gaps_below)
            stats.scanned += 1
            scans.append(scan)
            seg.next_offset = scan.next_offset
        next_offset = seg.next_offset
    # Only now, with every segment checked, change anything on disk.
    last_scan = scans[-1] if scans else None
    if last_scan is not None and last_scan.bad is not None:
        seg = segments[-1]
        with open(seg.path, "r+b") as f:
            f.truncate(last_scan.good_end)
            f.flush()
            os.fsync(f.fileno())
        log.warning("torn_tail_truncated", file=str(seg.path), position=last_scan.good_end,
                    bytes=seg.size - last_scan.good_end, reason=last_scan.bad.reason)
        seg.size = last_scan.good_end
    for seg, verified in zip(segments, scans, strict=True):
        if verified is None:
            continue
        # What was verified is made durable (it may be in the page cache only, after a process crash),
        # so the recovery point written after open can cover it.
        fsync_path(seg.path)
        if seg is not segments[-1]:
            _write_index(seg)
    return next_offset, stats


def _is_trusted(segments: list[Segment], i: int, rp: RecoveryPoint | None) -> bool:
    if rp is None:
        return False
    seg = segments[i]
    if i + 1 < len(segments):
        return segments[i + 1].base_offset <= rp.offset
    return rp.clean_segment == (seg.base_offset, seg.size)


def load_trusted(seg: Segment, is_last: bool) -> bool:
    """Set up a trusted segment from its index without reading its batches; False if the index is not
    usable (missing, torn, or stale), in which case the caller scans the segment instead."""
    if seg.size == 0:
        seg.next_offset = seg.base_offset
        if not is_last:
            seg.index.seal()
        return True
    if not seg.index.load(seg.size):  # a sealed segment's entries are dropped again below
        return False
    last = seg.index.last_entry()
    start = last[1] if last is not None else 0
    try:
        with open(seg.path, "rb") as f:
            infos = walk_headers(f.fileno(), start, seg.size)
            first = next(infos)
            if last is not None and first.last_offset != last[0]:
                return False  # a stale index: it does not point at the batch it names
            end = first
            for info in infos:
                end = info
            if is_last:
                head = next(walk_headers(f.fileno(), 0, seg.size))
                seg.first_timestamp = head.max_timestamp
    except (BadBatch, StopIteration):
        return False
    seg.next_offset = end.last_offset + 1
    if is_last:
        # Kafka counts bytes since the last entry; approximating it by the bytes after that entry's batch
        # start only moves the next entry by less than one interval.
        seg.index.set_bytes_since_entry(seg.size - start)
    else:
        seg.index.seal()
    return True


def scan_segment(seg: Segment, is_last: bool, deep: bool = True, gaps: bool = False) -> ScanResult:
    """CRC-check every batch of `seg`, rebuilding its index; raises CorruptLogError for a bad batch that
    is not a torn tail (see the module docstring)."""
    pos, expected = 0, seg.base_offset
    seg.index.reset()
    seg.first_timestamp = -1
    seg.max_timestamp = None
    seg.verified = True
    with open(seg.path, "rb") as f:
        while pos < seg.size:
            try:
                info = read_batch(f, pos, seg.size, expected, deep, gaps)
            except BadBatch as bad:
                if not is_last:
                    raise CorruptLogError(seg.path, pos, f"{bad.reason} (in a segment that is not the last, "
                                          f"so it cannot be a torn write)") from None
                if bad.complete:
                    raise CorruptLogError(seg.path, pos, f"{bad.reason} (in a whole batch with a valid CRC, "
                                          f"so it cannot be a torn write)") from None
                # Even a batch that seems to run past the end is checked for valid data after it: a damaged
                # Length field in the middle of the log looks just like a torn write.
                valid_at = valid_batch_after(f, pos + 1, seg.size)
                if valid_at is not None:
                    raise CorruptLogError(seg.path, pos, f"{bad.reason}, with a valid batch after it at byte "
                                          f"{valid_at}") from None
                return ScanResult(pos, expected, bad)
            seg.on_batch(info, pos)
            pos += info.size
            expected = info.last_offset + 1
    return ScanResult(pos, expected)


def _write_index(seg: Segment) -> None:
    seg.index.write_file()
    fsync_path(seg.index.path)
    seg.index.seal()
