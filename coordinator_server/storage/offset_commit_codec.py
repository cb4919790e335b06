"""An offset commit record's key and value bytes: OffsetCommitKey v1 and OffsetCommitValue v3 (v1 when the
commit carries an explicit expire timestamp), by hand with `struct`.

Compiled (setup.py): one record is written per committed partition. The types are trusted here — a None
in a `str` field raises mypyc's unnamed TypeError — so `storage.codec.encode_record` checks them first and
names the field, and the coordinator log, which calls this directly, asks the codec again when this raises
(tests/unit/test_codec.py holds the bytes and the refusals to kafka-python's classes).
"""
from __future__ import annotations

import struct
from typing import Final

from coordinator_server.group.records import OffsetCommitRecord
from protocol import coordinator_records as schema

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_KEY_VERSION: Final = _INT16.pack(schema.OFFSET_COMMIT_KEY_WRITE_VERSION)
_VALUE_V3_HEAD: Final = struct.Struct(">hqi")  # version 3, offset, leader epoch
_VALUE_V1_HEAD: Final = struct.Struct(">hq")  # version 1, offset
_TIMESTAMPS: Final = struct.Struct(">qq")  # commit, expire (v1)
_VALUE_VERSION: Final = schema.OFFSET_COMMIT_VALUE_WRITE_VERSION
_EXPIRE_VERSION: Final = schema.OFFSET_COMMIT_VALUE_EXPIRE_VERSION


def encode_offset_commit(rec: OffsetCommitRecord) -> tuple[bytes, bytes | None]:
    """Key and value bytes; the value is None for a tombstone. Raises TypeError for a field of the wrong
    type, struct.error for an int out of its field's range or a string over 32767 UTF-8 bytes, and
    UnicodeEncodeError for a string UTF-8 cannot encode — as kafka-python's encoder refuses them."""
    # OffsetCommitKey v1: group string, topic string, partition int32.
    key = b"".join((_KEY_VERSION, kafka_string(rec.group_id), kafka_string(rec.topic), _INT32.pack(rec.partition)))
    v = rec.value
    if v is None:
        return key, None
    metadata = kafka_string(v.metadata)
    if v.expire_timestamp_ms == -1:
        # v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64.
        return key, b"".join((_VALUE_V3_HEAD.pack(_VALUE_VERSION, v.offset, v.leader_epoch), metadata,
                              _INT64.pack(v.commit_timestamp_ms)))
    # v1 (Kafka writes it only to keep an explicit expire timestamp): offset int64, metadata string,
    # commitTimestamp int64, expireTimestamp int64; v1 has no leader epoch, so that is dropped, as Kafka does.
    return key, b"".join((_VALUE_V1_HEAD.pack(_EXPIRE_VERSION, v.offset), metadata,
                          _TIMESTAMPS.pack(v.commit_timestamp_ms, v.expire_timestamp_ms)))


def kafka_string(value: str) -> bytes:
    """A non-nullable Kafka string: int16 length, then UTF-8 (struct.error past 32767 bytes, as kafka-python).
    The codec's group metadata encoding writes its strings with it too."""
    data = value.encode("utf-8")
    return _INT16.pack(len(data)) + data
