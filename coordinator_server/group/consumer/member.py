"""A consumer group member (Kafka's ConsumerGroupMember), immutable.

A heartbeat builds the updated member next to the old one and compares them: what differs is what must be
written (a member metadata record, a current assignment record). The group only changes by applying
those records (`group.py`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ClassicMemberMetadata,
    CurrentAssignmentValue,
    MemberMetadataValue,
)


class MemberState(enum.IntEnum):
    """Where a member is on its way to the target assignment; the values are Kafka's record bytes."""

    STABLE = 0  # reconciled to its epoch's target
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before it may move to the next epoch
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions others still own
    UNKNOWN = 127  # a state a newer Kafka wrote: the member is fenced and rejoins from scratch

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor_name: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)

    # -- what the records hold -------------------------------------------------------------------------

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host,
            tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex, self.rebalance_timeout_ms,
            self.server_assignor_name, self.classic_member_metadata,
        )

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                      self.assigned_partitions, self.partitions_pending_revocation)

    def with_metadata(self, value: MemberMetadataValue) -> ConsumerGroupMember:
        return replace(
            self, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, subscribed_topic_names=frozenset(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor_name=value.server_assignor, classic_member_metadata=value.classic_member_metadata,
        )

    def with_assignment(self, value: CurrentAssignmentValue) -> ConsumerGroupMember:
        return replace(
            self, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=MemberState.from_value(value.state), assigned_partitions=value.assigned_partitions,
            partitions_pending_revocation=value.partitions_pending_revocation,
        )

    def with_assignment_cleared(self) -> ConsumerGroupMember:
        """What a current assignment tombstone leaves: no epoch (-1) and nothing owned."""
        return replace(self, member_epoch=-1, previous_member_epoch=-1, state=MemberState.STABLE,
                       assigned_partitions=EMPTY_ASSIGNMENT, partitions_pending_revocation=EMPTY_ASSIGNMENT)

    def update_epoch(self, member_epoch: int) -> ConsumerGroupMember:
        """Kafka's updateMemberEpoch: the previous epoch is remembered for a lost response."""
        return replace(self, previous_member_epoch=self.member_epoch, member_epoch=member_epoch)

    # -- questions -------------------------------------------------------------------------------------

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None

    def metadata_equal(self, other: ConsumerGroupMember) -> bool:
        """True if a member metadata record of `other` would say nothing new about this member."""
        return self.metadata_value() == other.metadata_value()

    def assignment_equal(self, other: ConsumerGroupMember) -> bool:
        return self.assignment_value() == other.assignment_value()


def new_member(member_id: str) -> ConsumerGroupMember:
    return ConsumerGroupMember(member_id, assigned_partitions=EMPTY_ASSIGNMENT,
                               partitions_pending_revocation=EMPTY_ASSIGNMENT)
