"""KIP-848's online migration between the two group protocols, as Kafka 4.x does it (its
ConsumerGroup.fromClassicGroup, ClassicGroup.fromConsumerGroup and the validations in front of them).

- Upgrade: a consumer-protocol member joins a classic group that has members. If the policy allows it,
  the group speaks the embedded consumer protocol and fits in a consumer group, the classic group becomes
  a consumer group at epoch = its generation: each member keeps its last assignment as its target and
  current assignment (Stable), remembers its session timeout and protocols (ClassicMemberMetadata), and
  goes on speaking JoinGroup/SyncGroup/Heartbeat inside the consumer group.
- Downgrade: the last consumer-protocol member of a group leaves (or is fenced) and only classic members
  remain. If the policy allows it, the consumer group becomes a classic group at generation = its group
  epoch, each member's target assignment written as its classic assignment, and a rebalance starts so the
  members rejoin as a classic group.

Pure: both directions only build groups and records; the façade (`coordinator.py`) swaps the groups.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    MalformedConsumerProtocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)

from .consumer.group import ConsumerGroup
from .consumer.member import ConsumerGroupMember, MemberState
from .consumer.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    CurrentAssignmentValue,
    MemberMetadataValue,
)
from .group import GroupMetadata
from .member import MemberMetadata
from .state import STABLE

_UPGRADE = ("bidirectional", "upgrade")
_DOWNGRADE = ("bidirectional", "downgrade")

TopicIdOf = Callable[[str], uuid.UUID | None]
TopicNameOf = Callable[[uuid.UUID], str | None]

__all__ = [
    "MalformedConsumerProtocol",
    "classic_group_from_consumer",
    "consumer_group_records",
    "downgrade_refusal",
    "upgrade_refusal",
]


def upgrade_refusal(group: GroupMetadata, policy: str, consumer_max_size: int) -> str | None:
    """Why the classic group cannot become a consumer group now (Kafka's validateOnlineUpgrade), or None."""
    if policy not in _UPGRADE:
        return "the online upgrade is disabled"
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return "the group does not use the consumer embedded protocol"
    if group.size() > consumer_max_size:
        return "the group size exceeds the consumer group maximum size"
    return None


def downgrade_refusal(remaining: Iterable[ConsumerGroupMember], policy: str, classic_max_size: int) -> str | None:
    """Why the consumer group, left with `remaining`, does not become a classic group (Kafka's
    validateOnlineDowngradeWithFencedMembers), or None. Not an error: the group stays a consumer group."""
    members = list(remaining)
    if not members:
        return "it is empty"
    if not all(m.uses_classic_protocol for m in members):
        return "members using the consumer protocol remain"
    if policy not in _DOWNGRADE:
        return "the online downgrade is disabled"
    if len(members) > classic_max_size:
        return "its group size is greater than the classic group max size"
    return None


def consumer_group_records(group: GroupMetadata, topic_id_of: TopicIdOf) -> list[ConsumerGroupRecord]:
    """The records that create the consumer group a classic group becomes, in Kafka's order
    (createConsumerGroupRecords). Raises MalformedConsumerProtocol if a member's bytes do not decode."""
    g, epoch = group.group_id, group.generation_id
    protocol = group.protocol_name or ""
    metadata: list[ConsumerGroupRecord] = []
    targets: list[ConsumerGroupRecord] = []
    currents: list[ConsumerGroupRecord] = []
    for m in group.members.values():
        # A member that joined but never synced has no assignment yet: that is an empty one.
        by_name = decode_assignment(m.assignment) if m.assignment else {}
        assigned = {}
        for topic, partitions in by_name.items():
            topic_id = topic_id_of(topic)
            if topic_id is not None:
                assigned[topic_id] = frozenset(partitions)
        subscription = decode_subscription(m.metadata(protocol))
        classic = ClassicMemberMetadata(m.session_timeout_ms,
                                        tuple(ClassicProtocol(name, data) for name, data in m.supported_protocols))
        value = MemberMetadataValue(m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
                                    tuple(sorted(set(subscription.topics))), None, m.rebalance_timeout_ms, None,
                                    classic)
        metadata.append(ConsumerGroupMemberMetadataRecord(g, m.member_id, value))
        targets.append(ConsumerGroupTargetAssignmentMemberRecord(g, m.member_id, assigned))
        currents.append(ConsumerGroupCurrentMemberAssignmentRecord(
            g, m.member_id, CurrentAssignmentValue(epoch, epoch, int(MemberState.STABLE), assigned, {})))
    return [*metadata, ConsumerGroupMetadataRecord(g, epoch), *targets,
            ConsumerGroupTargetAssignmentMetadataRecord(g, epoch), *currents]


def classic_group_from_consumer(group: ConsumerGroup, remaining: Iterable[ConsumerGroupMember],
                                topic_name_of: TopicNameOf, wall_ms: int) -> GroupMetadata:
    """The classic group a consumer group becomes (ClassicGroup.fromConsumerGroup): Stable at generation =
    the group epoch, each member's target assignment as its assignment, in the subscription's version."""
    classic = GroupMetadata(group.group_id, wall_ms)
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    classic.generation_id = group.group_epoch
    members = list(remaining)
    for m in members:
        meta = m.classic_member_metadata
        assert meta is not None, "only classic members remain in a downgraded group"
        classic.add(MemberMetadata(
            m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, meta.session_timeout_ms,
            CONSUMER_PROTOCOL_TYPE, tuple((p.name, p.metadata) for p in meta.supported_protocols)))
    protocol = classic.select_protocol()
    classic.protocol_name = protocol
    for m in members:
        member = classic.get(m.member_id)
        by_name: dict[str, tuple[int, ...]] = {}
        for topic_id, partitions in group.member_target(m.member_id).items():
            name = topic_name_of(topic_id)
            if name is not None:
                by_name[name] = tuple(sorted(partitions))
        member.assignment = encode_assignment(by_name, decode_subscription(member.metadata(protocol)).version)
    # Straight into Stable, as a loaded group: there is no transition from Empty to Stable.
    classic.state = STABLE
    classic.previous_state = STABLE
    classic.update_subscribed_topics()
    return classic
