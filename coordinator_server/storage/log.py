"""One `__consumer_offsets` partition as Kafka log segments of v2 record batches (style.md §11).

Theory of operation
-------------------
The directory `<data_dir>/__consumer_offsets-<p>/` holds segment files named `%020d.log` after the offset
of their first batch, exactly as Kafka names them, and each holds Kafka v2 record batches (magic 2,
CRC32C), so `kafka-dump-log.sh` can read them. Only the last segment is written to; it rolls to a new
one when the next batch would take it past `segment_bytes`.

Every append is one batch and one write at the end of the active segment. A crash can therefore only
leave a *torn tail*: a part of the last batch, or zero bytes the file system allocated but never filled.
Recovery on open walks every batch of every segment and checks its header, its CRC and its offsets:

* a bad batch at the end of the last segment (short, failing its CRC, or zeros), with nothing that
  parses as a valid batch after it, is a torn tail: the file is truncated to the last good batch, with a
  warning;
* anything else is corruption: a bad batch in an earlier segment, one followed by a valid batch, or a
  whole batch with a valid CRC that is wrong anyway (offsets, record structure), which no torn write
  produces. `CorruptLogError` names the file and byte position, and nothing on disk is changed.

Nothing is ever skipped. Within a segment, batch offsets must be contiguous (this writer never leaves a
gap, and BaseOffset is not covered by the CRC, so a gap means a damaged header); across segments, a later
segment may start past the end of the previous one, so an operator who moved a damaged segment aside can
still start.

The same machinery serves the topic store (`coordinator_server.topics`): `open_dir` opens any
`<data_dir>/<topic>-<partition>/`, `append_batches` writes client batches as they came (only BaseOffset
and PartitionLeaderEpoch, both outside the CRC, are rewritten), and recovery of such a log is *shallow*:
header, length, CRC and offsets of every batch, without decoding (or decompressing) its records. Every
segment keeps an in-memory index of its batches (last offset, position, max timestamp), rebuilt by
recovery, which fetch, list-offsets and retention use instead of Kafka's .index/.timeindex files.

System calls that decide durability go through `FileIO`, a seam tests use to count fsyncs and inject
write errors. No clocks here: the caller passes each batch's timestamp.
"""
from __future__ import annotations

import bisect
import os
import re
import struct
import sys
import warnings
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

import structlog

from coordinator_server.storage.errors import CorruptLogError

# Importing kafka loads kafka-python's JSON specs through importlib.resources calls deprecated since
# Python 3.11; that warning is about kafka-python, and `filterwarnings = error` would fail the import.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.errors import CorruptRecordError
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

log = structlog.get_logger(__name__)

DEFAULT_SEGMENT_BYTES = 104_857_600  # Kafka's offsets.topic.segment.bytes
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")

_HEADER = DefaultRecordBatch.HEADER_STRUCT
HEADER_SIZE = _HEADER.size  # 61 bytes: BaseOffset .. RecordsCount
_LOG_OVERHEAD = 12  # BaseOffset int64 + Length int32: the bytes not counted by Length
_MIN_LENGTH = HEADER_SIZE - _LOG_OVERHEAD
_MAGIC_POS = 16  # BaseOffset(8) Length(4) PartitionLeaderEpoch(4)
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_POS = 12
_NO_PRODUCER = -1


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def partition_dir(data_dir: Path, partition: int) -> Path:
    return Path(data_dir) / f"__consumer_offsets-{partition}"


@dataclass(frozen=True)
class FileIO:
    """The system calls durability rests on. Tests swap in counting or failing versions (a seam, not a
    patch of internals)."""

    pwrite: Callable[[int, bytes, int], int] = os.pwrite
    fsync: Callable[[int], None] = os.fsync


class LogRecord(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


class BatchInfo(NamedTuple):
    """What a v2 batch header says, plus where the batch sits; enough for idempotence and indexing."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    position: int
    size: int

    @classmethod
    def parse(cls, buf: bytes | bytearray | memoryview, position: int = 0) -> BatchInfo:
        """The header at the start of `buf`; `position` is where the batch sits in its segment."""
        (base, length, _epoch, _magic, _crc, _attrs, last_delta, _first_ts, max_ts, pid, p_epoch, base_seq,
         _count) = _HEADER.unpack_from(buf, 0)
        return cls(base, base + last_delta, max_ts, pid, p_epoch, base_seq, position, _LOG_OVERHEAD + length)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        # Sequences wrap at Int32.MAX_VALUE (Kafka's DefaultRecordBatch.incrementSequence).
        return (self.base_sequence + self.last_offset - self.base_offset) % (1 << 31)


@dataclass
class _Segment:
    base_offset: int
    path: Path
    size: int
    # One entry per batch, in file order: the index fetch and list-offsets search with bisect.
    last_offsets: array[int] = field(default_factory=lambda: array("q"))
    positions: array[int] = field(default_factory=lambda: array("q"))
    max_timestamps: array[int] = field(default_factory=lambda: array("q"))
    created_ms: int = 0  # file mtime at open, or when created: retention's age for an empty segment

    def index(self, info: BatchInfo, position: int) -> None:
        self.last_offsets.append(info.last_offset)
        self.positions.append(position)
        self.max_timestamps.append(info.max_timestamp)

    @property
    def largest_timestamp(self) -> int:
        return max(self.max_timestamps, default=-1)


class _BadBatch(Exception):
    """Why the batch at a position is not a good batch. `complete` when it is whole and passes its CRC
    (so it was written like that or damaged outside the CRC) and thus cannot be a torn write."""

    def __init__(self, reason: str, complete: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.complete = complete


@dataclass
class _ScanResult:
    good_end: int  # byte position after the last good batch
    next_offset: int
    bad: _BadBatch | None = None


def build_batch(records: Sequence[tuple[bytes, bytes | None]], base_offset: int, timestamp_ms: int) -> bytes:
    """One uncompressed, non-transactional v2 batch, as Kafka's coordinator writes them."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=_NO_PRODUCER,
        producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize,
    )
    for delta, (key, value) in enumerate(records):
        if builder.append(delta, timestamp=timestamp_ms, key=key, value=value, headers=[]) is None:
            raise AssertionError("record batch builder refused a record")  # batch_size is unbounded
    buf = builder.build()
    # The builder leaves BaseOffset 0 for a broker to fill in; it is outside the CRC.
    _BASE_OFFSET.pack_into(buf, 0, base_offset)
    return bytes(buf)


def check_batch(buf: bytes, expected_offset: int | None) -> DefaultRecordBatch:
    """Validate one whole batch (header, CRC, record structure, offsets); raises _BadBatch."""
    base_offset, length, _epoch, magic = _HEADER.unpack_from(buf)[:4]
    if magic != 2:
        raise _BadBatch(f"magic {magic}, expected 2")
    if length < _MIN_LENGTH or len(buf) != _LOG_OVERHEAD + length:
        raise _BadBatch(f"batch length {length} is invalid")
    batch = DefaultRecordBatch(buf)
    if not batch.validate_crc():
        raise _BadBatch("CRC32C mismatch")
    if expected_offset is not None and base_offset != expected_offset:
        raise _BadBatch(f"base offset {base_offset}, expected {expected_offset}", complete=True)
    if batch.is_control_batch or batch.is_transactional:
        # This server writes neither; reading them as plain records would apply aborted data.
        raise _BadBatch("transactional or control batch, which this server does not read", complete=True)
    count = batch.records_count
    if count < 1 or batch.last_offset_delta != count - 1:
        raise _BadBatch(f"{count} records with last offset delta {batch.last_offset_delta}", complete=True)
    return batch


def batch_records(batch: DefaultRecordBatch) -> list[LogRecord]:
    try:
        out = [LogRecord(r.offset, r.timestamp, r.key, r.value) for r in batch]
    except CorruptRecordError as e:
        raise _BadBatch(f"records do not parse: {e}", complete=True) from e
    for i, r in enumerate(out):
        if r.offset != batch.base_offset + i:
            raise _BadBatch(f"record {i} has offset {r.offset}, expected {batch.base_offset + i}",
                            complete=True)
    return out


def _read_batch(f: BinaryIO, pos: int, file_size: int, expected_offset: int, deep: bool = True) -> BatchInfo:
    """The good batch at `pos`; raises _BadBatch when there is none. `deep` also decodes its records."""
    if file_size - pos < HEADER_SIZE:
        raise _BadBatch(f"{file_size - pos} bytes left, less than a batch header")
    f.seek(pos)
    header = f.read(HEADER_SIZE)
    length = struct.unpack_from(">i", header, 8)[0]
    magic = header[_MAGIC_POS]
    if magic != 2:
        raise _BadBatch(f"magic {magic}, expected 2")
    if length < _MIN_LENGTH:
        raise _BadBatch(f"batch length {length} is less than the minimum {_MIN_LENGTH}")
    if pos + _LOG_OVERHEAD + length > file_size:
        raise _BadBatch(f"batch of {_LOG_OVERHEAD + length} bytes runs past the end of the file")
    buf = header + f.read(_LOG_OVERHEAD + length - HEADER_SIZE)
    batch = check_batch(buf, expected_offset)
    if deep:
        batch_records(batch)
    return BatchInfo.parse(buf, pos)


def _valid_batch_after(f: BinaryIO, start: int, file_size: int) -> int | None:
    """Position of the first byte at or after `start` where a CRC-valid batch begins, if any.

    Only asked about the last segment's tail after a bad batch: a valid batch there means the bad one is
    damage in the middle of the log, not a torn write. An error path, so a byte-by-byte scan is fine.
    """
    if file_size - start < HEADER_SIZE:
        return None
    f.seek(start)
    data = f.read(file_size - start)
    for i in range(len(data) - HEADER_SIZE + 1):
        if data[i + _MAGIC_POS] != 2:
            continue
        length = struct.unpack_from(">i", data, i + 8)[0]
        if length < _MIN_LENGTH or i + _LOG_OVERHEAD + length > len(data):
            continue
        try:
            check_batch(data[i:i + _LOG_OVERHEAD + length], None)
        except _BadBatch:
            continue
        return start + i
    return None


@dataclass
class SyncPlan:
    """fsyncs taken from a PartitionLog by `take_sync_plan`, to run in an I/O thread. Runs once."""

    file_io: FileIO
    rolled_fds: list[int]  # fsynced, then closed
    active_fd: int  # a dup: fsynced, then closed
    dirs: list[Path]

    def run(self) -> None:
        try:
            for fd in self.rolled_fds:
                self.file_io.fsync(fd)
            self.file_io.fsync(self.active_fd)
            for d in self.dirs:
                dfd = os.open(d, os.O_RDONLY)
                try:
                    self.file_io.fsync(dfd)
                finally:
                    os.close(dfd)
        finally:
            for fd in [*self.rolled_fds, self.active_fd]:
                os.close(fd)


class PartitionLog:
    """The segments of one `__consumer_offsets` partition; synchronous, plain file I/O, one writer."""

    def __init__(self, directory: Path, partition: int, segment_bytes: int, file_io: FileIO,
                 segments: list[_Segment], next_offset: int) -> None:
        self.directory = directory
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.file_io = file_io
        self._segments = segments
        self._next_offset = next_offset
        self._fd = -1
        self._unsynced_fds: list[int] = []  # rolled-away segments whose last writes are not fsynced yet
        # Directories whose entries changed (a segment or the partition directory was created) since the
        # last sync: their fsync makes the new names durable, not just the file contents.
        self._dirty_dirs: set[Path] = set()
        # Set when the file could not be put back after a failed write: no more appends until reopened.
        self.failed: OSError | None = None

    @classmethod
    def open(cls, directory: Path, partition: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
             file_io: FileIO | None = None) -> PartitionLog:
        """Open (creating if needed) `<directory>/__consumer_offsets-<partition>/` and run recovery."""
        return cls.open_dir(partition_dir(Path(directory), partition), partition, segment_bytes, file_io)

    @classmethod
    def open_dir(cls, pdir: Path, partition: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 file_io: FileIO | None = None, *, deep: bool = True) -> PartitionLog:
        """Open (creating if needed) the partition directory `pdir` and run recovery; `deep=False` checks
        batch headers and CRCs but does not decode records (client batches of a topic)."""
        created = not pdir.exists()
        pdir.mkdir(parents=True, exist_ok=True)
        segments = _list_segments(pdir)
        next_offset = _recover(segments, deep)  # raises CorruptLogError before changing anything
        self = cls(pdir, partition, segment_bytes, file_io or FileIO(), segments, next_offset)
        if not segments:
            self._create_segment(0)
        if created:
            self._dirty_dirs.add(pdir.parent)
        self._fd = os.open(self._segments[-1].path, os.O_RDWR)
        return self

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def segments(self) -> list[Path]:
        return [s.path for s in self._segments]

    def append(self, records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> int:
        """Write `records` as one batch at the end of the log; returns its base offset.

        On an OSError the file is truncated back to where it ended, so a later append still yields a
        valid log; the error is re-raised. Not durable until `sync()`.
        """
        if not records:
            raise ValueError("an append needs at least one record")
        if self.failed is not None:
            raise OSError(self.failed.errno, f"log of partition {self.partition} failed earlier and "
                          f"could not be repaired: {self.failed}")
        base = self._next_offset
        self._write_batch(build_batch(records, base, timestamp_ms))
        return base

    def append_batches(self, batches: Sequence[bytes | bytearray]) -> list[int]:
        """Write validated v2 batches as they are, each at the end of the log; returns their base offsets.

        Only BaseOffset and PartitionLeaderEpoch (0: this node leads every partition) are rewritten;
        both lie outside the CRC. On an OSError the batch being written is truncated away and the error
        re-raised: the batches before it stay written (their offsets are in `next_offset`).
        """
        if self.failed is not None:
            raise OSError(self.failed.errno, f"log {self.directory.name} failed earlier and could not be "
                          f"repaired: {self.failed}")
        bases = []
        for raw in batches:
            batch = bytearray(raw)
            base = self._next_offset
            _BASE_OFFSET.pack_into(batch, 0, base)
            _LEADER_EPOCH.pack_into(batch, _LEADER_EPOCH_POS, 0)
            self._write_batch(batch)
            bases.append(base)
        return bases

    def _write_batch(self, batch: bytes | bytearray) -> None:
        info = BatchInfo.parse(batch)
        active = self._segments[-1]
        if active.size > 0 and active.size + len(batch) > self.segment_bytes:
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
        active.index(info, start)
        self._next_offset = info.last_offset + 1

    def sync(self) -> None:
        """fsync what was written: rolled-away segments, the active one, and the directory after a roll."""
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

    def read(self) -> Iterator[LogRecord]:
        """Every record, in offset order, up to the end of the log as it is when this is called.

        The CRCs were checked by recovery on open; this re-checks the structure but not the CRC, which
        costs as much again with kafka-python's pure-Python CRC32C.
        """
        snapshot = [(s.path, s.size) for s in self._segments]
        for path, size in snapshot:
            with open(path, "rb") as f:
                pos = 0
                while pos < size:
                    f.seek(pos)
                    header = f.read(HEADER_SIZE)
                    length = struct.unpack_from(">i", header, 8)[0] if len(header) == HEADER_SIZE else -1
                    if length < _MIN_LENGTH or pos + _LOG_OVERHEAD + length > size:
                        raise CorruptLogError(path, pos, "batch changed on disk after recovery")
                    buf = header + f.read(_LOG_OVERHEAD + length - HEADER_SIZE)
                    try:
                        yield from batch_records(DefaultRecordBatch(buf))
                    except _BadBatch as e:
                        raise CorruptLogError(path, pos, e.reason) from e
                    pos += _LOG_OVERHEAD + length

    # -- the topic store's reads (the index is in memory; see the module docstring) --

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def read_batches(self, offset: int, max_bytes: int, min_one: bool = True) -> bytes:
        """Whole batches from the one holding `offset` on, up to `max_bytes` (but at least one batch when
        `min_one`: KIP-74), from a single segment as Kafka reads. b"" at or past the end."""
        located = self._locate(offset)
        if located is None:
            return b""
        seg, i = located
        start = seg.positions[i]
        end = start
        n = len(seg.positions)
        while i < n:
            batch_end = seg.positions[i + 1] if i + 1 < n else seg.size
            if batch_end - start > max_bytes and not (min_one and end == start):
                break
            end = batch_end
            i += 1
        if end == start:
            return b""
        with open(seg.path, "rb") as f:
            return os.pread(f.fileno(), end - start, start)

    def batch_at(self, offset: int) -> bytes | None:
        """The one whole batch holding `offset`, or None past the end."""
        located = self._locate(offset)
        if located is None:
            return None
        seg, i = located
        end = seg.positions[i + 1] if i + 1 < len(seg.positions) else seg.size
        with open(seg.path, "rb") as f:
            return os.pread(f.fileno(), end - seg.positions[i], seg.positions[i])

    def first_batch_with_timestamp(self, timestamp_ms: int) -> int | None:
        """Base offset of the first batch whose max timestamp is >= timestamp_ms (Kafka's time index
        lookup at batch granularity), or None."""
        for seg in self._segments:
            if seg.largest_timestamp < timestamp_ms:
                continue
            for i, ts in enumerate(seg.max_timestamps):
                if ts >= timestamp_ms:
                    return self._batch_base(seg, i)
        return None

    def batch_infos(self) -> Iterator[BatchInfo]:
        """Every batch header in log order, read from disk (startup: producer state is rebuilt from it)."""
        for seg in list(self._segments):
            with open(seg.path, "rb") as f:
                for pos in seg.positions:
                    yield BatchInfo.parse(os.pread(f.fileno(), HEADER_SIZE, pos), pos)

    def segment_stats(self) -> list[tuple[int, int, int]]:
        """(base offset, size in bytes, largest timestamp or the file's mtime if it has no batch) per
        segment, oldest first: what retention decides on."""
        return [(s.base_offset, s.size, s.largest_timestamp if len(s.positions) else s.created_ms)
                for s in self._segments]

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the `count` oldest segments, never the active one; the log start offset moves to the
        next segment's base. Returns how many were deleted."""
        count = min(count, len(self._segments) - 1)
        for _ in range(max(0, count)):
            seg = self._segments.pop(0)
            # Kafka renames to .deleted first and deletes later; a fetch here reads synchronously on the
            # same thread, so nothing can have the file open mid-read and a plain unlink is enough.
            seg.path.unlink(missing_ok=True)
            self._dirty_dirs.add(self.directory)
        return max(0, count)

    def take_sync_plan(self) -> SyncPlan:
        """What a sync must fsync to cover every write made so far, for another thread to run while this
        one keeps appending. The plan owns its file descriptors (a dup of the active one)."""
        plan = SyncPlan(self.file_io, self._unsynced_fds, os.dup(self._fd), sorted(
            self._dirty_dirs, key=lambda p: len(p.parts), reverse=True))
        self._unsynced_fds = []
        self._dirty_dirs = set()
        return plan

    def bytes_from(self, offset: int) -> int:
        """How many bytes of batches a fetch at `offset` could return (0 at or past the end)."""
        located = self._locate(offset)
        if located is None:
            return 0
        seg, i = located
        later = self._segments[self._segments.index(seg) + 1:]
        return seg.size - seg.positions[i] + sum(s.size for s in later)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch holding the log's largest timestamp."""
        best: tuple[int, int] | None = None
        for seg in self._segments:
            for i, ts in enumerate(seg.max_timestamps):
                if best is None or ts > best[1]:
                    best = (self._batch_base(seg, i), ts)
        return best

    def _locate(self, offset: int) -> tuple[_Segment, int] | None:
        """(segment, batch index) of the batch holding `offset`, or the first one after it (a gap)."""
        if offset >= self._next_offset:
            return None
        segs = self._segments
        k = max(0, bisect.bisect_right([s.base_offset for s in segs], offset) - 1)
        for seg in segs[k:]:
            i = bisect.bisect_left(seg.last_offsets, offset)
            if i < len(seg.last_offsets):
                return seg, i
        return None

    @staticmethod
    def _batch_base(seg: _Segment, i: int) -> int:
        return seg.last_offsets[i - 1] + 1 if i > 0 else seg.base_offset

    def close(self) -> None:
        for fd in self._unsynced_fds:
            os.close(fd)
        self._unsynced_fds.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- internals --

    def _create_segment(self, base_offset: int) -> None:
        path = self.directory / segment_name(base_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        self._segments.append(_Segment(base_offset, path, 0, created_ms=path.stat().st_mtime_ns // 1_000_000))
        self._dirty_dirs.add(self.directory)

    def _roll(self) -> None:
        self._create_segment(self._next_offset)  # first: a failure here leaves the old segment active
        # The old segment's last writes may not be on disk yet: the next sync() fsyncs it before closing.
        self._unsynced_fds.append(self._fd)
        self._fd = os.open(self._segments[-1].path, os.O_RDWR)

    def _truncate_after_failed_write(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError as e:
            # The file may now end in a partial batch; appending after it would bury that in the middle
            # of the log. Refuse further appends; recovery on the next open truncates it as a torn tail.
            self.failed = e
            log.error("log_truncate_failed", file=str(self._segments[-1].path), position=size, error=str(e))


def _list_segments(pdir: Path) -> list[_Segment]:
    segments = []
    for p in pdir.iterdir():
        m = _SEGMENT_NAME.match(p.name)
        if m:
            st = p.stat()
            segments.append(_Segment(int(m.group(1)), p, st.st_size, created_ms=st.st_mtime_ns // 1_000_000))
        elif p.name.endswith(".log"):
            log.warning("log_file_ignored", file=str(p), reason="not named like a segment (%020d.log)")
    segments.sort(key=lambda s: s.base_offset)
    return segments


def _recover(segments: list[_Segment], deep: bool = True) -> int:
    """Check every batch; truncate a torn tail of the last segment. Returns the log's next offset."""
    next_offset = segments[0].base_offset if segments else 0
    scans: list[_ScanResult] = []
    for i, seg in enumerate(segments):
        if seg.base_offset < next_offset:
            raise CorruptLogError(seg.path, 0, f"segment starts at offset {seg.base_offset}, before the end "
                                  f"({next_offset}) of the previous segment")
        scan = _scan_segment(seg, is_last=i == len(segments) - 1, deep=deep)
        scans.append(scan)
        next_offset = scan.next_offset
    # Only now, with every segment checked, change anything on disk.
    if segments and scans[-1].bad is not None:
        seg, scan = segments[-1], scans[-1]
        assert scan.bad is not None
        with open(seg.path, "r+b") as f:
            f.truncate(scan.good_end)
            f.flush()
            os.fsync(f.fileno())
        log.warning("torn_tail_truncated", file=str(seg.path), position=scan.good_end,
                    bytes=seg.size - scan.good_end, reason=scan.bad.reason)
        seg.size = scan.good_end
    return next_offset


def _scan_segment(seg: _Segment, is_last: bool, deep: bool = True) -> _ScanResult:
    pos, expected = 0, seg.base_offset
    with open(seg.path, "rb") as f:
        while pos < seg.size:
            try:
                info = _read_batch(f, pos, seg.size, expected, deep)
            except _BadBatch as bad:
                if not is_last:
                    raise CorruptLogError(seg.path, pos, f"{bad.reason} (in a segment that is not the last, "
                                          "so it cannot be a torn write)") from None
                if bad.complete:
                    raise CorruptLogError(seg.path, pos, f"{bad.reason} (in a whole batch with a valid CRC, "
                                          "so it cannot be a torn write)") from None
                # Even a batch that seems to run past the end is checked for valid data after it: a damaged
                # Length field in the middle of the log looks just like a torn write.
                valid_at = _valid_batch_after(f, pos + 1, seg.size)
                if valid_at is not None:
                    raise CorruptLogError(seg.path, pos, f"{bad.reason}, with a valid batch after it at byte "
                                          f"{valid_at}") from None
                return _ScanResult(pos, expected, bad)
            seg.index(info, pos)
            pos += info.size
            expected = info.last_offset + 1
    return _ScanResult(pos, expected)
