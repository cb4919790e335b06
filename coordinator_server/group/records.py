"""The hard state of a group as records of `__consumer_offsets`.

Plain values: the core makes them, `storage.codec` turns them into Kafka's key/value bytes and back, and
recovery hands them back to the core to apply. A value of None is a tombstone.
"""
from __future__ import annotations

from dataclasses import dataclass

from .consumer.records import ConsumerGroupRecord


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # metadata of the selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int  # -1 = unknown
    members: tuple[MemberRecord, ...]


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """GroupMetadataKey(group) -> GroupMetadataValue, or a tombstone when value is None."""

    group_id: str
    value: GroupMetadataValue | None


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1 = none
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int  # -1 = none (written as v3); otherwise written as v1


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """OffsetCommitKey(group, topic, partition) -> OffsetCommitValue, or a tombstone when value is None."""

    group_id: str
    topic: str
    partition: int
    value: OffsetCommitValue | None


ClassicRecord = GroupMetadataRecord | OffsetCommitRecord
# Every record of `__consumer_offsets` the core writes: the classic ones and KIP-848's consumer group ones.
CoordinatorRecord = GroupMetadataRecord | OffsetCommitRecord | ConsumerGroupRecord
