"""Rebuilding groups from a replayed `__consumer_offsets` partition.

The latest record per key wins and a tombstone removes its key. A group with members comes back Stable;
each member's supported protocols are just the selected one with its stored subscription, so a follower
that later rejoins with its full list counts as changed and triggers a rebalance, as in Kafka.
"""
from __future__ import annotations

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


class GroupLoader:
    def __init__(self) -> None:
        self.group_values: dict[str, GroupMetadataValue] = {}
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
        else:
            raise TypeError(f"not a coordinator record: {record!r}")

    def build(self, wall_ms: int) -> list[GroupMetadata]:
        groups: list[GroupMetadata] = []
        for group_id, value in self.group_values.items():
            group = group_from_value(group_id, value)
            group.offsets = self.offsets.get(group_id, {})
            groups.append(group)
        for group_id, offsets in self.offsets.items():
            if group_id not in self.group_values:
                # Offsets with no group record: an Empty "simple" group with no protocol type.
                group = GroupMetadata(group_id, wall_ms)
                group.offsets = offsets
                groups.append(group)
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
