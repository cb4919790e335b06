"""Kafka v2 record batches on disk: building, checking and walking them.

A batch is `BaseOffset int64 | Length int32 | PartitionLeaderEpoch int32 | Magic int8 | CRC uint32 | ...`;
the CRC32C covers everything from Attributes on, so BaseOffset, Length and the leader epoch are *not*
covered. That is why recovery checks offsets separately: a damaged BaseOffset passes the CRC.

Offsets inside a batch are contiguous when this server writes it (`build_batch`). A batch written by the
cleaner (`storage.compaction`) keeps each surviving record's offset, so its records may skip offsets, as
Kafka's compacted batches do; `check_batch(..., gaps=True)` accepts that: the first record sits at
BaseOffset, the last at BaseOffset + LastOffsetDelta, and offsets strictly increase in between.
"""
from __future__ import annotations

import os
import struct
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import BinaryIO, Final, NamedTuple

from crc32c import crc32c

from protocol.value_class import ValueClass
from protocol.wire_primitives import uvarint

# Importing kafka loads kafka-python's JSON specs through importlib.resources calls deprecated since
# Python 3.11; that warning is about kafka-python, and `filterwarnings = error` would fail the import.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.errors import CorruptRecordError
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

_HEADER: Final = DefaultRecordBatch.HEADER_STRUCT
HEADER_SIZE: Final = _HEADER.size  # 61 bytes: BaseOffset .. RecordsCount
LOG_OVERHEAD: Final = 12  # BaseOffset int64 + Length int32: the bytes not counted by Length
MIN_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
MAGIC_POS: Final = 16  # BaseOffset(8) Length(4) PartitionLeaderEpoch(4)
BASE_OFFSET: Final = struct.Struct(">q")
LEADER_EPOCH: Final = struct.Struct(">i")
LEADER_EPOCH_POS: Final = 12
_LENGTH: Final = struct.Struct(">i")
_NO_PRODUCER: Final = -1
# Batch attribute bits (Kafka's DefaultRecordBatch): part of a transaction; a control batch (a marker).
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20


class LogRecord(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


class BatchInfo(ValueClass):
    """What a v2 batch header says, plus where the batch sits; enough for idempotence and indexing. A
    ValueClass: one is read per batch written, and a NamedTuple's interpreted `__new__` was most of that."""

    __slots__ = ("attributes", "base_offset", "base_sequence", "last_offset", "leader_epoch", "max_timestamp",
                 "position", "producer_epoch", "producer_id", "size")

    def __init__(self, base_offset: int, last_offset: int, max_timestamp: int, producer_id: int,
                 producer_epoch: int, base_sequence: int, position: int, size: int, leader_epoch: int = 0,
                 attributes: int = 0) -> None:
        self.base_offset: Final = base_offset
        self.last_offset: Final = last_offset
        self.max_timestamp: Final = max_timestamp
        self.producer_id: Final = producer_id
        self.producer_epoch: Final = producer_epoch
        self.base_sequence: Final = base_sequence
        self.position: Final = position  # where the batch sits in its segment
        self.size: Final = size
        self.leader_epoch: Final = leader_epoch  # PartitionLeaderEpoch: the epoch of the leader that appended it
        self.attributes: Final = attributes  # compression, timestamp type, transactional and control bits

    def _fields(self) -> tuple[int, int, int, int, int, int, int, int, int, int]:
        return (self.base_offset, self.last_offset, self.max_timestamp, self.producer_id, self.producer_epoch,
                self.base_sequence, self.position, self.size, self.leader_epoch, self.attributes)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @staticmethod
    def parse(buf: bytes | bytearray | memoryview, position: int = 0, at: int = 0) -> BatchInfo:
        """The header at `buf[at:]`; `position` is where the batch sits in its segment."""
        (base, length, epoch, _magic, _crc, attrs, last_delta, _first_ts, max_ts, pid, p_epoch, base_seq,
         _count) = _HEADER.unpack_from(buf, at)
        return BatchInfo(base, base + last_delta, max_ts, pid, p_epoch, base_seq, position, LOG_OVERHEAD + length,
                         epoch, attrs)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        # Sequences wrap at Int32.MAX_VALUE (Kafka's DefaultRecordBatch.incrementSequence).
        return (self.base_sequence + self.last_offset - self.base_offset) % (1 << 31)


class BadBatch(Exception):
    """Why the batch at a position is not a good batch. `complete` when it is whole and passes its CRC
    (so it was written like that or damaged outside the CRC) and thus cannot be a torn write."""

    def __init__(self, reason: str, complete: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.complete = complete


def build_batch(records: Sequence[tuple[bytes | None, bytes | None]], base_offset: int, timestamp_ms: int,
                offset_deltas: Sequence[int] | None = None, timestamps: Sequence[int] | None = None,
                leader_epoch: int = 0) -> bytes:
    """One uncompressed, non-transactional v2 batch, as Kafka's coordinator writes them, stamped with
    the partition leader epoch it is appended under. The cleaner passes the surviving records' own
    offset deltas and timestamps."""
    if offset_deltas is None and timestamps is None and records:
        return _build_contiguous(records, base_offset, timestamp_ms, leader_epoch)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=_NO_PRODUCER,
        producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize,
    )
    for i, (key, value) in enumerate(records):
        delta = i if offset_deltas is None else offset_deltas[i]
        ts = timestamp_ms if timestamps is None else timestamps[i]
        if builder.append(delta, timestamp=ts, key=key, value=value, headers=[]) is None:
            raise AssertionError("record batch builder refused a record")  # batch_size is unbounded
    buf = builder.build()
    # The builder leaves BaseOffset and PartitionLeaderEpoch 0 for a broker to fill in; both lie before
    # Attributes, where the CRC starts, so the CRC it computed stays valid.
    BASE_OFFSET.pack_into(buf, 0, base_offset)
    if leader_epoch:
        LEADER_EPOCH.pack_into(buf, LEADER_EPOCH_POS, leader_epoch)
    return bytes(buf)


_BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")  # BaseOffset .. RecordsCount (61 bytes)
_CRC_FROM: Final = 21  # Attributes: the CRC32C covers the batch from here on


def _zigzag_varint(value: int) -> bytes:
    return uvarint((value << 1) ^ (value >> 63))


_NULL: Final = _zigzag_varint(-1)


def _build_contiguous(records: Sequence[tuple[bytes | None, bytes | None]], base_offset: int, timestamp_ms: int,
                      leader_epoch: int) -> bytes:
    """`build_batch` for what the server writes on every request (offsets contiguous, one timestamp), with
    `struct` and one CRC call: byte for byte what kafka-python's DefaultRecordBatchBuilder builds
    (tests/unit/test_batch_builder.py holds them equal on generated records), at a fraction of its calls per
    record — the builder was a third of an OffsetCommit's cost."""
    parts = []
    for delta, (key, value) in enumerate(records):
        # Attributes 0, timestamp delta 0, offset delta, key, value, no headers.
        body = b"".join((b"\x00\x00", _zigzag_varint(delta),
                         _NULL if key is None else _zigzag_varint(len(key)) + key,
                         _NULL if value is None else _zigzag_varint(len(value)) + value, b"\x00"))
        parts.append(_zigzag_varint(len(body)))
        parts.append(body)
    body = b"".join(parts)
    count = len(records)
    header = bytearray(_BATCH_HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), leader_epoch, 2, 0, 0,
                                          count - 1, timestamp_ms, timestamp_ms, _NO_PRODUCER, -1, -1, count))
    crc = crc32c(body, crc32c(header[_CRC_FROM:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


def check_batch(buf: bytes | bytearray, expected_offset: int | None, gaps: bool = False) -> DefaultRecordBatch:
    """Validate one whole batch (header, CRC, counts, offsets); raises BadBatch.

    `expected_offset` is where the batch must start (or, with `gaps`, the least offset it may start at).
    """
    base_offset, length, _epoch, magic = _HEADER.unpack_from(buf)[:4]
    if magic != 2:
        raise BadBatch(f"magic {magic}, expected 2")
    if length < MIN_LENGTH or len(buf) != LOG_OVERHEAD + length:
        raise BadBatch(f"batch length {length} is invalid")
    batch = DefaultRecordBatch(bytes(buf))
    if not batch.validate_crc():
        raise BadBatch("CRC32C mismatch")
    if expected_offset is not None and (base_offset < expected_offset if gaps else base_offset != expected_offset):
        raise BadBatch(f"base offset {base_offset}, expected {'at least ' if gaps else ''}{expected_offset}",
                       complete=True)
    count = batch.records_count
    delta = batch.last_offset_delta
    if count < 1 or (delta < count - 1 if gaps else delta != count - 1):
        raise BadBatch(f"{count} records with last offset delta {delta}", complete=True)
    return batch


def batch_records(batch: DefaultRecordBatch, gaps: bool = False) -> list[LogRecord]:
    """The records of a checked batch; their offsets must match the header (contiguous unless `gaps`)."""
    try:
        out = [LogRecord(r.offset, r.timestamp, r.key, r.value) for r in batch]
    except CorruptRecordError as e:
        raise BadBatch(f"records do not parse: {e}", complete=True) from e
    base = batch.base_offset
    if not gaps:
        for i, r in enumerate(out):
            if r.offset != base + i:
                raise BadBatch(f"record {i} has offset {r.offset}, expected {base + i}", complete=True)
        return out
    last = base + batch.last_offset_delta
    prev = base - 1
    for i, r in enumerate(out):
        if r.offset <= prev or r.offset > last:
            raise BadBatch(f"record {i} has offset {r.offset}, out of order in {base}..{last}", complete=True)
        prev = r.offset
    if not out or out[0].offset != base or out[-1].offset != last:
        raise BadBatch(f"records do not start at {base} and end at {last}", complete=True)
    return out


def read_batch(f: BinaryIO, pos: int, file_size: int, expected_offset: int, deep: bool = True,
               gaps: bool = False) -> BatchInfo:
    """The good batch at `pos`; raises BadBatch when there is none. `deep` also decodes its records."""
    if file_size - pos < HEADER_SIZE:
        raise BadBatch(f"{file_size - pos} bytes left, less than a batch header")
    f.seek(pos)
    header = f.read(HEADER_SIZE)
    length = _LENGTH.unpack_from(header, 8)[0]
    magic = header[MAGIC_POS]
    if magic != 2:
        raise BadBatch(f"magic {magic}, expected 2")
    if length < MIN_LENGTH:
        raise BadBatch(f"batch length {length} is less than the minimum {MIN_LENGTH}")
    if pos + LOG_OVERHEAD + length > file_size:
        raise BadBatch(f"batch of {LOG_OVERHEAD + length} bytes runs past the end of the file")
    buf = header + f.read(LOG_OVERHEAD + length - HEADER_SIZE)
    batch = check_batch(buf, expected_offset, gaps)
    if deep:
        batch_records(batch, gaps)
    return BatchInfo.parse(buf, pos)


def valid_batch_after(f: BinaryIO, start: int, file_size: int) -> int | None:
    """Position of the first byte at or after `start` where a CRC-valid batch begins, if any.

    Only asked about a tail after a bad batch: a valid batch there means the bad one is damage in the
    middle of the log, not a torn write. An error path, so a byte-by-byte scan is fine.
    """
    if file_size - start < HEADER_SIZE:
        return None
    f.seek(start)
    data = f.read(file_size - start)
    for i in range(len(data) - HEADER_SIZE + 1):
        if data[i + MAGIC_POS] != 2:
            continue
        length = _LENGTH.unpack_from(data, i + 8)[0]
        if length < MIN_LENGTH or i + LOG_OVERHEAD + length > len(data):
            continue
        try:
            check_batch(data[i:i + LOG_OVERHEAD + length], None, gaps=True)
        except BadBatch:
            continue
        return start + i
    return None


def walk_headers(fd: int, start: int, end: int) -> Iterator[BatchInfo]:
    """Batch headers from `start` to `end` of a segment already verified by recovery (no CRC check):
    what index lookups, fetch and retention use to find batch boundaries."""
    pos = start
    while pos < end:
        header = os.pread(fd, HEADER_SIZE, pos)
        if len(header) < HEADER_SIZE:
            raise BadBatch(f"{len(header)} bytes left at {pos}, less than a batch header")
        info = BatchInfo.parse(header, pos)
        if info.size < HEADER_SIZE or pos + info.size > end:
            raise BadBatch(f"batch at {pos} of {info.size} bytes does not fit the segment")
        yield info
        pos += info.size


def read_records(f: BinaryIO, size: int, chunk_bytes: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(position, batch bytes) for every batch of a verified segment, read in large chunks; no CRC check.
    Raises BadBatch when a length does not fit (the file changed after recovery)."""
    f.seek(0)
    file_pos = 0  # where the next f.read starts
    buf = b""
    buf_start = 0  # file position of buf[0]
    pos = 0
    while pos < size:
        off = pos - buf_start
        if len(buf) - off < LOG_OVERHEAD:
            more = f.read(min(chunk_bytes, size - file_pos))
            file_pos += len(more)
            buf, buf_start, off = buf[off:] + more, pos, 0
            if len(buf) < LOG_OVERHEAD:
                raise BadBatch(f"{len(buf)} bytes left at {pos}, less than a batch header")
        length = _LENGTH.unpack_from(buf, off + 8)[0]
        total = LOG_OVERHEAD + length
        if length < MIN_LENGTH or pos + total > size:
            raise BadBatch(f"batch length {length} does not fit the segment")
        if len(buf) - off < total:
            more = f.read(min(max(chunk_bytes, total), size - file_pos))
            file_pos += len(more)
            buf, buf_start, off = buf[off:] + more, pos, 0
            if len(buf) < total:
                raise BadBatch(f"batch at {pos} runs past the end of the file")
        yield pos, buf[off:off + total]
        pos += total
