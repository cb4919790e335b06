"""What operators see of consumer groups and how one is deleted: ConsumerGroupDescribe, ListGroups'
entries, and the tombstones that remove a group (Kafka's ConsumerGroup.asDescribedGroup,
asListedGroup and createGroupTombstoneRecords)."""
from __future__ import annotations

import uuid
from collections.abc import Callable

from protocol.consumer_group_messages import MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER
from protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from protocol.errors import Errors

from ..api import ListedGroup
from .api import ConsumerGroupDescription, DescribedMember, DescribedTopicPartitions
from .group import GROUP_TYPE_CONSUMER, ConsumerGroup
from .member import ConsumerGroupMember
from .records import (
    Assignment,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
)

TopicName = Callable[[uuid.UUID], str | None]


def describe(group: ConsumerGroup, default_assignor: str, topic_name: TopicName) -> ConsumerGroupDescription:
    return ConsumerGroupDescription(
        group.group_id, Errors.NONE, None, str(group.state), group.group_epoch, group.assignment_epoch,
        group.preferred_server_assignor() or default_assignor,
        tuple(_member(m, group.member_target(m.member_id), topic_name) for m in group.members.values()),
    )


def _member(member: ConsumerGroupMember, target: Assignment, topic_name: TopicName) -> DescribedMember:
    return DescribedMember(
        member.member_id, member.instance_id, member.rack_id, member.member_epoch, member.client_id,
        member.client_host, tuple(sorted(member.subscribed_topic_names)), member.subscribed_topic_regex,
        _topic_partitions(member.assigned_partitions, topic_name), _topic_partitions(target, topic_name),
        MEMBER_TYPE_CLASSIC if member.uses_classic_protocol else MEMBER_TYPE_CONSUMER,
    )


def _topic_partitions(assignment: Assignment, topic_name: TopicName) -> tuple[DescribedTopicPartitions, ...]:
    out = []
    for topic_id, partitions in assignment.items():
        out.append(DescribedTopicPartitions(topic_id, topic_name(topic_id) or "", tuple(sorted(partitions))))
    return tuple(sorted(out, key=lambda t: (t.topic_name, str(t.topic_id))))


def not_found(group_id: str, message: str) -> ConsumerGroupDescription:
    return ConsumerGroupDescription(group_id, Errors.GROUP_ID_NOT_FOUND, message)


def listed(group: ConsumerGroup) -> ListedGroup:
    return ListedGroup(group.group_id, CONSUMER_PROTOCOL_TYPE, str(group.state), GROUP_TYPE_CONSUMER)


def group_tombstones(group: ConsumerGroup) -> list[ConsumerGroupRecord]:
    """Every record that deletes the group, in Kafka's order."""
    g = group.group_id
    records: list[ConsumerGroupRecord] = []
    records.extend(ConsumerGroupCurrentMemberAssignmentRecord(g, m, None) for m in group.members)
    records.extend(ConsumerGroupTargetAssignmentMemberRecord(g, m, None) for m in group.members)
    records.append(ConsumerGroupTargetAssignmentMetadataRecord(g, None))
    records.extend(ConsumerGroupMemberMetadataRecord(g, m, None) for m in group.members)
    records.extend(ConsumerGroupRegularExpressionRecord(g, r, None) for r in group.resolved_regexes)
    records.append(ConsumerGroupPartitionMetadataRecord(g, None))
    records.append(ConsumerGroupMetadataRecord(g, None))
    return records
