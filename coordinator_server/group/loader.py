"""Rebuilding a partition's groups, of every type, from one pass over its replayed `__consumer_offsets` log.

`apply` takes the records in log order and keeps, per group id, what each kind of record says: the latest
classic group record (`GroupMetadataRecord`), the consumer group its ConsumerGroup* records build, and its
committed offsets. The latest record per key wins and a tombstone removes its key: a classic group
tombstone forgets the classic record, an offset tombstone the offset, and a tombstone of a consumer group's
epoch deletes that group (as Kafka's replay removes it). Every other consumer record is applied as the
consumer manager applies the records it writes (`ConsumerGroup.apply`), creating the group if need be.

`build` then settles each id on one type, for the one group table (table.py):
- a consumer group wins: its id's offsets are its own, and a classic record left beside it is stale (a
  conversion's tombstone came later than it, or was lost with a failed write) and is ignored with a warning
  if it still names members or a protocol type;
- otherwise a classic record makes a classic group. One with members comes back Stable; each member's
  supported protocols are just the selected one with its stored subscription, so a follower that later
  rejoins with its full list counts as changed and triggers a rebalance, as in Kafka;
- offsets with no group record make an Empty "simple" classic group with no protocol type.
"""
from __future__ import annotations

import structlog

from .consumer.group import ConsumerGroup
from .consumer.records import CONSUMER_GROUP_RECORD_TYPES, ConsumerGroupMetadataRecord
from .group import GroupMetadata
from .member import MemberMetadata
from .records import (
    CoordinatorRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from .state import STABLE
from .table import Group

log = structlog.get_logger("coordinator_server.group")


class GroupLoader:
    def __init__(self) -> None:
        self.group_values: dict[str, GroupMetadataValue] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = {}

    def apply(self, record: CoordinatorRecord) -> None:
        if isinstance(record, GroupMetadataRecord):
            if record.value is None:
                self.group_values.pop(record.group_id, None)
                # A group tombstone (DeleteGroups, expiry) is written after its offsets' tombstones.
            else:
                self.group_values[record.group_id] = record.value
        elif isinstance(record, OffsetCommitRecord):
            group_offsets = self.offsets.setdefault(record.group_id, {})
            key = (record.topic, record.partition)
            if record.value is None:
                group_offsets.pop(key, None)
                if not group_offsets:
                    del self.offsets[record.group_id]
            else:
                group_offsets[key] = record.value
        elif isinstance(record, CONSUMER_GROUP_RECORD_TYPES):
            if isinstance(record, ConsumerGroupMetadataRecord) and record.epoch is None:
                self.consumer_groups.pop(record.group_id, None)
                return
            group = self.consumer_groups.get(record.group_id)
            if group is None:
                group = self.consumer_groups[record.group_id] = ConsumerGroup(record.group_id)
            group.apply(record)
        else:
            raise TypeError(f"not a coordinator record: {record!r}")

    def build(self, wall_ms: int) -> dict[str, Group]:
        """The groups, one per id: consumer groups first, then classic groups, then simple groups (each in
        the order its first record came)."""
        groups: dict[str, Group] = {}
        for group_id, consumer_group in self.consumer_groups.items():
            consumer_group.offsets = self.offsets.get(group_id, {})
            groups[group_id] = consumer_group
        for group_id, value in self.group_values.items():
            if group_id in self.consumer_groups:
                if value.members or value.protocol_type:
                    log.warning("classic_group_record_ignored", group_id=group_id,
                                reason="the group is a consumer group")
                continue
            group = group_from_value(group_id, value)
            group.offsets = self.offsets.get(group_id, {})
            groups[group_id] = group
        for group_id, offsets in self.offsets.items():
            if group_id not in groups:
                # Offsets with no group record: an Empty "simple" group with no protocol type.
                simple = GroupMetadata(group_id, wall_ms)
                simple.offsets = offsets
                groups[group_id] = simple
        return groups


def group_from_value(group_id: str, value: GroupMetadataValue) -> GroupMetadata:
    group = GroupMetadata(group_id, value.current_state_timestamp_ms)
    group.protocol_type = value.protocol_type or None
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    for record in value.members:
        protocol = value.protocol or ""
        member = MemberMetadata(
            record.member_id, record.group_instance_id, record.client_id, record.client_host,
            record.rebalance_timeout_ms, record.session_timeout_ms, value.protocol_type,
            ((protocol, record.subscription),),
        )
        member.assignment = record.assignment
        group.add(member)
    if group.members:
        # Loaded straight into Stable: there is no transition from Empty to Stable in the state table.
        group.state = STABLE
        group.previous_state = STABLE
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
    else:
        group.leader_id = None
    group.update_subscribed_topics()
    return group
