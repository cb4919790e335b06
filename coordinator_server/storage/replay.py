"""Fast start-up replay of a `__consumer_offsets` partition: the last record per key, decoded once.

Theory of operation
-------------------
Loading a partition only needs the *last* record of every key: `group.loader.GroupLoader` keeps one value
per group and per (group, topic, partition), a later record replaces an earlier one and a tombstone removes
it. An uncompacted log is mostly superseded commits, and decoding each one with kafka-python's generic
message classes was nearly all of the start-up time. So `LatestRecords` walks the batches and:

1. parses each record's key and value *bytes* out of the batch by hand (the v2 record layout, `_records`);
2. decodes each distinct key once (`decode_key`, cached by its bytes), so a key seen a million times costs a
   dict lookup after the first;
3. mirrors the loader's dicts exactly — same keys, same insertion and deletion order, a tombstone popping
   its key and an emptied group's offsets dict — but holds the raw value bytes (and their offset, for an
   error message) instead of a decoded value;
4. decodes the values that survive, and only those (`records()`).

`records()` then yields, for an empty `GroupLoader`, records whose application gives the very state that
applying every record of the log in order gives, dict orders included: every group record in the order
of the loader's `group_values`, then every offset record group by group in the order of its `offsets`.
KIP-848 consumer group records come last: the latest value of each of their keys, in the order those
values were written, tombstoned keys left out. Applying them to empty consumer groups gives what applying
the whole log gives, because each record holds the whole value of its key and `ConsumerGroup.apply`
creates a member or a group by whichever of its records comes first (a group whose epoch record was
tombstoned is deleted; leaving out all its records leaves it out as well).

What changes against decoding everything: a *superseded* value is never decoded, so one that would not
decode no longer refuses the start (a key that does not decode still does; so does a surviving value).
Every batch is still CRC-checked once per start and every record's framing is still parsed and checked
(`PartitionLog.checked_batches`, `_records`): corruption anywhere still refuses the start.

Keys and values are decoded by `storage.codec`, the one decoder of `__consumer_offsets` (its fast,
`struct`-based path; dump-log and the pipeline use the same functions). The hand-written batch walker
(`_records`) only takes the common, well-formed shape: uncompressed batches of records without headers.
Anything else, and anything that does not parse cleanly, goes to kafka-python's record parser
(`storage.batch.batch_records`), which reads it or raises its usual errors; tests check both agree on
generated input (docs/decisions.md, Storage).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import structlog

from coordinator_server.group.records import CoordinatorRecord, GroupMetadataRecord, OffsetCommitRecord
from coordinator_server.storage.batch import CONTROL_BIT, TRANSACTIONAL_BIT, BadBatch, batch_records
from coordinator_server.storage.codec import (
    CONSUMER_GROUP_KEY,
    OFFSET_COMMIT_KEY,
    OtherRecord,
    RecordKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    record_key_version,
)
from coordinator_server.storage.consumer_codec import decode_consumer_record
from coordinator_server.storage.errors import CorruptLogError, RecordDecodeError

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.util import decode_varint

log = structlog.get_logger("coordinator_server.storage.coordinator_log")

_HEADER = DefaultRecordBatch.HEADER_STRUCT
_HEADER_SIZE = _HEADER.size
# Attributes bits that send a batch to kafka-python: compression codec, transactional, control.
_SLOW_ATTRIBUTES = 0x07 | 0x10 | 0x20



# -- records of a batch -----------------------------------------------------------------------------

def _records(raw: bytes, gaps: bool) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of a checked batch.

    Raises BadBatch as `batch.batch_records` does; batches it does not take (compressed, control,
    transactional, records with headers, anything irregular) go to `batch_records`, which decides.
    """
    (base, _length, _epoch, _magic, _crc, attrs, last_delta, _first_ts, _max_ts, _pid, _pepoch, _seq,
     count) = _HEADER.unpack_from(raw)
    if attrs & _SLOW_ATTRIBUTES:
        return _slow_records(raw, gaps)
    out: list[tuple[int, bytes | None, bytes | None]] = []
    append = out.append
    pos = _HEADER_SIZE
    prev = base - 1
    try:
        for _ in range(count):
            # Length varint (zigzag), usually 1-2 bytes.
            b = raw[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif raw[pos + 1] < 0x80:
                b = (b & 0x7F) | (raw[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = decode_varint(raw, pos)
            end = pos + length
            if raw[pos] & 0x80:  # attributes: kafka-python reads it as a varint
                return _slow_records(raw, gaps)
            pos += 1
            b = raw[pos]  # timestamp delta varlong, not needed
            if b < 0x80:
                pos += 1
            else:
                _ts, pos = decode_varint(raw, pos)
            b = raw[pos]  # offset delta varint
            if b < 0x80:
                offset = base + ((b >> 1) ^ -(b & 1))
                pos += 1
            else:
                delta, pos = decode_varint(raw, pos)
                offset = base + delta
            b = raw[pos]  # key length
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = decode_varint(raw, pos)
            if klen >= 0:
                key = raw[pos:pos + klen]
                pos += klen
            else:
                key = None
            b = raw[pos]  # value length
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = decode_varint(raw, pos)
            if vlen >= 0:
                value = raw[pos:pos + vlen]
                pos += vlen
            else:
                value = None
            # No headers (count 0, one byte) and the record ends where its length says.
            if raw[pos] != 0 or pos + 1 != end or end > len(raw):
                return _slow_records(raw, gaps)
            pos = end
            if offset <= prev:
                return _slow_records(raw, gaps)
            prev = offset
            append((offset, key, value))
    except (IndexError, ValueError):
        return _slow_records(raw, gaps)
    if pos != len(raw) or not out or out[0][0] != base or prev != base + last_delta \
            or (not gaps and last_delta != count - 1):
        return _slow_records(raw, gaps)
    return out


def _slow_records(raw: bytes, gaps: bool) -> list[tuple[int, bytes | None, bytes | None]]:
    if _HEADER.unpack_from(raw)[5] & (TRANSACTIONAL_BIT | CONTROL_BIT):
        # Transactional offsets are not read into groups yet: applying them as plain commits would apply
        # aborted ones. (Topic partitions hold such batches; recovery accepts them there.)
        raise BadBatch("transactional or control batch, which this server does not read", complete=True)
    return [(r.offset, r.key, r.value) for r in batch_records(DefaultRecordBatch(raw), gaps)]


# -- last record per key ----------------------------------------------------------------------------

class LatestRecords:
    """The loader's state over raw values: see the module docstring."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.groups: dict[str, tuple[int, bytes | None]] = {}
        self.offsets: dict[str, dict[tuple[str, int], tuple[int, bytes]]] = {}
        # Consumer group records: key bytes -> (offset, value), in the order the latest values were written.
        self.consumer: dict[bytes, tuple[int, bytes]] = {}
        self._keys: dict[bytes, RecordKey] = {}
        self.records_read = 0

    def add_batches(self, batches: Iterable[tuple[Path, int, bytes, bool]]) -> None:
        """Apply every record of `batches` (from `PartitionLog.checked_batches`) in order."""
        for path, pos, raw, gaps in batches:
            try:
                records = _records(raw, gaps)
            except BadBatch as e:
                raise CorruptLogError(path, pos, e.reason) from e
            self._apply(records)

    def _apply(self, records: list[tuple[int, bytes | None, bytes | None]]) -> None:
        keys = self._keys
        groups = self.groups
        offsets = self.offsets
        for offset, key, value in records:
            k = keys.get(key)  # type: ignore[arg-type]
            if k is None:
                k = self._new_key(offset, key)
                if k is None:
                    continue
            kind, group, tp = k
            if kind == OFFSET_COMMIT_KEY:
                group_offsets = offsets.get(group)
                if value is None:
                    if group_offsets is not None:
                        group_offsets.pop(tp, None)  # type: ignore[arg-type]
                        if not group_offsets:
                            del offsets[group]
                else:
                    if group_offsets is None:
                        group_offsets = offsets[group] = {}
                    group_offsets[tp] = (offset, value)  # type: ignore[index]
            elif kind == CONSUMER_GROUP_KEY:
                consumer = self.consumer
                consumer.pop(key, None)  # type: ignore[arg-type]
                if value is not None:
                    consumer[key] = (offset, value)  # type: ignore[index]
            elif value is None:
                groups.pop(group, None)
            else:
                groups[group] = (offset, value)
        self.records_read += len(records)

    def _new_key(self, offset: int, key: bytes | None) -> RecordKey | None:
        where = f"__consumer_offsets-{self.partition} offset {offset}"
        if key is None:
            raise RecordDecodeError(f"{where}: record has no key")
        try:
            k = decode_key(key)
        except RecordDecodeError as e:
            raise RecordDecodeError(f"{where}: {e}") from e
        if isinstance(k, OtherRecord):
            # Not cached: every such record is logged, as the full replay does.
            log.warning("unknown_record_type_skipped", partition=self.partition, offset=offset,
                        key_version=k.key_version, record_type=k.type_name)
            return None
        self._keys[key] = k
        return k

    def records(self) -> Iterator[CoordinatorRecord]:
        """Records that rebuild the loader's state from empty (see the module docstring); decodes the
        surviving values, raising RecordDecodeError naming the offset of one that does not decode."""
        for group, (offset, value) in self.groups.items():
            yield GroupMetadataRecord(group, self._decode(decode_group_value, offset, value))
        for group, group_offsets in self.offsets.items():
            for (topic, partition), (offset, value) in group_offsets.items():
                yield OffsetCommitRecord(group, topic, partition, self._decode(decode_offset_value, offset, value))
        for key, (offset, value) in self.consumer.items():
            yield self._decode(lambda v, k=key: decode_consumer_record(record_key_version(k), k, v), offset, value)

    def _decode(self, decode: Any, offset: int, value: bytes | None) -> Any:
        try:
            return decode(value)
        except RecordDecodeError as e:
            raise RecordDecodeError(f"__consumer_offsets-{self.partition} offset {offset}: {e}") from e
