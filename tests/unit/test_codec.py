"""`__consumer_offsets` key/value codec: Kafka's byte layout, every readable
version, tombstones, and the errors a damaged record must raise."""
from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.group.consumer import records as cg
from coordinator_server.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage import codec
from coordinator_server.storage.codec import decode_record, encode_record, record_key_version
from coordinator_server.storage.errors import RecordDecodeError
from protocol import coordinator_records as schema
from tests.unit.test_replay import mutations
from tests.unit.test_replay import outcome as outcome_of

MEMBER = MemberRecord(
    member_id="m1", group_instance_id="inst", client_id="client", client_host="/10.0.0.1",
    rebalance_timeout_ms=300_000, session_timeout_ms=45_000, subscription=b"\x00\x01", assignment=b"",
)
GROUP = GroupMetadataValue(
    protocol_type="consumer", generation=5, protocol="range", leader="m1",
    current_state_timestamp_ms=1234, members=(MEMBER,),
)
OFFSET = OffsetCommitValue(offset=42, leader_epoch=7, metadata="meta", commit_timestamp_ms=1000,
                           expire_timestamp_ms=-1)

# --- golden bytes, written out by hand from the field layout of Kafka's record schemas ---

OFFSET_KEY_V1 = (
    b"\x00\x01"                      # key version 1 = offset commit
    b"\x00\x01" b"g"                 # group: int16 length + UTF-8
    b"\x00\x01" b"t"                 # topic
    b"\x00\x00\x00\x03"              # partition int32
)
OFFSET_VALUE_V3 = (
    b"\x00\x03"                      # value version 3
    b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offset int64 = 42
    b"\x00\x00\x00\x07"              # leaderEpoch int32 = 7
    b"\x00\x04" b"meta"              # metadata string
    b"\x00\x00\x00\x00\x00\x00\x03\xe8"  # commitTimestamp int64 = 1000
)
OFFSET_VALUE_V1 = (
    b"\x00\x01"                      # value version 1: carries expireTimestamp, no leaderEpoch
    b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offset
    b"\x00\x04" b"meta"              # metadata
    b"\x00\x00\x00\x00\x00\x00\x03\xe8"  # commitTimestamp = 1000
    b"\x00\x00\x00\x00\x00\x00\x07\xd0"  # expireTimestamp = 2000
)
GROUP_KEY_V2 = b"\x00\x02" b"\x00\x01" b"g"  # key version 2 = group metadata; group string
GROUP_VALUE_V3 = (
    b"\x00\x03"                      # value version 3
    b"\x00\x08" b"consumer"          # protocolType
    b"\x00\x00\x00\x05"              # generation int32
    b"\x00\x05" b"range"             # protocol (nullable string)
    b"\x00\x02" b"m1"                # leader (nullable string)
    b"\x00\x00\x00\x00\x00\x00\x04\xd2"  # currentStateTimestamp int64 = 1234
    b"\x00\x00\x00\x01"              # members: int32 array length
    b"\x00\x02" b"m1"                # memberId
    b"\x00\x04" b"inst"              # groupInstanceId (v3+, nullable)
    b"\x00\x06" b"client"            # clientId
    b"\x00\x09" b"/10.0.0.1"         # clientHost
    b"\x00\x04\x93\xe0"              # rebalanceTimeout int32 = 300000
    b"\x00\x00\xaf\xc8"              # sessionTimeout int32 = 45000
    b"\x00\x00\x00\x02" b"\x00\x01"  # subscription: int32 length + bytes
    b"\x00\x00\x00\x00"              # assignment: empty
)
EMPTY_GROUP_VALUE_V3 = (
    b"\x00\x03" b"\x00\x08" b"consumer" b"\x00\x00\x00\x06"
    b"\xff\xff"                      # protocol null
    b"\xff\xff"                      # leader null
    b"\x00\x00\x00\x00\x00\x00\x00\x09"
    b"\x00\x00\x00\x00"              # no members
)


def test_offset_commit_golden_bytes() -> None:
    rec = OffsetCommitRecord("g", "t", 3, OFFSET)
    assert encode_record(rec) == (OFFSET_KEY_V1, OFFSET_VALUE_V3)
    assert decode_record(OFFSET_KEY_V1, OFFSET_VALUE_V3) == rec


def test_offset_commit_with_expire_timestamp_is_written_as_v1() -> None:
    value = OffsetCommitValue(42, leader_epoch=7, metadata="meta", commit_timestamp_ms=1000,
                              expire_timestamp_ms=2000)
    key, encoded = encode_record(OffsetCommitRecord("g", "t", 3, value))
    assert encoded == OFFSET_VALUE_V1
    # v1 has no leader epoch: Kafka drops it too.
    assert decode_record(key, encoded) == OffsetCommitRecord("g", "t", 3, OffsetCommitValue(
        42, leader_epoch=-1, metadata="meta", commit_timestamp_ms=1000, expire_timestamp_ms=2000))


def test_group_metadata_golden_bytes() -> None:
    rec = GroupMetadataRecord("g", GROUP)
    assert encode_record(rec) == (GROUP_KEY_V2, GROUP_VALUE_V3)
    assert decode_record(GROUP_KEY_V2, GROUP_VALUE_V3) == rec


def test_empty_group_golden_bytes() -> None:
    rec = GroupMetadataRecord("g", GroupMetadataValue("consumer", 6, None, None, 9, ()))
    assert encode_record(rec) == (GROUP_KEY_V2, EMPTY_GROUP_VALUE_V3)
    assert decode_record(GROUP_KEY_V2, EMPTY_GROUP_VALUE_V3) == rec


@pytest.mark.parametrize("rec", [
    OffsetCommitRecord("group-é", "topic", 0, None),
    GroupMetadataRecord("group", None),
])
def test_tombstones_round_trip(rec: OffsetCommitRecord | GroupMetadataRecord) -> None:
    key, value = encode_record(rec)
    assert value is None
    assert decode_record(key, value) == rec


@pytest.mark.parametrize("rec", [
    OffsetCommitRecord("g", "t", 2_147_483_647, OffsetCommitValue(-1, -1, "", -1, -1)),
    OffsetCommitRecord("ü", "t.x-y", 0, OffsetCommitValue(2**62, 3, "ünïcode", 5, -1)),
    GroupMetadataRecord("g", GroupMetadataValue("", 0, None, None, -1, ())),
    GroupMetadataRecord("g", GroupMetadataValue("connect", 2, "default", "a", 7, (
        MEMBER, MemberRecord("a", None, "", "", 1, 2, b"", b"\xff" * 300)))),
])
def test_round_trip(rec: OffsetCommitRecord | GroupMetadataRecord) -> None:
    assert decode_record(*encode_record(rec)) == rec


def _offset_value(version: int) -> bytes:
    data: bytes = schema.OffsetCommitValue(offset=42, leader_epoch=7, metadata="meta", commit_timestamp=1000,
                                           expire_timestamp=2000).encode(version=version, header=True)
    return data


@pytest.mark.parametrize(("version", "leader_epoch", "expire"), [
    (0, -1, -1), (1, -1, 2000), (2, -1, -1), (3, 7, -1), (4, 7, -1),
])
def test_every_offset_commit_value_version_reads(version: int, leader_epoch: int, expire: int) -> None:
    value = _offset_value(version)
    assert value[:2] == version.to_bytes(2, "big")
    assert decode_record(OFFSET_KEY_V1, value) == OffsetCommitRecord(
        "g", "t", 3, OffsetCommitValue(42, leader_epoch, "meta", 1000, expire))


def test_offset_commit_key_v0_reads() -> None:
    key = schema.OffsetCommitKey(group="g", topic="t", partition=3).encode(version=0, header=True)
    assert key == b"\x00\x00" + OFFSET_KEY_V1[2:]
    assert decode_record(key, OFFSET_VALUE_V3) == OffsetCommitRecord("g", "t", 3, OFFSET)


def _group_value(version: int) -> bytes:
    member_cls = schema.GroupMetadataValue.MemberMetadata
    member = member_cls(member_id="m1", group_instance_id="inst", client_id="client", client_host="/h",
                        rebalance_timeout=300_000, session_timeout=45_000, subscription=b"s", assignment=b"a")
    data: bytes = schema.GroupMetadataValue(
        protocol_type="consumer", generation=5, protocol="range", leader="m1", current_state_timestamp=1234,
        members=[member],
    ).encode(version=version, header=True)
    return data


@pytest.mark.parametrize(("version", "instance", "rebalance_ms", "state_ts"), [
    (0, None, 45_000, -1),       # v0: rebalance timeout = session timeout
    (1, None, 300_000, -1),
    (2, None, 300_000, 1234),
    (3, "inst", 300_000, 1234),
    (4, "inst", 300_000, 1234),  # flexible
])
def test_every_group_metadata_value_version_reads(version: int, instance: str | None, rebalance_ms: int,
                                                  state_ts: int) -> None:
    value = _group_value(version)
    assert value[:2] == version.to_bytes(2, "big")
    member = MemberRecord("m1", instance, "client", "/h", rebalance_ms, 45_000, b"s", b"a")
    assert decode_record(GROUP_KEY_V2, value) == GroupMetadataRecord(
        "g", GroupMetadataValue("consumer", 5, "range", "m1", state_ts, (member,)))


@pytest.mark.parametrize("key_version", [9, 15, 17, 24, 100])
def test_unknown_record_types_decode_to_none(key_version: int) -> None:
    key = key_version.to_bytes(2, "big") + b"\x00\x01g"
    assert record_key_version(key) == key_version
    assert decode_record(key, b"\x00\x00whatever") is None


@pytest.mark.parametrize(("key", "value", "match"), [
    (b"", None, "too short"),
    (b"\x00", None, "too short"),
    (OFFSET_KEY_V1[:-1], None, "does not decode"),
    (OFFSET_KEY_V1 + b"\x00", None, "trailing"),
    (GROUP_KEY_V2, GROUP_VALUE_V3[:-3], "does not decode"),
    (GROUP_KEY_V2, GROUP_VALUE_V3 + b"\x00", "trailing"),
    (OFFSET_KEY_V1, b"\x00\x05" + OFFSET_VALUE_V3[2:], "version 5"),
    (OFFSET_KEY_V1, b"\xff\xff" + OFFSET_VALUE_V3[2:], "version -1"),
    (OFFSET_KEY_V1, b"\x00", "too short"),
    # protocolType written as a null string: Kafka cannot read that, neither do we.
    (GROUP_KEY_V2, b"\x00\x03\xff\xff" + GROUP_VALUE_V3[12:], "protocolType is null"),
    (b"\x00\x02\xff\xff", None, "GroupMetadataKey.group is null"),
])
def test_damaged_records_raise(key: bytes, value: bytes | None, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match):
        decode_record(key, value)


def test_encode_refuses_none_in_non_nullable_fields() -> None:
    bad = OffsetCommitValue(1, -1, None, 0, -1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata"):
        encode_record(OffsetCommitRecord("g", "t", 0, bad))


# --- the hand-written offset commit encoding against kafka-python's classes ---

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Any str; some around the int16 limit of 32767 UTF-8 bytes (a repeated 1-4 byte character); a lone
# surrogate, which UTF-8 cannot encode.
TEXT = st.one_of(st.text(max_size=40),
                 st.builds(lambda c, n: c * n, st.characters(codec="utf-8"), st.integers(8_000, 33_000)),
                 st.just("\ud800"))


def kafka_python_key(group: str, topic: str, partition: int) -> bytes:
    out: bytes = schema.OffsetCommitKey(group=group, topic=topic, partition=partition).encode(
        version=schema.OFFSET_COMMIT_KEY_WRITE_VERSION, header=True)
    return out


def kafka_python_value(v: OffsetCommitValue) -> bytes:
    version = schema.OFFSET_COMMIT_VALUE_WRITE_VERSION if v.expire_timestamp_ms == -1 \
        else schema.OFFSET_COMMIT_VALUE_EXPIRE_VERSION
    out: bytes = schema.OffsetCommitValue(
        offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata, commit_timestamp=v.commit_timestamp_ms,
        expire_timestamp=v.expire_timestamp_ms).encode(version=version, header=True)
    return out


def outcome(f, *args):  # type: ignore[no-untyped-def]
    """The bytes, or None when refused: a number out of range (struct.error) or text UTF-8 cannot encode.
    (Which of two bad fields is named first may differ; that both refuse is what matters.)"""
    try:
        return f(*args)
    except (struct.error, UnicodeEncodeError):
        return None


@settings(max_examples=300, deadline=None)
@given(group=TEXT, topic=TEXT, partition=st.one_of(INT32, st.integers(2**31, 2**40)),
       value=st.one_of(st.none(), st.builds(
           OffsetCommitValue, offset=st.one_of(INT64, st.just(2**63)), leader_epoch=st.one_of(INT32, st.just(2**31)),
           metadata=TEXT, commit_timestamp_ms=INT64,
           expire_timestamp_ms=st.one_of(st.just(-1), INT64))))
def test_offset_commit_records_encode_exactly_as_kafka_python(group: str, topic: str, partition: int,
                                                              value: OffsetCommitValue | None) -> None:
    rec = OffsetCommitRecord(group, topic, partition, value)
    key = outcome(kafka_python_key, group, topic, partition)
    expected_value = None if value is None else outcome(kafka_python_value, value)
    ours = outcome(encode_record, rec)
    if key is None or (value is not None and expected_value is None):
        assert ours is None
        return
    assert ours == (key, expected_value)
    if value is not None and value.expire_timestamp_ms != -1:
        value = dataclasses.replace(value, leader_epoch=-1)  # v1 has no leader epoch
    assert decode_record(*ours) == OffsetCommitRecord(group, topic, partition, value)


def kafka_python_group_key(group: str) -> bytes:
    out: bytes = schema.GroupMetadataKey(group=group).encode(version=schema.GROUP_METADATA_KEY_VERSION, header=True)
    return out


def kafka_python_group_value(v: GroupMetadataValue) -> bytes:
    """What the server wrote with kafka-python's classes before the value was encoded by hand."""
    member_cls = schema.GroupMetadataValue.MemberMetadata
    out: bytes = schema.GroupMetadataValue(
        protocol_type=v.protocol_type, generation=v.generation, protocol=v.protocol, leader=v.leader,
        current_state_timestamp=v.current_state_timestamp_ms,
        members=[member_cls(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                            session_timeout=m.session_timeout_ms, subscription=m.subscription,
                            assignment=m.assignment) for m in v.members],
    ).encode(version=schema.GROUP_METADATA_VALUE_WRITE_VERSION, header=True)
    return out


SHORT_TEXT = st.one_of(st.text(max_size=20), st.just("\ud800"))
OPT_TEXT = st.one_of(st.none(), SHORT_TEXT)
MEMBERS = st.lists(st.builds(
    MemberRecord, member_id=SHORT_TEXT, group_instance_id=OPT_TEXT, client_id=SHORT_TEXT, client_host=SHORT_TEXT,
    rebalance_timeout_ms=st.one_of(INT32, st.just(2**31)), session_timeout_ms=INT32,
    subscription=st.binary(max_size=40), assignment=st.binary(max_size=40)), max_size=4)


@settings(max_examples=400, deadline=None)
@given(group=TEXT, value=st.one_of(st.none(), st.builds(
    GroupMetadataValue, protocol_type=SHORT_TEXT, generation=st.one_of(INT32, st.just(-(2**31) - 1)),
    protocol=st.one_of(OPT_TEXT, TEXT), leader=OPT_TEXT, current_state_timestamp_ms=INT64, members=MEMBERS.map(tuple))))
def test_group_metadata_records_encode_exactly_as_kafka_python(group: str, value: GroupMetadataValue | None) -> None:
    rec = GroupMetadataRecord(group, value)
    key = outcome(kafka_python_group_key, group)
    expected_value = None if value is None else outcome(kafka_python_group_value, value)
    ours = outcome(encode_record, rec)
    if key is None or (value is not None and expected_value is None):
        assert ours is None
        return
    assert ours == (key, expected_value)


def test_group_metadata_encode_refuses_none_in_non_nullable_fields() -> None:
    member = MemberRecord("m", None, None, "/h", 1, 1, b"", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="client_id"):
        encode_record(GroupMetadataRecord("g", GroupMetadataValue("consumer", 1, "range", "m", -1, (member,))))
    with pytest.raises(TypeError, match="protocol_type"):
        encode_record(GroupMetadataRecord("g", GroupMetadataValue(None, 1, None, None, -1, ())))  # type: ignore[arg-type]


# --- the one decoder: every record type, and its fast paths against kafka-python's classes ---

NAMES = st.one_of(st.text(max_size=12), st.sampled_from(["", "g", "é", "😀"]))
NULLABLE_NAMES = st.one_of(st.none(), NAMES)
INT16 = st.integers(-(2**15), 2**15 - 1)


@st.composite
def kafka_python_records(draw: st.DrawFn, key_versions: list[int] | None = None,
                         tombstones: bool = True) -> tuple[bytes, bytes | None, object]:
    """(key, value, expected decoded record): a record of a type Kafka defines, every key and value version,
    encoded with kafka-python's classes (or, for the types this server only passes through, a key as Kafka
    writes them: the version, then the group id string)."""
    key_version = draw(st.sampled_from(key_versions or sorted(codec.RECORD_TYPES)))
    tombstone = tombstones and draw(st.booleans())
    if key_version in schema.OFFSET_COMMIT_KEY_VERSIONS:
        group, topic, partition = draw(NAMES), draw(NAMES), draw(INT32)
        key = schema.OffsetCommitKey(group=group, topic=topic, partition=partition).encode(
            version=key_version, header=True)
        if tombstone:
            return key, None, OffsetCommitRecord(group, topic, partition, None)
        version = draw(st.integers(0, 4))
        offset, epoch, metadata, commit, expire = draw(INT64), draw(INT32), draw(NAMES), draw(INT64), draw(INT64)
        value = schema.OffsetCommitValue(offset=offset, leader_epoch=epoch, metadata=metadata,
                                         commit_timestamp=commit, expire_timestamp=expire).encode(
            version=version, header=True)
        return key, value, OffsetCommitRecord(group, topic, partition, OffsetCommitValue(
            offset, epoch if version >= 3 else -1, metadata, commit, expire if version == 1 else -1))
    if key_version == schema.GROUP_METADATA_KEY_VERSION:
        group = draw(NAMES)
        key = schema.GroupMetadataKey(group=group).encode(version=key_version, header=True)
        if tombstone:
            return key, None, GroupMetadataRecord(group, None)
        version = draw(st.integers(0, 4))
        members = draw(st.lists(st.tuples(NAMES, NULLABLE_NAMES, NAMES, NAMES, INT32, INT32,
                                          st.binary(max_size=20), st.binary(max_size=20)), max_size=3))
        protocol_type, generation, protocol, leader, ts = (draw(NAMES), draw(INT32), draw(NULLABLE_NAMES),
                                                           draw(NULLABLE_NAMES), draw(INT64))
        member_cls = schema.GroupMetadataValue.MemberMetadata
        value = schema.GroupMetadataValue(
            protocol_type=protocol_type, generation=generation, protocol=protocol, leader=leader,
            current_state_timestamp=ts, members=[member_cls(
                member_id=m[0], group_instance_id=m[1], client_id=m[2], client_host=m[3], rebalance_timeout=m[4],
                session_timeout=m[5], subscription=m[6], assignment=m[7]) for m in members],
        ).encode(version=version, header=True)
        expected = GroupMetadataValue(protocol_type, generation, protocol, leader, ts if version >= 2 else -1, tuple(
            MemberRecord(m[0], m[1] if version >= 3 else None, m[2], m[3], m[4] if version >= 1 else m[5], m[5],
                         m[6], m[7]) for m in members))
        return key, value, GroupMetadataRecord(group, expected)
    if key_version in schema.CONSUMER_GROUP_SCHEMAS:
        return draw(consumer_group_records(key_version, tombstone))
    key = key_version.to_bytes(2, "big") + schema.GroupMetadataKey(group=draw(NAMES)).encode(
        version=2, header=True)[2:]
    value = None if tombstone else draw(st.binary(max_size=20))
    return key, value, codec.OtherRecord(key_version, codec.RECORD_TYPES[key_version])


UUIDS = st.uuids()
PARTITION_SETS = st.frozensets(st.integers(0, 2**31 - 1), min_size=1, max_size=4)
ASSIGNMENTS = st.dictionaries(UUIDS, PARTITION_SETS, max_size=3)


@st.composite
def consumer_group_records(draw: st.DrawFn, key_version: int, tombstone: bool) -> tuple[bytes, bytes | None, object]:
    """A KIP-848 record written with kafka-python's classes from Kafka's specs, and what it decodes to."""
    key_cls, value_cls = schema.CONSUMER_GROUP_SCHEMAS[key_version]
    group, member, regex = draw(NAMES), draw(NAMES), draw(NAMES)
    key_fields: dict[str, object] = {"group_id": group}
    if key_version in (5, 7, 8):
        key_fields["member_id"] = member
    if key_version == 16:
        key_fields["regular_expression"] = regex
    key = key_cls(**key_fields).encode(version=key_version, header=True)
    value_fields: dict[str, object]
    if key_version == 3:
        epoch = draw(INT32)
        value_fields, expected = {"epoch": epoch}, cg.ConsumerGroupMetadataRecord(group, epoch)
        tomb = cg.ConsumerGroupMetadataRecord(group, None)
    elif key_version == 4:
        topics = draw(st.lists(st.tuples(UUIDS, NAMES, INT32), max_size=3))
        value_fields = {"topics": [value_cls.TopicMetadata(topic_id=t, topic_name=n, num_partitions=c,
                                                           partition_metadata=[]) for t, n, c in topics]}
        expected = cg.ConsumerGroupPartitionMetadataRecord(group, tuple(cg.TopicMetadata(*t) for t in topics))
        tomb = cg.ConsumerGroupPartitionMetadataRecord(group, None)
    elif key_version == 5:
        fields = (draw(NULLABLE_NAMES), draw(NULLABLE_NAMES), draw(NAMES), draw(NAMES),
                  tuple(draw(st.lists(NAMES, max_size=3))), draw(NULLABLE_NAMES), draw(INT32), draw(NULLABLE_NAMES))
        classic = draw(st.one_of(st.none(), st.tuples(INT32, st.lists(st.tuples(NAMES, st.binary(max_size=8)), max_size=2))))
        c_cls = value_cls.ClassicMemberMetadata
        value_fields = dict(zip(("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
                                 "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor"), fields, strict=True))
        value_fields["subscribed_topic_names"] = list(fields[4])
        value_fields["classic_member_metadata"] = None if classic is None else c_cls(
            session_timeout_ms=classic[0],
            supported_protocols=[c_cls.ClassicProtocol(name=n, metadata=m) for n, m in classic[1]])
        expected = cg.ConsumerGroupMemberMetadataRecord(group, member, cg.MemberMetadataValue(
            *fields, None if classic is None else cg.ClassicMemberMetadata(
                classic[0], tuple(cg.ClassicProtocol(n, m) for n, m in classic[1]))))
        tomb = cg.ConsumerGroupMemberMetadataRecord(group, member, None)
    elif key_version == 6:
        epoch = draw(INT32)
        value_fields = {"assignment_epoch": epoch}
        expected = cg.ConsumerGroupTargetAssignmentMetadataRecord(group, epoch)
        tomb = cg.ConsumerGroupTargetAssignmentMetadataRecord(group, None)
    elif key_version == 7:
        assignment = draw(ASSIGNMENTS)
        value_fields = {"topic_partitions": [value_cls.TopicPartition(topic_id=t, partitions=sorted(p))
                                             for t, p in assignment.items()]}
        expected = cg.ConsumerGroupTargetAssignmentMemberRecord(group, member, assignment)
        tomb = cg.ConsumerGroupTargetAssignmentMemberRecord(group, member, None)
    elif key_version == 8:
        epoch, previous, state = draw(INT32), draw(INT32), draw(st.integers(-128, 127))
        assigned, revoking = draw(ASSIGNMENTS), draw(ASSIGNMENTS)
        tp = value_cls.TopicPartitions
        value_fields = {"member_epoch": epoch, "previous_member_epoch": previous, "state": state,
                        "assigned_partitions": [tp(topic_id=t, partitions=sorted(p)) for t, p in assigned.items()],
                        "partitions_pending_revocation": [tp(topic_id=t, partitions=sorted(p))
                                                          for t, p in revoking.items()]}
        expected = cg.ConsumerGroupCurrentMemberAssignmentRecord(group, member, cg.CurrentAssignmentValue(
            epoch, previous, state, assigned, revoking))
        tomb = cg.ConsumerGroupCurrentMemberAssignmentRecord(group, member, None)
    else:
        topics, version, ts = draw(st.frozensets(NAMES, max_size=3)), draw(INT64), draw(INT64)
        value_fields = {"topics": sorted(topics), "metadata_version": version, "timestamp": ts}
        expected = cg.ConsumerGroupRegularExpressionRecord(group, regex, cg.ResolvedRegex(topics, version, ts))
        tomb = cg.ConsumerGroupRegularExpressionRecord(group, regex, None)
    if tombstone:
        return key, None, tomb
    return key, value_cls(**value_fields).encode(version=0, header=True), expected


@settings(max_examples=800, deadline=None)
@given(kafka_python_records())
def test_every_record_type_decodes_as_kafka_python_wrote_it(record: tuple[bytes, bytes | None, object]) -> None:
    key, value, expected = record
    assert codec.decode(key, value) == expected
    # The same through the slow (generic) path; and what our writer makes of it reads back the same.
    slow = codec.slow_decode_key(key)
    if isinstance(expected, codec.OtherRecord):
        assert slow == expected
        assert decode_record(key, value) is None
        return
    assert slow == codec.decode_key(key)
    assert isinstance(expected, (OffsetCommitRecord, GroupMetadataRecord, *cg.CONSUMER_GROUP_RECORD_TYPES))
    if isinstance(expected, OffsetCommitRecord) and expected.value is not None:
        assert codec.slow_decode_offset_value(value) == expected.value  # type: ignore[arg-type]
    if isinstance(expected, GroupMetadataRecord) and expected.value is not None:
        assert codec.slow_decode_group_value(value) == expected.value  # type: ignore[arg-type]
    try:
        ours = encode_record(expected)
    except (struct.error, UnicodeEncodeError):  # a value our writer refuses (e.g. a lone surrogate)
        return
    assert codec.decode(*ours) == expected


@pytest.mark.parametrize("key_version", [25, 100, 32767, -1, -32768])
def test_key_versions_no_table_names_are_other_records_without_a_name(key_version: int) -> None:
    key = key_version.to_bytes(2, "big", signed=True) + b"\x00\x01g"
    assert codec.decode(key, b"\x00\x00whatever") == codec.OtherRecord(key_version, None)


def test_record_types_name_every_key_version_kafka_defines() -> None:
    assert sorted(codec.RECORD_TYPES) == list(range(25))
    assert codec.RECORD_TYPES[3] == "ConsumerGroupMetadata"
    assert codec.RECORD_TYPES[16] == "ConsumerGroupRegularExpression"


@st.composite
def group_values(draw: st.DrawFn) -> bytes:
    _key, value, _expected = draw(kafka_python_records([schema.GROUP_METADATA_KEY_VERSION], tombstones=False))
    assert value is not None
    return draw(mutations(value)) if draw(st.integers(0, 5)) else draw(st.binary(max_size=60))


@settings(max_examples=1500, deadline=None)
@given(group_values())
def test_group_value_fast_path_agrees_with_kafka_python(value: bytes) -> None:
    assert outcome_of(codec.decode_group_value, value) == outcome_of(codec.slow_decode_group_value, value)


def test_decode_or_error_returns_what_decode_would_raise() -> None:
    no_key = codec.decode_or_error(None, OFFSET_VALUE_V3)
    assert isinstance(no_key, RecordDecodeError) and str(no_key) == "record without a key"
    damaged = codec.decode_or_error(OFFSET_KEY_V1, b"\x00\x05" + OFFSET_VALUE_V3[2:])
    assert isinstance(damaged, RecordDecodeError) and "version 5" in str(damaged)
    assert codec.decode_or_error(bytearray(OFFSET_KEY_V1), OFFSET_VALUE_V3) == OffsetCommitRecord("g", "t", 3, OFFSET)
    assert codec.decode_or_error(b"\x00\x09\x00\x01g", None) == codec.OtherRecord(9, "ShareGroupPartitionMetadata")
    assert codec.decode_or_error(b"\x00\x03\x00\x01g", None) == cg.ConsumerGroupMetadataRecord("g", None)
