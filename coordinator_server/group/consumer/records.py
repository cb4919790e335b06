"""The consumer group records of `__consumer_offsets` (KIP-848), as plain values.

Kafka keeps a consumer group as several record types, each a key with the whole current value (a value
of None is a tombstone); the group is whatever replaying them in order gives. The core builds these,
`storage.codec` turns them into Kafka's bytes, and the loader applies them back (`group.py`).

Record type (key version) in Kafka's CoordinatorRecordType: 3 ConsumerGroupMetadata, 4
ConsumerGroupPartitionMetadata, 5 ConsumerGroupMemberMetadata, 6 ConsumerGroupTargetAssignmentMetadata,
7 ConsumerGroupTargetAssignmentMember, 8 ConsumerGroupCurrentMemberAssignment, 16
ConsumerGroupRegularExpression.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

# topic id -> partitions: an assignment, as Kafka's Map<Uuid, Set<Integer>>.
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the group last saw it (ConsumerGroupPartitionMetadataValue.TopicMetadata)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Present for a member that speaks the classic protocol inside a consumer group (KIP-848 migration)."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's byte
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """ConsumerGroupRegularExpressionValue: the topics a regex matched, at which metadata version, when."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataRecord:
    group_id: str
    epoch: int | None  # None: tombstone


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataRecord:
    group_id: str
    topics: tuple[TopicMetadata, ...] | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataRecord:
    group_id: str
    member_id: str
    value: MemberMetadataValue | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataRecord:
    group_id: str
    assignment_epoch: int | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberRecord:
    group_id: str
    member_id: str
    partitions: Assignment | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentRecord:
    group_id: str
    member_id: str
    value: CurrentAssignmentValue | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionRecord:
    group_id: str
    regex: str
    value: ResolvedRegex | None


ConsumerGroupRecord = (
    ConsumerGroupMetadataRecord
    | ConsumerGroupPartitionMetadataRecord
    | ConsumerGroupMemberMetadataRecord
    | ConsumerGroupTargetAssignmentMetadataRecord
    | ConsumerGroupTargetAssignmentMemberRecord
    | ConsumerGroupCurrentMemberAssignmentRecord
    | ConsumerGroupRegularExpressionRecord
)
CONSUMER_GROUP_RECORD_TYPES = (
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupRegularExpressionRecord,
)


def assignment_partitions(assignment: Assignment) -> int:
    return sum(len(p) for p in assignment.values())


def assignment_str(assignment: Assignment, names: Mapping[uuid.UUID, str] | None = None) -> str:
    """For log lines: `orders-0,1,2; payments-3`, by topic name when known."""
    parts = []
    for topic_id in sorted(assignment, key=lambda t: (names or {}).get(t, str(t))):
        name = (names or {}).get(topic_id, str(topic_id))
        parts.append(f"{name}-{','.join(map(str, sorted(assignment[topic_id])))}")
    return "; ".join(parts)
