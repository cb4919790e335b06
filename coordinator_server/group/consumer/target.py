"""The target assignment of a new group epoch (Kafka's TargetAssignmentBuilder).

The assignor sees every member with its subscription (names and resolved regex, as topic ids) and its
previous target; the result is written as one ConsumerGroupTargetAssignmentMember record per member whose
target changed, then the ConsumerGroupTargetAssignmentMetadata record with the new epoch.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

from .assignors import ASSIGNORS, MemberSpec
from .member import ConsumerGroupMember
from .records import (
    Assignment,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    ResolvedRegex,
    TopicMetadata,
)


def subscribed_topics(member: ConsumerGroupMember, regexes: Mapping[str, ResolvedRegex]) -> frozenset[str]:
    """A member's topics by name and through its resolved regex (an unresolved one matches nothing)."""
    if member.subscribed_topic_regex:
        resolved = regexes.get(member.subscribed_topic_regex)
        if resolved is not None:
            return member.subscribed_topic_names | resolved.topics
    return member.subscribed_topic_names


def subscribed_topic_ids(member: ConsumerGroupMember, regexes: Mapping[str, ResolvedRegex],
                         metadata: Mapping[str, TopicMetadata]) -> frozenset[uuid.UUID]:
    return frozenset(metadata[name].topic_id for name in subscribed_topics(member, regexes) if name in metadata)


def build_target_assignment(
    group_id: str,
    epoch: int,
    assignor_name: str,
    members: Mapping[str, ConsumerGroupMember],
    previous: Mapping[str, Assignment],
    regexes: Mapping[str, ResolvedRegex],
    metadata: Mapping[str, TopicMetadata],
) -> tuple[dict[str, Assignment], list[ConsumerGroupRecord]]:
    """The new target of every member and the records that write it."""
    # Members mostly share one subscription: its topic ids are resolved once, and the same frozenset
    # object lets the assignor see the group is homogeneous without hashing a set per member.
    resolved: dict[tuple[frozenset[str], str | None], frozenset[uuid.UUID]] = {}
    specs = {}
    empty: Assignment = {}
    for member_id, member in members.items():
        key = (member.subscribed_topic_names, member.subscribed_topic_regex)
        topic_ids = resolved.get(key)
        if topic_ids is None:
            topic_ids = resolved[key] = subscribed_topic_ids(member, regexes, metadata)
        specs[member_id] = MemberSpec(topic_ids, previous.get(member_id, empty), member.instance_id, member.rack_id)
    topics = {t.topic_id: t for t in metadata.values()}
    target = ASSIGNORS[assignor_name](specs, topics)
    records: list[ConsumerGroupRecord] = []
    for member_id in members:
        assignment = target.get(member_id, empty)
        if assignment is previous.get(member_id) and assignment:
            continue  # the assignor handed the previous target back whole: no record
        assignment = {t: p for t, p in assignment.items() if p}
        target[member_id] = assignment
        if assignment != previous.get(member_id):
            records.append(ConsumerGroupTargetAssignmentMemberRecord(group_id, member_id, assignment))
    records.append(ConsumerGroupTargetAssignmentMetadataRecord(group_id, epoch))
    return target, records
