"""One partition's log: Kafka segments of v2 record batches with sparse offset indexes.

Theory of operation
-------------------
The directory `<data_dir>/__consumer_offsets-<p>/` (or `<topic>-<p>/`) holds segment files named
`%020d.log` after their base offset, exactly as Kafka names them, each with a `%020d.index` (see
`storage.segment` for every file). Only the last (active) segment is written to; it rolls to a new one
when the next batch would take it past `segment_bytes` (Kafka's segment.bytes), when the batch's
timestamp is more than `segment_ms` (log.roll.ms) past the segment's first batch, or when an offset would
not fit the index's int32 relative offset.

Every append is one batch and one write at the end of the active segment, so a crash can only leave a
torn tail. `open` runs `storage.recovery`: segments below the recovery point are trusted (index loaded,
no CRC scan), the rest are scanned and a torn tail truncated; a bad batch anywhere else is
`CorruptLogError` and nothing on disk changes.

Memory: the active segment keeps its sparse index (one entry per 4 KiB) in memory; a sealed segment
keeps only a few numbers and looks offsets up in its index file. A read at an offset seeks to the
indexed position at or before it and walks at most ~4 KiB of batch headers (the reads are
`storage.log_reads`' functions over the segment list; a follower's cut of a segment is
`Segment.truncate_to`).

The same machinery serves the topic store (`coordinator_server.topics`): `open_dir` opens any partition
directory, `append_batches` writes client batches as they came (only BaseOffset and
PartitionLeaderEpoch, both outside the CRC, are rewritten), and recovery of such a log is *shallow*
(header, length, CRC and offsets, without decoding records).

System calls that decide durability go through `FileIO`, a seam tests use to count fsyncs and inject
write errors. No clocks here: the caller passes each batch's timestamp.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog
from mypy_extensions import mypyc_attr

from coordinator_server.storage import log_reads
from coordinator_server.storage import syncfs as syncfs_call
from coordinator_server.storage.batch import (
    BASE_OFFSET,
    HEADER_SIZE,
    LEADER_EPOCH,
    LEADER_EPOCH_POS,
    BadBatch,
    BatchInfo,
    DefaultRecordBatch,
    LogRecord,
    batch_records,
    build_batch,
    check_batch,
)
from coordinator_server.storage.errors import CorruptLogError
from coordinator_server.storage.index import DEFAULT_INDEX_INTERVAL_BYTES
from coordinator_server.storage.recovery import RecoveryStats, complete_swaps, list_segments, recover
from coordinator_server.storage.segment import (
    Segment,
    fsync_path,
    read_cleaner_offset,
    segment_name,
    write_cleaner_offset,
    write_recovery_point,
)

log = structlog.get_logger(__name__)

DEFAULT_SEGMENT_BYTES: Final = 104_857_600  # Kafka's offsets.topic.segment.bytes
DEFAULT_SEGMENT_MS: Final = 604_800_000  # Kafka's log.roll.ms (log.roll.hours = 168)
_MAX_RELATIVE_OFFSET: Final = (1 << 31) - 1

__all__ = [
    "DEFAULT_SEGMENT_BYTES", "DEFAULT_SEGMENT_MS", "HEADER_SIZE", "SYSTEM_IO", "BatchInfo", "DefaultRecordBatch",
    "FileIO", "LogRecord", "PartitionLog", "SyncPlan", "batch_records", "build_batch", "check_batch",
    "partition_dir", "segment_name",
]


def partition_dir(data_dir: Path, partition: int) -> Path:
    return Path(data_dir) / f"__consumer_offsets-{partition}"


# Tests subclass it to count or fail calls, and they are not compiled (setup.py).
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(frozen=True)
class FileIO:
    """The system calls durability rests on. Tests swap in counting or failing versions (a seam, not a
    patch of internals)."""

    pwrite: Callable[[int, bytes | bytearray, int], int] = os.pwrite
    fsync: Callable[[int], None] = os.fsync
    # One call making everything written on a file's filesystem durable (`storage.syncfs`), which a
    # group-commit round over many partitions uses instead of their fsyncs; None: fsync each file. A seam
    # that swaps `fsync` keeps the per-file path unless it names a `syncfs` too.
    syncfs: Callable[[int], None] | None = None


# The system's own calls, syncfs(2) included where the kernel reports its errors.
SYSTEM_IO: Final = FileIO(syncfs=syncfs_call.SYSCALL)


@dataclass
class SyncPlan:
    """fsyncs taken from a PartitionLog by `take_sync_plan`, to run in an I/O thread. Runs once; its
    descriptors are closed by `close`, which the writer calls on the loop (that opened them) once the sync
    thread is done with the plan."""

    file_io: FileIO
    rolled_fds: list[int]  # fsynced, then closed
    active_fd: int  # a dup: fsynced, then closed
    dirs: list[Path]
    indexes: list[Path] = field(default_factory=list)  # sealed segments' index files
    # (directory, offset): the recovery point to write once everything above is durable.
    checkpoint: tuple[Path, int] | None = None
    on_done: Callable[[], None] | None = None

    def run(self) -> None:
        for fd in self.rolled_fds:
            self.file_io.fsync(fd)
        self.file_io.fsync(self.active_fd)
        for d in self.dirs:
            self._fsync_dir(d)
        self._durable()

    def run_covered(self, device: int) -> None:
        """What `run` does after its fsyncs, once a syncfs of the plan's filesystem (`device`), issued
        after every write the plan covers, succeeded: that made its files and the directory entries on that
        filesystem durable. A directory on another one (a partition directory that is a mount point has its
        parent elsewhere) is fsynced here. Raises OSError when that fsync failed."""
        for d in self.dirs:
            if os.stat(d).st_dev != device:
                self._fsync_dir(d)
        self._durable()

    def _fsync_dir(self, d: Path) -> None:
        dfd = os.open(d, os.O_RDONLY)
        try:
            self.file_io.fsync(dfd)
        finally:
            os.close(dfd)

    def close(self) -> None:
        """Close the plan's file descriptors, whether it ran, failed or was never run (a log that can no
        longer be trusted, whose recovery point must not move). Every descriptor is closed even when one
        close fails (logged): a close decides nothing about durability, the fsync before it did."""
        for fd in [*self.rolled_fds, self.active_fd]:
            try:
                os.close(fd)
            except OSError as e:
                log.warning("segment_close_failed", fd=fd, errno=e.errno, error=str(e))

    def _durable(self) -> None:
        _advance_recovery_point(self.indexes, self.checkpoint)
        if self.on_done is not None:
            self.on_done()


def _advance_recovery_point(indexes: list[Path], checkpoint: tuple[Path, int] | None) -> None:
    """After the segments below `checkpoint` are durable: fsync their indexes, then the checkpoint. A
    failure here only costs a longer recovery (the segments get scanned), so it is logged, not raised."""
    try:
        for path in indexes:
            if path.exists():
                fsync_path(path)
        if checkpoint is not None:
            write_recovery_point(*checkpoint)
    except OSError as e:
        log.warning("recovery_point_not_written", error=str(e))


class PartitionLog:
    """The segments of one partition; synchronous, plain file I/O, one writer."""

    def __init__(self, directory: Path, partition: int, segment_bytes: int, file_io: FileIO,
                 segments: list[Segment], next_offset: int, *, segment_ms: int = DEFAULT_SEGMENT_MS,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self.directory = directory
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.index_interval_bytes = index_interval_bytes
        self.file_io = file_io
        self._segments = segments
        self._next_offset = next_offset
        self._fd = -1
        self._unsynced_fds: list[int] = []  # rolled-away segments whose last writes are not fsynced yet
        self._unsynced_indexes: list[Path] = []  # their index files
        self._pending_recovery_point: int | None = None  # to checkpoint once the rolled segments are synced
        # Directories whose entries changed (a segment or the partition directory was created) since the
        # last sync: their fsync makes the new names durable, not just the file contents.
        self._dirty_dirs: set[Path] = set()
        self._writes = 0  # batches written; `_synced_writes` of them are covered by a completed sync
        self._synced_writes = 0
        # Below this offset the cleaner rewrote the segments: batches there may skip offsets.
        self.cleaner_offset = read_cleaner_offset(directory)
        self.recovery_stats = RecoveryStats()
        # Set when the file could not be put back after a failed write: no more appends until reopened.
        self.failed: OSError | None = None
        self.device = -1  # st_dev of the directory's filesystem, once open

    @classmethod
    def open(cls, directory: Path, partition: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
             file_io: FileIO | None = None, *, deep: bool = True, segment_ms: int = DEFAULT_SEGMENT_MS,
             index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> PartitionLog:
        """Open (creating if needed) `<directory>/__consumer_offsets-<partition>/` and run recovery."""
        return cls.open_dir(partition_dir(Path(directory), partition), partition, segment_bytes, file_io, deep=deep,
                            segment_ms=segment_ms, index_interval_bytes=index_interval_bytes)

    @classmethod
    def open_dir(cls, pdir: Path, partition: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 file_io: FileIO | None = None, *, deep: bool = True, segment_ms: int = DEFAULT_SEGMENT_MS,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> PartitionLog:
        """Open (creating if needed) the partition directory `pdir` and run recovery; `deep=False` checks
        batch headers and CRCs but does not decode records (client batches of a topic)."""
        created = not pdir.exists()
        pdir.mkdir(parents=True, exist_ok=True)
        complete_swaps(pdir)
        segments = list_segments(pdir, index_interval_bytes)
        next_offset, stats = recover(pdir, segments, deep)  # raises CorruptLogError before changing anything
        self = cls(pdir, partition, segment_bytes, file_io or SYSTEM_IO, segments, next_offset,
                   segment_ms=segment_ms, index_interval_bytes=index_interval_bytes)
        self.recovery_stats = stats
        if not segments:
            self._create_segment(0)
        if created:
            self._dirty_dirs.add(pdir.parent)
        self._fd = os.open(self._segments[-1].path, os.O_RDWR)
        self.device = os.fstat(self._fd).st_dev
        # Every segment before the active one is now verified (or was trusted) and durable; this also
        # drops a clean-shutdown mark, which must not outlive the appends this run will make.
        write_recovery_point(pdir, self._segments[-1].base_offset)
        return self

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def segments(self) -> list[Path]:
        return [s.path for s in self._segments]

    def append(self, records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int, leader_epoch: int = 0) -> int:
        """Write `records` as one batch at the end of the log, stamped with `leader_epoch` (the batch
        header's PartitionLeaderEpoch); returns its base offset.

        On an OSError the file is truncated back to where it ended, so a later append still yields a
        valid log; the error is re-raised. Not durable until `sync()`.
        """
        if not records:
            raise ValueError("an append needs at least one record")
        self._refuse_if_failed(f"log of partition {self.partition}")
        base = self._next_offset
        self._write_batch(build_batch(records, base, timestamp_ms, leader_epoch=leader_epoch))
        return base

    def append_batches(self, batches: Sequence[bytes | bytearray], leader_epoch: int = 0) -> list[int]:
        """Write validated v2 batches as they are, each at the end of the log; returns their base offsets.

        Only BaseOffset and PartitionLeaderEpoch (`leader_epoch`, the epoch of the leader appending, as
        Kafka's leader overwrites it) are rewritten; both lie outside the CRC. On an OSError the batch being written is truncated away and the error
        re-raised: the batches before it stay written (their offsets are in `next_offset`).
        """
        self._refuse_if_failed(f"log {self.directory.name}")
        bases = []
        for raw in batches:
            batch = bytearray(raw)
            base = self._next_offset
            BASE_OFFSET.pack_into(batch, 0, base)
            LEADER_EPOCH.pack_into(batch, LEADER_EPOCH_POS, leader_epoch)
            self._write_batch(batch)
            bases.append(base)
        return bases

    def append_as_follower(self, batches: Sequence[bytes | bytearray]) -> list[tuple[int, int]]:
        """Write batches fetched from the partition's leader exactly as they are: their offsets and
        leader epochs are the leader's (Kafka's Log.appendAsFollower). Each must start at `next_offset`.
        Returns (leader epoch, base offset) per batch, for the follower's leader-epoch cache."""
        self._refuse_if_failed(f"log {self.directory.name}")
        out = []
        for raw in batches:
            info = BatchInfo.parse(raw)
            if info.base_offset != self._next_offset:
                raise ValueError(f"{self.directory.name}: a fetched batch starts at {info.base_offset}, "
                                 f"the log ends at {self._next_offset}")
            self._write_batch(raw)
            out.append((LEADER_EPOCH.unpack_from(raw, LEADER_EPOCH_POS)[0], info.base_offset))
        return out

    def _write_batch(self, batch: bytes | bytearray) -> None:
        info = BatchInfo.parse(batch)
        active = self._segments[-1]
        if active.size > 0 and self._should_roll(active, info, len(batch)):
            self._roll()
            active = self._segments[-1]
        start = active.size
        try:
            written = 0
            while written < len(batch):  # pwrite may write less than asked (e.g. on a full disk)
                written += self.file_io.pwrite(self._fd, batch[written:] if written else batch, start + written)
        except OSError:
            self._truncate_after_failed_write(start)
            raise
        active.size = start + len(batch)
        active.on_batch(info, start)
        self._next_offset = info.last_offset + 1
        self._writes += 1

    def _should_roll(self, active: Segment, info: BatchInfo, size: int) -> bool:
        # Kafka's LogSegment.shouldRoll: size, time since the segment's first batch (by the batches' own
        # timestamps, so no clock), and a relative offset that would not fit the index's int32.
        return (active.size + size > self.segment_bytes
                or (active.first_timestamp >= 0 and info.max_timestamp - active.first_timestamp > self.segment_ms)
                or info.last_offset - active.base_offset > _MAX_RELATIVE_OFFSET)

    def sync(self) -> None:
        """fsync what was written: rolled-away segments, the active one, and the directory after a roll;
        then move the recovery point past the rolled segments."""
        writes = self._writes
        while self._unsynced_fds:
            fd = self._unsynced_fds[0]
            self.file_io.fsync(fd)
            os.close(fd)
            self._unsynced_fds.pop(0)
        self.file_io.fsync(self._fd)
        for d in sorted(self._dirty_dirs, key=lambda p: len(p.parts), reverse=True):
            dfd = os.open(d, os.O_RDONLY)
            try:
                self.file_io.fsync(dfd)
            finally:
                os.close(dfd)
            self._dirty_dirs.discard(d)
        indexes, self._unsynced_indexes = self._unsynced_indexes, []
        checkpoint = self._take_checkpoint()
        _advance_recovery_point(indexes, checkpoint)
        self._synced_writes = max(self._synced_writes, writes)

    @property
    def writes(self) -> int:
        """Batches written so far (what `mark_synced` is given once a sync covered them)."""
        return self._writes

    def only_data_unsynced(self) -> bool:
        """Whether all a sync must still cover is data written to the active segment: no rolled segment, new
        directory entry, sealed index or recovery point is waiting, so a syncfs of the filesystem, with
        `mark_synced` after it, is the whole sync (the writer's syncfs thread, storage/syncfs_thread.py)."""
        return not (self._unsynced_fds or self._dirty_dirs or self._unsynced_indexes
                    or self._pending_recovery_point is not None)

    def mark_synced(self, writes: int) -> None:
        """The first `writes` batches are durable (a syncfs issued after them succeeded)."""
        self._synced_writes = max(self._synced_writes, writes)

    def take_sync_plan(self) -> SyncPlan:
        """What a sync must fsync to cover every write made so far, for another thread to run while this
        one keeps appending. The plan owns its file descriptors (a dup of the active one)."""
        writes = self._writes

        def done() -> None:  # in a sync thread; a plain attribute store the loop reads later
            self._synced_writes = max(self._synced_writes, writes)

        plan = SyncPlan(self.file_io, self._unsynced_fds, os.dup(self._fd), sorted(
            self._dirty_dirs, key=lambda p: len(p.parts), reverse=True), self._unsynced_indexes,
            self._take_checkpoint(), done)
        self._unsynced_fds = []
        self._unsynced_indexes = []
        self._dirty_dirs = set()
        return plan

    def _take_checkpoint(self) -> tuple[Path, int] | None:
        rp, self._pending_recovery_point = self._pending_recovery_point, None
        return None if rp is None else (self.directory, rp)

    def read(self) -> Iterator[LogRecord]:
        """Every record, in offset order, up to the end of the log as it is when this is called.

        Each batch is CRC-checked exactly once per start: segments scanned by recovery are not checked
        again, trusted ones (never read at open) are checked here. Structure and offsets are re-checked.
        """
        for path, pos, raw, gaps in self.checked_batches():
            try:
                yield from batch_records(DefaultRecordBatch(raw), gaps)
            except BadBatch as e:
                raise CorruptLogError(path, pos, e.reason) from e

    def checked_batches(self) -> Iterator[tuple[Path, int, bytes, bool]]:
        """Every batch, checked, with where it lies (`log_reads.checked_batches`): replay's walk."""
        return log_reads.checked_batches(self._segments, self.cleaner_offset)

    # -- the topic store's reads (see the module docstring for the index) --

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # Each read is `log_reads`' over the segments as they are now (see there for what it answers).

    def read_batches(self, offset: int, max_bytes: int, min_one: bool = True, max_offset: int | None = None) -> bytes:
        return log_reads.read_batches(self._segments, self._next_offset, offset, max_bytes, min_one, max_offset)

    def batch_at(self, offset: int) -> bytes | None:
        return log_reads.batch_at(self._segments, self._next_offset, offset)

    def bytes_from(self, offset: int) -> int:
        return log_reads.bytes_from(self._segments, self._next_offset, offset)

    def first_batch_with_timestamp(self, timestamp_ms: int) -> int | None:
        return log_reads.first_batch_with_timestamp(self._segments, timestamp_ms)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        return log_reads.max_timestamp_offset(self._segments)

    def batch_infos(self) -> Iterator[BatchInfo]:
        return log_reads.batch_infos(self._segments)

    def segment_stats(self) -> list[tuple[int, int, int]]:
        return log_reads.segment_stats(self._segments)

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the `count` oldest segments, never the active one; the log start offset moves to the
        next segment's base. Returns how many were deleted."""
        count = min(count, len(self._segments) - 1)
        for _ in range(max(0, count)):
            seg = self._segments.pop(0)
            # Kafka renames to .deleted first and deletes later; a fetch here reads synchronously on the
            # same thread, so nothing can have the file open mid-read and a plain unlink is enough.
            seg.path.unlink(missing_ok=True)
            seg.index.path.unlink(missing_ok=True)
            self._dirty_dirs.add(self.directory)
        return max(0, count)

    def close(self, clean: bool = True) -> None:
        """Close the files. When `clean` and every write was fsynced, mark the shutdown clean: the active
        segment's index is written and the recovery point covers it too, so the next open scans nothing."""
        if clean and self._fd >= 0 and self.failed is None and not self._unsynced_fds \
                and self._synced_writes == self._writes:
            self._write_clean_mark()
        for fd in self._unsynced_fds:
            os.close(fd)
        self._unsynced_fds.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _write_clean_mark(self) -> None:
        active = self._segments[-1]
        try:
            active.index.write_file()
            fsync_path(active.index.path)
            write_recovery_point(self.directory, active.base_offset, (active.base_offset, active.size))
        except OSError as e:
            log.warning("clean_shutdown_mark_not_written", dir=str(self.directory), error=str(e))

    # -- a follower's truncation --

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at and after `offset` (Kafka's Log.truncateTo: a follower cutting off what
        diverged from its leader); returns the new log end offset. Durable when it returns.

        Segments whose base offset is at or past `offset` are deleted (newest first), the segment before
        them becomes the active one and is cut at the first batch holding `offset` or later, and its
        index is rebuilt from what stays. A batch holding `offset` goes whole, as in Kafka's
        LogSegment.truncateTo, so the log may end before `offset`. When `offset` is at or below the log
        start, everything goes and the log restarts empty at `offset` (Kafka's truncateFullyAndStartAt).

        Order, for a crash at any point: first everything written is fsynced and the recovery point
        moved back to the new active segment (so recovery scans it rather than trusting a stale index
        or a clean mark); then the cut, from the end, so what a crash leaves is always a prefix.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        self._refuse_if_failed(f"log {self.directory.name}")
        if offset >= self._next_offset:
            return self._next_offset
        self.sync()
        keep = [s for s in self._segments if s.base_offset < offset]
        drop = self._segments[len(keep):]
        write_recovery_point(self.directory, keep[-1].base_offset if keep else offset)
        os.close(self._fd)
        self._fd = -1
        for seg in reversed(drop):
            seg.path.unlink(missing_ok=True)
            seg.index.path.unlink(missing_ok=True)
        self._segments = keep
        if keep:
            # The segment before those dropped becomes the active one, cut at `offset`.
            keep[-1].truncate_to(offset)
            self._next_offset = keep[-1].next_offset
        else:
            self._create_segment(offset)
            self._next_offset = offset
        self._fd = os.open(self._segments[-1].path, os.O_RDWR)
        self.file_io.fsync(self._fd)
        fsync_path(self.directory)
        self._dirty_dirs.discard(self.directory)
        if self.cleaner_offset > self._next_offset:
            # Kafka truncates the cleaner checkpoint with the log: offsets past the end were never cleaned.
            self.cleaner_offset = self._next_offset
            write_cleaner_offset(self.directory, self._next_offset)
        return self._next_offset

    # -- internals --

    def _refuse_if_failed(self, name: str) -> None:
        if self.failed is not None:
            raise OSError(self.failed.errno, f"{name} failed earlier and could not be repaired: {self.failed}")

    def _create_segment(self, base_offset: int) -> None:
        path = self.directory / segment_name(base_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        seg = Segment.at(self.directory, base_offset, 0, path.stat().st_mtime_ns // 1_000_000,
                         self.index_interval_bytes)
        seg.index.path.unlink(missing_ok=True)  # a leftover of a segment deleted or cleaned away
        self._segments.append(seg)
        self._dirty_dirs.add(self.directory)

    def _roll(self) -> None:
        old = self._segments[-1]
        self._create_segment(self._next_offset)  # first: a failure here leaves the old segment active
        # The old segment's last writes may not be on disk yet: the next sync() fsyncs it before closing.
        self._unsynced_fds.append(self._fd)
        self._fd = os.open(self._segments[-1].path, os.O_RDWR)
        try:
            old.index.write_file()
            self._unsynced_indexes.append(old.index.path)
        except OSError as e:
            # Only costs time: without a usable index the segment is scanned at the next start.
            old.index.path.unlink(missing_ok=True)
            log.warning("segment_index_not_written", file=str(old.index.path), error=str(e))
        old.index.seal()
        self._pending_recovery_point = self._segments[-1].base_offset

    def _truncate_after_failed_write(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError as e:
            # The file may now end in a partial batch; appending after it would bury that in the middle
            # of the log. Refuse further appends; recovery on the next open truncates it as a torn tail.
            self.failed = e
            log.error("log_truncate_failed", file=str(self._segments[-1].path), position=size, error=str(e))

    # -- the cleaner's access (storage.compaction) --

    def sealed_segments(self) -> list[Segment]:
        """The segments the cleaner may read: all but the active one (immutable once rolled)."""
        return list(self._segments[:-1])

    def replace_segments(self, old: list[Segment], new: list[Segment]) -> None:
        """Swap cleaned segments in for `old` in memory (the files were already swapped on disk)."""
        first = self._segments.index(old[0])
        assert self._segments[first:first + len(old)] == old, "the cleaned segments changed meanwhile"
        self._segments[first:first + len(old)] = new
