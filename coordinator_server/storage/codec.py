"""`CoordinatorRecord` <-> Kafka's `__consumer_offsets` key and value bytes (kafka-semantics.md §5).

Writers use the versions Kafka writes by default: OffsetCommitKey v1, OffsetCommitValue v3 (v1 when the
commit carries an explicit expire timestamp), GroupMetadataKey v2, GroupMetadataValue v3. Readers accept
every version Kafka has defined, so a log written by Kafka itself loads.

kafka-python's decoder is lenient in ways a log reader must not be: it clamps an unknown newer version to
the newest one it knows, ignores trailing bytes and reads a null (length -1) into a non-nullable field.
This module checks all three, so a record either decodes exactly as Kafka would read it or raises
`RecordDecodeError`.

Offset commit keys and values are encoded by hand (`struct`), not with kafka-python's classes: they are
written once per committed partition, on the OffsetCommit path, where kafka-python's generic encoder
took ~11 µs a record against ~1.5 µs here (docs/decisions.md, "Offset commit records encoded by hand").
tests/unit/test_codec.py checks the bytes against kafka-python's classes on generated input, including
that both refuse the same out-of-range values.
"""
from __future__ import annotations

import io
import struct
from typing import Any

from coordinator_server.group.records import (
    CoordinatorRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage.errors import RecordDecodeError
from protocol import coordinator_records as schema

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_OFFSET_KEY_VERSION = _INT16.pack(schema.OFFSET_COMMIT_KEY_WRITE_VERSION)
_VALUE_V3_HEAD = struct.Struct(">hqi")  # version 3, offset, leader epoch
_VALUE_V1_HEAD = struct.Struct(">hq")  # version 1, offset
_TIMESTAMPS = struct.Struct(">qq")  # commit, expire (v1)


def encode_record(rec: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """Key and value bytes of one record; the value is None for a tombstone."""
    if isinstance(rec, OffsetCommitRecord):
        # OffsetCommitKey v1: group string, topic string, partition int32.
        key = b"".join((_OFFSET_KEY_VERSION, _string(rec.group_id, "group_id"), _string(rec.topic, "topic"),
                        _INT32.pack(rec.partition)))
        return key, None if rec.value is None else _encode_offset_value(rec.value)
    if isinstance(rec, GroupMetadataRecord):
        key = schema.GroupMetadataKey(group=_str(rec.group_id, "group_id")).encode(
            version=schema.GROUP_METADATA_KEY_VERSION, header=True
        )
        return key, None if rec.value is None else _encode_group_value(rec.value)
    raise TypeError(f"not a coordinator record: {rec!r}")


def record_key_version(key: bytes) -> int:
    """The int16 version in front of a key, which is also its record type (0-1 offsets, 2 group, 3-15 other)."""
    if len(key) < _INT16.size:
        raise RecordDecodeError(f"record key of {len(key)} bytes is too short to hold a version")
    version: int = _INT16.unpack_from(key)[0]
    return version


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """The record for Kafka's key and value bytes; None when the key version is a record type we do not
    read (KIP-848 or share-group records), so the caller can warn naming it."""
    key_version = record_key_version(key)
    if key_version in schema.OFFSET_COMMIT_KEY_VERSIONS:
        k = _decode(schema.OffsetCommitKey, key)
        return OffsetCommitRecord(
            group_id=_required(k.group, "OffsetCommitKey.group"),
            topic=_required(k.topic, "OffsetCommitKey.topic"),
            partition=k.partition,
            value=None if value is None else _decode_offset_value(value),
        )
    if key_version == schema.GROUP_METADATA_KEY_VERSION:
        g = _decode(schema.GroupMetadataKey, key)
        return GroupMetadataRecord(
            group_id=_required(g.group, "GroupMetadataKey.group"),
            value=None if value is None else _decode_group_value(value),
        )
    return None


def _encode_offset_value(v: OffsetCommitValue) -> bytes:
    # Kafka writes v1 only to keep an explicit expire timestamp (OffsetCommit v2-4 with a retention time);
    # v1 has no leader epoch, so that is dropped, as Kafka does.
    metadata = _string(v.metadata, "metadata")
    if v.expire_timestamp_ms == -1:
        # v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64.
        return b"".join((_VALUE_V3_HEAD.pack(schema.OFFSET_COMMIT_VALUE_WRITE_VERSION, v.offset, v.leader_epoch),
                         metadata, _INT64.pack(v.commit_timestamp_ms)))
    # v1: offset int64, metadata string, commitTimestamp int64, expireTimestamp int64.
    return b"".join((_VALUE_V1_HEAD.pack(schema.OFFSET_COMMIT_VALUE_EXPIRE_VERSION, v.offset), metadata,
                     _TIMESTAMPS.pack(v.commit_timestamp_ms, v.expire_timestamp_ms)))


def _string(value: str, field: str) -> bytes:
    """A non-nullable Kafka string: int16 length, then UTF-8 (struct.error past 32767 bytes, as kafka-python)."""
    data = _str(value, field).encode("utf-8")
    return _INT16.pack(len(data)) + data


def _encode_group_value(v: GroupMetadataValue) -> bytes:
    member_cls = schema.GroupMetadataValue.MemberMetadata
    members = [
        member_cls(
            member_id=_str(m.member_id, "member_id"),
            group_instance_id=m.group_instance_id,
            client_id=_str(m.client_id, "client_id"),
            client_host=_str(m.client_host, "client_host"),
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=_bytes(m.subscription, "subscription"),
            assignment=_bytes(m.assignment, "assignment"),
        )
        for m in v.members
    ]
    encoded: bytes = schema.GroupMetadataValue(
        protocol_type=_str(v.protocol_type, "protocol_type"),
        generation=v.generation,
        protocol=v.protocol,
        leader=v.leader,
        current_state_timestamp=v.current_state_timestamp_ms,
        members=members,
    ).encode(version=schema.GROUP_METADATA_VALUE_WRITE_VERSION, header=True)
    return encoded


def _decode_offset_value(value: bytes) -> OffsetCommitValue:
    v = _decode(schema.OffsetCommitValue, value)
    return OffsetCommitValue(
        offset=v.offset,
        # Fields a version lacks read as Kafka's "absent": -1.
        leader_epoch=v.leader_epoch if v.version >= 3 else -1,
        metadata=_required(v.metadata, "OffsetCommitValue.metadata"),
        commit_timestamp_ms=v.commit_timestamp,
        expire_timestamp_ms=v.expire_timestamp if v.version == 1 else -1,
    )


def _decode_group_value(value: bytes) -> GroupMetadataValue:
    v = _decode(schema.GroupMetadataValue, value)
    members = []
    for m in v.members:
        members.append(
            MemberRecord(
                member_id=_required(m.member_id, "MemberMetadata.memberId"),
                group_instance_id=m.group_instance_id if v.version >= 3 else None,
                client_id=_required(m.client_id, "MemberMetadata.clientId"),
                client_host=_required(m.client_host, "MemberMetadata.clientHost"),
                # v0 had no rebalance timeout; Kafka used the session timeout for both.
                rebalance_timeout_ms=m.rebalance_timeout if v.version >= 1 else m.session_timeout,
                session_timeout_ms=m.session_timeout,
                subscription=bytes(_required(m.subscription, "MemberMetadata.subscription")),
                assignment=bytes(_required(m.assignment, "MemberMetadata.assignment")),
            )
        )
    return GroupMetadataValue(
        protocol_type=_required(v.protocol_type, "GroupMetadataValue.protocolType"),
        generation=v.generation,
        protocol=v.protocol,
        leader=v.leader,
        current_state_timestamp_ms=v.current_state_timestamp if v.version >= 2 else -1,
        members=tuple(members),
    )


def _decode(cls: Any, data: bytes) -> Any:
    """Decode `data` (int16 version + struct) exactly: known version, no short read, no trailing bytes."""
    name = cls.name
    if len(data) < _INT16.size:
        raise RecordDecodeError(f"{name} of {len(data)} bytes is too short to hold a version")
    version = _INT16.unpack_from(data)[0]
    lo, hi = cls.valid_versions
    if not lo <= version <= hi:
        raise RecordDecodeError(f"{name} version {version} is not one of the known versions {lo}-{hi}")
    buf = io.BytesIO(data)
    try:
        decoded = cls.decode(buf, header=True)
    except (ValueError, struct.error, UnicodeDecodeError, IndexError, TypeError) as e:
        raise RecordDecodeError(f"{name} v{version} does not decode: {e}") from e
    if buf.tell() != len(data):
        raise RecordDecodeError(f"{name} v{version} has {len(data) - buf.tell()} unexpected trailing bytes")
    return decoded


def _required(value: Any, field: str) -> Any:
    if value is None:
        raise RecordDecodeError(f"non-nullable field {field} is null")
    return value


def _str(value: str, field: str) -> str:
    # kafka-python would write None as a null string, which Kafka cannot read back in these fields.
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}")
    return value


def _bytes(value: bytes, field: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{field} must be bytes, got {type(value).__name__}")
    return bytes(value)


__all__ = ["RecordDecodeError", "decode_record", "encode_record", "record_key_version"]
