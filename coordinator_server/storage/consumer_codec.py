"""KIP-848 consumer group records <-> Kafka's `__consumer_offsets` bytes (record types 3-8 and 16).

Keys are the non-flexible `ConsumerGroup*Key` structs behind their int16 version (which is the record
type); values are version 0 of the flexible `ConsumerGroup*Value` structs, behind an int16 0. All of it
goes through kafka-python's classes generated from Kafka's specs (`protocol/coordinator_records.py`):
these records are written per member and per epoch, not per committed offset, so the generic encoder's
cost does not matter as it does for offset commits (`codec.py` encodes those by hand).

Reading is as strict as `codec.py`'s slow path: a version the spec does not know, a short read or
trailing bytes raise RecordDecodeError. Tagged fields of later Kafkas (metadata hash, assignment epochs)
are read and dropped; unknown tags are skipped by kafka-python.
"""
from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from typing import Any

from coordinator_server.group.consumer.records import (
    Assignment,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    CurrentAssignmentValue,
    MemberMetadataValue,
    ResolvedRegex,
    TopicMetadata,
)
from coordinator_server.storage.schema_decode import decode_exact, required
from protocol.coordinator_records import CONSUMER_GROUP_SCHEMAS, CONSUMER_GROUP_VALUE_VERSION

CONSUMER_GROUP_KEY_VERSIONS = frozenset(CONSUMER_GROUP_SCHEMAS)
_TYPE_OF: dict[type, int] = {
    ConsumerGroupMetadataRecord: 3,
    ConsumerGroupPartitionMetadataRecord: 4,
    ConsumerGroupMemberMetadataRecord: 5,
    ConsumerGroupTargetAssignmentMetadataRecord: 6,
    ConsumerGroupTargetAssignmentMemberRecord: 7,
    ConsumerGroupCurrentMemberAssignmentRecord: 8,
    ConsumerGroupRegularExpressionRecord: 16,
}
_INT16 = struct.Struct(">h")
_KEY_HEAD = struct.Struct(">hh")  # key version, group id length
_KEYS_WITH_TWO_STRINGS = frozenset({5, 7, 8, 16})  # group id, then member id or regular expression


# -- writing ------------------------------------------------------------------------------------------

def encode_consumer_record(rec: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    record_type = _TYPE_OF[type(rec)]
    key_cls, value_cls = CONSUMER_GROUP_SCHEMAS[record_type]
    key_fields: dict[str, Any] = {"group_id": _str(rec.group_id)}
    if isinstance(rec, (ConsumerGroupMemberMetadataRecord, ConsumerGroupTargetAssignmentMemberRecord,
                        ConsumerGroupCurrentMemberAssignmentRecord)):
        key_fields["member_id"] = _str(rec.member_id)
    elif isinstance(rec, ConsumerGroupRegularExpressionRecord):
        key_fields["regular_expression"] = _str(rec.regex)
    key: bytes = key_cls(**key_fields).encode(version=record_type, header=True)
    fields = _value_fields(rec, value_cls)
    if fields is None:
        return key, None
    value: bytes = value_cls(**fields).encode(version=CONSUMER_GROUP_VALUE_VERSION, header=True)
    return key, value


def _value_fields(rec: ConsumerGroupRecord, cls: Any) -> dict[str, Any] | None:
    if isinstance(rec, ConsumerGroupMetadataRecord):
        return None if rec.epoch is None else {"epoch": rec.epoch}
    if isinstance(rec, ConsumerGroupTargetAssignmentMetadataRecord):
        return None if rec.assignment_epoch is None else {"assignment_epoch": rec.assignment_epoch}
    if isinstance(rec, ConsumerGroupPartitionMetadataRecord):
        if rec.topics is None:
            return None
        return {"topics": [cls.TopicMetadata(topic_id=t.topic_id, topic_name=_str(t.name), num_partitions=t.num_partitions,
                                             partition_metadata=[]) for t in rec.topics]}
    if isinstance(rec, ConsumerGroupMemberMetadataRecord):
        return None if rec.value is None else _member_fields(rec.value, cls)
    if isinstance(rec, ConsumerGroupTargetAssignmentMemberRecord):
        if rec.partitions is None:
            return None
        return {"topic_partitions": _topic_partitions(cls.TopicPartition, rec.partitions)}
    if isinstance(rec, ConsumerGroupCurrentMemberAssignmentRecord):
        if rec.value is None:
            return None
        v = rec.value
        return {"member_epoch": v.member_epoch, "previous_member_epoch": v.previous_member_epoch, "state": v.state,
                "assigned_partitions": _topic_partitions(cls.TopicPartitions, v.assigned_partitions),
                "partitions_pending_revocation": _topic_partitions(cls.TopicPartitions, v.partitions_pending_revocation)}
    if isinstance(rec, ConsumerGroupRegularExpressionRecord):
        if rec.value is None:
            return None
        return {"topics": sorted(rec.value.topics), "metadata_version": rec.value.version, "timestamp": rec.value.timestamp_ms}
    raise TypeError(f"not a consumer group record: {rec!r}")


def _member_fields(v: MemberMetadataValue, cls: Any) -> dict[str, Any]:
    classic = None
    if v.classic_member_metadata is not None:
        classic_cls = cls.ClassicMemberMetadata
        classic = classic_cls(
            session_timeout_ms=v.classic_member_metadata.session_timeout_ms,
            supported_protocols=[classic_cls.ClassicProtocol(name=_str(p.name), metadata=bytes(p.metadata))
                                 for p in v.classic_member_metadata.supported_protocols])
    return {"instance_id": v.instance_id, "rack_id": v.rack_id, "client_id": _str(v.client_id),
            "client_host": _str(v.client_host), "subscribed_topic_names": [_str(n) for n in v.subscribed_topic_names],
            "subscribed_topic_regex": v.subscribed_topic_regex, "rebalance_timeout_ms": v.rebalance_timeout_ms,
            "server_assignor": v.server_assignor, "classic_member_metadata": classic}


def _topic_partitions(cls: Any, assignment: Assignment) -> list[Any]:
    return [cls(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(assignment.items(), key=lambda kv: kv[0].bytes)]


def _str(value: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a string field must be a str, got {type(value).__name__}")
    return value


# -- reading ------------------------------------------------------------------------------------------

def consumer_key_group(key: bytes) -> str | None:
    """The group id of a well-formed consumer group key, read by hand (the replay's cheap look at a
    key); None when the bytes are not exactly the key's layout — then the generic decoder decides."""
    try:
        version, glen = _KEY_HEAD.unpack_from(key)
        end = 4 + glen
        if glen < 0:
            return None
        if version in _KEYS_WITH_TWO_STRINGS:
            second = _INT16.unpack_from(key, end)[0]
            if second < 0 or len(key) != end + 2 + second:
                return None
            key[end + 2:].decode()
        elif len(key) != end:
            return None
        return key[4:end].decode()
    except (struct.error, UnicodeDecodeError):
        return None


def decode_consumer_record(key_version: int, key: bytes, value: bytes | None) -> ConsumerGroupRecord:
    key_cls, value_cls = CONSUMER_GROUP_SCHEMAS[key_version]
    k = _decode(key_cls, key, key_version)
    group_id = _required(k.group_id, f"{key_cls.name}.GroupId")
    v = None if value is None else _decode(value_cls, value, CONSUMER_GROUP_VALUE_VERSION)
    if key_version == 3:
        return ConsumerGroupMetadataRecord(group_id, None if v is None else v.epoch)
    if key_version == 4:
        return ConsumerGroupPartitionMetadataRecord(group_id, None if v is None else tuple(
            TopicMetadata(t.topic_id, _required(t.topic_name, "TopicMetadata.TopicName"), t.num_partitions)
            for t in v.topics))
    if key_version == 6:
        return ConsumerGroupTargetAssignmentMetadataRecord(group_id, None if v is None else v.assignment_epoch)
    if key_version == 16:
        regex = _required(k.regular_expression, "ConsumerGroupRegularExpressionKey.RegularExpression")
        return ConsumerGroupRegularExpressionRecord(group_id, regex, None if v is None else ResolvedRegex(
            frozenset(v.topics), v.metadata_version, v.timestamp))
    member_id = _required(k.member_id, f"{key_cls.name}.MemberId")
    if key_version == 5:
        return ConsumerGroupMemberMetadataRecord(group_id, member_id, None if v is None else _member_value(v))
    if key_version == 7:
        return ConsumerGroupTargetAssignmentMemberRecord(group_id, member_id,
                                                         None if v is None else _assignment(v.topic_partitions))
    return ConsumerGroupCurrentMemberAssignmentRecord(group_id, member_id, None if v is None else CurrentAssignmentValue(
        v.member_epoch, v.previous_member_epoch, v.state, _assignment(v.assigned_partitions),
        _assignment(v.partitions_pending_revocation)))


def _member_value(v: Any) -> MemberMetadataValue:
    classic = None
    if v.classic_member_metadata is not None:
        c = v.classic_member_metadata
        classic = ClassicMemberMetadata(c.session_timeout_ms, tuple(
            ClassicProtocol(_required(p.name, "ClassicProtocol.Name"), bytes(_required(p.metadata, "ClassicProtocol.Metadata")))
            for p in c.supported_protocols))
    return MemberMetadataValue(
        v.instance_id, v.rack_id, _required(v.client_id, "ConsumerGroupMemberMetadataValue.ClientId"),
        _required(v.client_host, "ConsumerGroupMemberMetadataValue.ClientHost"),
        tuple(_required(v.subscribed_topic_names, "ConsumerGroupMemberMetadataValue.SubscribedTopicNames")),
        v.subscribed_topic_regex, v.rebalance_timeout_ms, v.server_assignor, classic)


def _assignment(topic_partitions: Iterable[Any]) -> Assignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in topic_partitions:
        partitions = frozenset(tp.partitions)
        if partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | partitions
    return out


def _decode(cls: Any, data: bytes, version: int) -> Any:
    """`data` (int16 version + struct) decoded exactly at the one version Kafka writes (schema_decode)."""
    return decode_exact(cls, data, version, version)


_required = required
