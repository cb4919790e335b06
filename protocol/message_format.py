"""The old message formats (magic 0 and 1, Kafka before 0.11) against our v2 record batches. No I/O.

Produce v0-2 carries a message set of magic 0 or 1 and Fetch v0-3 must answer with one (magic 0 for
Fetch v0-1, magic 1 for v2-3), as Kafka 3.x brokers still serve them (Kafka 4 dropped them, KIP-896).
Clients that speak nothing newer, such as kafka-go 0.2.1, need both. As Kafka does:

- up-conversion (LogValidator.convertAndAssignOffsets*): the messages of a Produce v0-2 partition, wrappers
  decompressed, become one v2 batch with no producer id, each record keeping its key, value and (magic 1)
  timestamp; a magic-0 message has none (-1). The batch keeps the producer's codec. The topic store then
  assigns offsets and checks the batch like any other.
- down-conversion (Kafka's RecordsUtil.downConvert, done lazily by its LazyDownConversionRecords): each v2
  batch a consumer fetches becomes a message set of the fetch's magic with the same offsets; headers have
  no place there and are dropped, a magic-0 message has no timestamp, control batches (transaction markers)
  are left out. Compressed batches are sent uncompressed.

Malformed input raises `MessageFormatError`, which the Produce handler answers CORRUPT_MESSAGE.
"""
from __future__ import annotations

import sys
import warnings

with warnings.catch_warnings():  # kafka-python's import-time importlib.resources deprecations
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from kafka.errors import CorruptRecordError, UnsupportedCodecError
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

_NO_TIMESTAMP = -1
_ZSTD = 4  # a v2-only codec


class MessageFormatError(Exception):
    """A Produce v0-2 message set that is not one: bad sizes, CRCs, magic or codec."""


def fetch_magic(fetch_version: int) -> int:
    """The message format a Fetch of this version answers in: 0 for v0-1, 1 for v2-3, 2 from v4 on."""
    return 0 if fetch_version <= 1 else 1 if fetch_version <= 3 else 2


def up_convert(message_set: bytes) -> bytes:
    """A Produce v0-2 message set (magic 0 or 1) as one v2 record batch, offsets from 0."""
    try:
        records = MemoryRecords(bytes(message_set))
        codec = 0
        out: list[tuple[int, bytes | None, bytes | None]] = []
        while (batch := records.next_batch()) is not None:
            if not isinstance(batch, LegacyRecordBatch):
                raise MessageFormatError("a v2 record batch in a Produce request below v3")
            if not batch.validate_crc():
                raise MessageFormatError("message CRC mismatch")
            codec = codec or batch.compression_type
            for record in batch:
                timestamp = record.timestamp if batch.magic >= 1 and record.timestamp is not None else _NO_TIMESTAMP
                out.append((timestamp, record.key, record.value))
    except (CorruptRecordError, UnsupportedCodecError, AssertionError, ValueError, IndexError) as e:
        raise MessageFormatError(f"bad message set: {e}") from e
    if not out:
        raise MessageFormatError("an empty message set")
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize)
    for i, (timestamp, key, value) in enumerate(out):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=[])
    return bytes(builder.build())


def down_convert(records: bytes, magic: int) -> bytes:
    """v2 record batches (whole ones, as the topic store reads them) as a message set of `magic`."""
    if magic >= 2 or not records:
        return records
    out = bytearray()
    batches = MemoryRecords(bytes(records))
    while (batch := batches.next_batch()) is not None:
        if batch.is_control_batch:
            continue
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=sys.maxsize)
        for record in batch:
            timestamp = record.timestamp if magic >= 1 and record.timestamp is not None else None
            builder.append(record.offset, timestamp=timestamp, key=record.key, value=record.value)
        out += builder.build()
    return bytes(out)
