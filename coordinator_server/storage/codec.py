"""`CoordinatorRecord` <-> Kafka's `__consumer_offsets` key and value bytes: the one
codec of that topic. The server's writes and its start-up replay (`storage.replay`), `dump-log`
(`tools.dump_log`) and the Spark pipeline (`pipeline.decode`) all read records here.

Writers use the versions Kafka writes by default: OffsetCommitKey v1, OffsetCommitValue v3 (v1 when the
commit carries an explicit expire timestamp), GroupMetadataKey v2, GroupMetadataValue v3. Readers accept
every version Kafka has defined, so a log written by Kafka itself loads.

Record types. The int16 in front of a key is the record type (Kafka's CoordinatorRecordType). This server
loads offset commits (0, 1), group metadata (2) and the KIP-848 consumer group records (3-8, 16, through
`storage.consumer_codec`); every other type Kafka defines (KIP-932 share groups, KIP-1071 streams groups)
is named in `RECORD_TYPES` and decodes to an `OtherRecord` — a known type, not decoded — as does a key
version no table names (`type_name` None). Adding a type Kafka defines later is one line in `RECORD_TYPES`.

Decoding is two-tier, for start-up speed (docs/decisions.md, "One decoder of __consumer_offsets"):
- the fast path (`decode_key`, `decode_offset_value`, `decode_group_value`) reads the non-flexible
  versions by hand with `struct`, and takes only well-formed bytes;
- anything else — the flexible versions (OffsetCommitValue and GroupMetadataValue v4), and any bytes the
  fast path finds irregular — goes to kafka-python's generic classes (`slow_decode_*`), which decode it or
  raise. So an error always comes from, and reads as, the generic decoder; tests hold the fast path to
  the slow one on generated and damaged input (tests/unit/test_codec.py, tests/unit/test_replay.py).

kafka-python's decoder is lenient in ways a log reader must not be: it clamps an unknown newer version to
the newest one it knows, ignores trailing bytes and reads a null (length -1) into a non-nullable field.
The slow path checks all three, so a record either decodes exactly as Kafka would read it or raises
`RecordDecodeError`.

Offset commit keys and values are encoded by hand (`struct`, compiled in `storage.offset_commit_codec`),
not with kafka-python's classes: they are written once per committed partition, on the OffsetCommit path,
where kafka-python's generic encoder took ~11 µs a record (docs/decisions.md, "Offset commit records
encoded by hand").
Group metadata keys and values are too: one is written per generation and lists every member, and
kafka-python's encoder spent about 8% of the server's CPU of a 5,000-member rebalance on it.
tests/unit/test_codec.py checks the bytes against kafka-python's classes on generated input, including
that both refuse the same out-of-range values.

No I/O and no server state: the Spark workers of `pipeline` import this module on their own.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from coordinator_server.group.consumer.records import CONSUMER_GROUP_RECORD_TYPES
from coordinator_server.group.records import (
    CoordinatorRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage.consumer_codec import (
    CONSUMER_GROUP_KEY_VERSIONS,
    consumer_key_group,
    decode_consumer_record,
    encode_consumer_record,
)
from coordinator_server.storage.errors import RecordDecodeError
from coordinator_server.storage.offset_commit_codec import encode_offset_commit, kafka_string
from coordinator_server.storage.schema_decode import decode_exact, required
from protocol import coordinator_records as schema
from protocol.coordinator_records import GROUP_METADATA_KEY_VERSION

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_TIMESTAMPS = struct.Struct(">qq")  # commit, expire (v1)
_GROUP_KEY_VERSION = _INT16.pack(GROUP_METADATA_KEY_VERSION)
_GROUP_VALUE_VERSION = _INT16.pack(schema.GROUP_METADATA_VALUE_WRITE_VERSION)
_TIMEOUTS = struct.Struct(">ii")  # a member's rebalance and session timeouts


def encode_record(rec: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """Key and value bytes of one record; the value is None for a tombstone."""
    if isinstance(rec, OffsetCommitRecord):
        # The compiled encoder trusts the types; a wrong one is refused here, by its field's name.
        _str(rec.group_id, "group_id")
        _str(rec.topic, "topic")
        if rec.value is not None:
            _str(rec.value.metadata, "metadata")
        return encode_offset_commit(rec)
    if isinstance(rec, GroupMetadataRecord):
        key = _GROUP_KEY_VERSION + _string(rec.group_id, "group_id")  # GroupMetadataKey v2: group string
        return key, None if rec.value is None else _encode_group_value(rec.value)
    if isinstance(rec, CONSUMER_GROUP_RECORD_TYPES):
        return encode_consumer_record(rec)
    raise TypeError(f"not a coordinator record: {rec!r}")


def _string(value: str, field: str) -> bytes:
    """A non-nullable Kafka string, its type checked so that a wrong one is refused by the field's name."""
    return kafka_string(_str(value, field))


def _encode_group_value(v: GroupMetadataValue) -> bytes:
    """GroupMetadataValue v3, by hand: one is written per generation of every group, and it lists every
    member (docs/decisions.md, "Group metadata records encoded by hand")."""
    members = v.members
    parts = [_GROUP_VALUE_VERSION, _string(v.protocol_type, "protocol_type"), _INT32.pack(v.generation),
             _nullable_string(v.protocol), _nullable_string(v.leader), _INT64.pack(v.current_state_timestamp_ms),
             _INT32.pack(len(members))]
    for m in members:
        parts += (_string(m.member_id, "member_id"), _nullable_string(m.group_instance_id),
                  _string(m.client_id, "client_id"), _string(m.client_host, "client_host"),
                  _TIMEOUTS.pack(m.rebalance_timeout_ms, m.session_timeout_ms),
                  _sized_bytes(m.subscription, "subscription"), _sized_bytes(m.assignment, "assignment"))
    return b"".join(parts)


def _nullable_string(value: str | None) -> bytes:
    return b"\xff\xff" if value is None else kafka_string(value)


def _sized_bytes(value: bytes, field: str) -> bytes:
    data = _bytes(value, field)
    return _INT32.pack(len(data)) + data


# -- record types -------------------------------------------------------------------------------------

# Kafka's CoordinatorRecordType (group-coordinator's `*Key.json` specs, their "apiKey"): the key version of
# every record type Kafka writes to `__consumer_offsets`. 0-2 are what this server loads (`decode_key`
# dispatches on them); the rest are recognised and passed through as `OtherRecord`. A type Kafka adds
# later is one line here.
RECORD_TYPES: dict[int, str] = {
    0: "OffsetCommit",  # Kafka 4 names version 0 LegacyOffsetCommit: same layout as 1
    1: "OffsetCommit",
    2: "GroupMetadata",
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
    16: "ConsumerGroupRegularExpression",
    17: "StreamsGroupMetadata",
    18: "StreamsGroupPartitionMetadata",
    19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata",
    21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment",
    23: "StreamsGroupTopology",
    24: "StreamsGroupTargetAssignmentResolvedTopicIds",
}


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """A record of a type this server does not load, not decoded. `type_name` is its name in
    `RECORD_TYPES`, None for a key version that table does not know (Kafka's own loader skips such a
    record with a warning: a leftover of an aborted upgrade)."""

    key_version: int
    type_name: str | None


# A decoded key, as the replay caches it per key bytes: (OFFSET_COMMIT_KEY, group, (topic, partition)),
# (GROUP_METADATA_KEY, group, None) or (CONSUMER_GROUP_KEY, group, None) — the last only names the group;
# the whole record is decoded from the bytes when needed. A tuple, not a dataclass: building it is on the
# start-up path.
OFFSET_COMMIT_KEY = 0
GROUP_METADATA_KEY = 1
CONSUMER_GROUP_KEY = 2
RecordKey = tuple[int, str, tuple[str, int] | None]

_KEY_HEAD = struct.Struct(">hh")  # key version, first string's length
_V0 = struct.Struct(">qh")  # offset, metadata length (OffsetCommitValue v0-2)
_V3 = struct.Struct(">qih")  # offset, leader epoch, metadata length (v3)


class _Irregular(Exception):
    """Bytes the fast path does not take: the slow (generic) decoder decides."""


def record_key_version(key: bytes) -> int:
    """The int16 version in front of a key, which is also its record type (`RECORD_TYPES`)."""
    if len(key) < _INT16.size:
        raise RecordDecodeError(f"record key of {len(key)} bytes is too short to hold a version")
    version: int = _INT16.unpack_from(key)[0]
    return version


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | OtherRecord:
    """The record for Kafka's key and value bytes (a value of None is a tombstone), or an `OtherRecord`
    for a type this server does not load; raises RecordDecodeError for bytes that do not decode."""
    k = decode_key(key)
    if isinstance(k, OtherRecord):
        return k
    kind, group, tp = k
    if kind == OFFSET_COMMIT_KEY:
        assert tp is not None
        return OffsetCommitRecord(group, tp[0], tp[1], None if value is None else decode_offset_value(value))
    if kind == CONSUMER_GROUP_KEY:
        return decode_consumer_record(record_key_version(key), key, value)
    return GroupMetadataRecord(group, None if value is None else decode_group_value(value))


def decode_or_error(key: bytes | None, value: bytes | None) -> CoordinatorRecord | OtherRecord | RecordDecodeError:
    """`decode` for readers that report a bad record and go on (`dump-log`, the pipeline): the error is
    returned, not raised, and a record without a key is one too. (The server refuses to start instead.)"""
    if key is None:
        return RecordDecodeError("record without a key")
    try:
        return decode(bytes(key), None if value is None else bytes(value))
    except RecordDecodeError as e:
        return e


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """`decode`, with None for a record type this server does not load."""
    rec = decode(key, value)
    return None if isinstance(rec, OtherRecord) else rec


# -- keys -----------------------------------------------------------------------------------------------

def decode_key(key: bytes) -> RecordKey | OtherRecord:
    """A key's record type and fields; raises RecordDecodeError as `slow_decode_key` does."""
    version = record_key_version(key)
    if version in CONSUMER_GROUP_KEY_VERSIONS:
        group_id = consumer_key_group(key)
        return slow_decode_key(key) if group_id is None else (CONSUMER_GROUP_KEY, group_id, None)
    if version > GROUP_METADATA_KEY_VERSION or version < 0:
        return OtherRecord(version, RECORD_TYPES.get(version))
    try:
        glen = _KEY_HEAD.unpack_from(key)[1]
        if version == GROUP_METADATA_KEY_VERSION:
            if glen >= 0 and len(key) == 4 + glen:
                return GROUP_METADATA_KEY, key[4:].decode(), None
        else:  # OffsetCommitKey v0 and v1: group, topic, partition
            p = 4 + glen
            group = key[4:p].decode()
            tlen = _INT16.unpack_from(key, p)[0]
            q = p + 2 + tlen
            if glen >= 0 and tlen >= 0 and len(key) == q + 4:
                return OFFSET_COMMIT_KEY, group, (key[p + 2:q].decode(), _INT32.unpack_from(key, q)[0])
    except (struct.error, UnicodeDecodeError):
        pass
    return slow_decode_key(key)


def slow_decode_key(key: bytes) -> RecordKey | OtherRecord:
    """kafka-python's reading of a key: the fast path's fallback and the reference it is tested against."""
    version = record_key_version(key)
    if version in schema.OFFSET_COMMIT_KEY_VERSIONS:
        k = _decode(schema.OffsetCommitKey, key)
        return (OFFSET_COMMIT_KEY, _required(k.group, "OffsetCommitKey.group"),
                (_required(k.topic, "OffsetCommitKey.topic"), k.partition))
    if version == schema.GROUP_METADATA_KEY_VERSION:
        g = _decode(schema.GroupMetadataKey, key)
        return GROUP_METADATA_KEY, _required(g.group, "GroupMetadataKey.group"), None
    if version in CONSUMER_GROUP_KEY_VERSIONS:
        return CONSUMER_GROUP_KEY, decode_consumer_record(version, key, None).group_id, None
    return OtherRecord(version, RECORD_TYPES.get(version))


# -- OffsetCommitValue ------------------------------------------------------------------------------------

def decode_offset_value(value: bytes) -> OffsetCommitValue:
    """An OffsetCommitValue of any version; raises RecordDecodeError as `slow_decode_offset_value` does."""
    try:
        version = _INT16.unpack_from(value)[0]
        if version == 3:
            offset, epoch, mlen = _V3.unpack_from(value, 2)
            p = 16 + mlen
            if mlen >= 0 and len(value) == p + 8:
                return OffsetCommitValue(offset, epoch, value[16:p].decode(), _INT64.unpack_from(value, p)[0], -1)
        elif version in (0, 2):
            offset, mlen = _V0.unpack_from(value, 2)
            p = 12 + mlen
            if mlen >= 0 and len(value) == p + 8:
                return OffsetCommitValue(offset, -1, value[12:p].decode(), _INT64.unpack_from(value, p)[0], -1)
        elif version == 1:
            offset, mlen = _V0.unpack_from(value, 2)
            p = 12 + mlen
            if mlen >= 0 and len(value) == p + 16:
                commit, expire = _TIMESTAMPS.unpack_from(value, p)
                return OffsetCommitValue(offset, -1, value[12:p].decode(), commit, expire)
    except (struct.error, UnicodeDecodeError):
        pass
    return slow_decode_offset_value(value)  # v4 (flexible), or not well-formed


def slow_decode_offset_value(value: bytes) -> OffsetCommitValue:
    """kafka-python's reading of an OffsetCommitValue (the fallback and the reference)."""
    v = _decode(schema.OffsetCommitValue, value)
    return OffsetCommitValue(
        offset=v.offset,
        # Fields a version lacks read as Kafka's "absent": -1.
        leader_epoch=v.leader_epoch if v.version >= 3 else -1,
        metadata=_required(v.metadata, "OffsetCommitValue.metadata"),
        commit_timestamp_ms=v.commit_timestamp,
        expire_timestamp_ms=v.expire_timestamp if v.version == 1 else -1,
    )


# -- GroupMetadataValue -----------------------------------------------------------------------------------

def decode_group_value(value: bytes) -> GroupMetadataValue:
    """A GroupMetadataValue of any version; raises RecordDecodeError as `slow_decode_group_value` does."""
    try:
        return _fast_group_value(value)
    except (struct.error, UnicodeDecodeError, _Irregular):
        return slow_decode_group_value(value)  # v4 (flexible), or not well-formed


def _fast_group_value(value: bytes) -> GroupMetadataValue:
    """GroupMetadataValue v0-3 (the non-flexible versions); raises _Irregular (or struct.error,
    UnicodeDecodeError) for anything else."""
    version = _INT16.unpack_from(value)[0]
    if not 0 <= version <= 3:
        raise _Irregular
    protocol_type, p = _string_at(value, 2)
    generation = _INT32.unpack_from(value, p)[0]
    protocol, p = _nullable_string_at(value, p + 4)
    leader, p = _nullable_string_at(value, p)
    timestamp = -1
    if version >= 2:
        timestamp = _INT64.unpack_from(value, p)[0]
        p += 8
    count = _INT32.unpack_from(value, p)[0]
    p += 4
    if count < 0:
        raise _Irregular
    members = []
    for _ in range(count):  # a count past the data ends in struct.error at the first missing field
        member_id, p = _string_at(value, p)
        instance_id = None
        if version >= 3:
            instance_id, p = _nullable_string_at(value, p)
        client_id, p = _string_at(value, p)
        client_host, p = _string_at(value, p)
        if version >= 1:
            rebalance_timeout = _INT32.unpack_from(value, p)[0]
            p += 4
        session_timeout = _INT32.unpack_from(value, p)[0]
        if version == 0:  # v0 had no rebalance timeout; Kafka used the session timeout for both
            rebalance_timeout = session_timeout
        subscription, p = _bytes_at(value, p + 4)
        assignment, p = _bytes_at(value, p)
        members.append(MemberRecord(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                    session_timeout, subscription, assignment))
    if p != len(value):
        raise _Irregular
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def _string_at(buf: bytes, pos: int) -> tuple[str, int]:
    """A non-nullable string at `pos` and the position after it."""
    n = _INT16.unpack_from(buf, pos)[0]
    end = pos + 2 + n
    if n < 0 or end > len(buf):
        raise _Irregular
    return buf[pos + 2:end].decode(), end


def _nullable_string_at(buf: bytes, pos: int) -> tuple[str | None, int]:
    if _INT16.unpack_from(buf, pos)[0] == -1:
        return None, pos + 2
    return _string_at(buf, pos)


def _bytes_at(buf: bytes, pos: int) -> tuple[bytes, int]:
    """Non-nullable bytes (int32 length) at `pos` and the position after them."""
    n = _INT32.unpack_from(buf, pos)[0]
    end = pos + 4 + n
    if n < 0 or end > len(buf):
        raise _Irregular
    return buf[pos + 4:end], end


def slow_decode_group_value(value: bytes) -> GroupMetadataValue:
    """kafka-python's reading of a GroupMetadataValue (the fallback and the reference)."""
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
    """Decode `data` (int16 version + struct) exactly: a version the class knows (schema_decode)."""
    return decode_exact(cls, data, *cls.valid_versions)


_required = required


def _str(value: str, field: str) -> str:
    # kafka-python would write None as a null string, which Kafka cannot read back in these fields.
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}")
    return value


def _bytes(value: bytes, field: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{field} must be bytes, got {type(value).__name__}")
    return bytes(value)


__all__ = [
    "CONSUMER_GROUP_KEY",
    "GROUP_METADATA_KEY",
    "OFFSET_COMMIT_KEY",
    "RECORD_TYPES",
    "OtherRecord",
    "RecordDecodeError",
    "RecordKey",
    "decode",
    "decode_group_value",
    "decode_key",
    "decode_offset_value",
    "decode_or_error",
    "decode_record",
    "encode_record",
    "record_key_version",
]
