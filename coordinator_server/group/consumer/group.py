"""A consumer group (Kafka's ConsumerGroup): its epochs, members, target assignment and who owns what.

Hard state changes only by `apply(record)`: a heartbeat computes its records against the group as it is,
then the manager applies them, and loading a partition applies the replayed ones — the same code. Apply
is tolerant of order as compaction leaves it (a member or the group is created by whichever of its records
comes first), and strict about what would be a bug: a partition owned by two members raises.

State, derived as Kafka does after every change: Empty (no members), Assigning (the group epoch is ahead
of the target assignment's), Reconciling (some member is not yet at the target), Stable.
"""
from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator

from ..records import OffsetCommitValue
from .member import ConsumerGroupMember, MemberState, new_member
from .records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    ResolvedRegex,
    TopicMetadata,
)

GROUP_TYPE_CONSUMER = "consumer"
INITIAL_EPOCH = 1


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


class IllegalConsumerGroupState(RuntimeError):
    """A bug (or a log no Kafka would write), never a client mistake."""


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = ConsumerGroupState.EMPTY
        # A new group starts at epoch 1 with an empty target assignment of epoch 1, as Kafka's does since 4.3:
        # its first computed assignment is epoch 2, and a member that joins before it exists reconciles to
        # epoch 1 (0 is reserved for joining). A group with no records yet is in this state at load too.
        self.group_epoch = INITIAL_EPOCH
        self.assignment_epoch = INITIAL_EPOCH
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        # The subscribed topics as last recorded (name -> metadata): a change bumps the group epoch.
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self.subscribed_regexes: Counter[str] = Counter()  # regex -> members subscribed with it
        self.subscribed_names: Counter[str] = Counter()  # topic -> members naming it
        self.server_assignors: Counter[str] = Counter()
        # (topic id, partition) -> (owner member id, the owner's epoch), over assigned and pending revocation.
        self.partition_owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = {}
        # The topics image version the subscription metadata was computed at (soft state: -1 = recompute).
        self.metadata_version = -1
        self.last_regex_refresh_ms = -1
        # Members not reconciled to the target assignment epoch: the state without a pass over all members.
        self._not_reconciled: set[str] = set()
        self.dead = False
        # Committed offsets live with the group, as the classic group's do (coordinator_server/group/offsets.py).
        self.offsets: dict[tuple[str, int], OffsetCommitValue] = {}
        self.pending_offset_commits: dict[tuple[str, int], int] = {}

    # -- questions -------------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def member_target(self, member_id: str) -> Assignment:
        return self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        owner = self.partition_owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def partition_owner(self, topic_id: uuid.UUID, partition: int) -> str | None:
        owner = self.partition_owners.get((topic_id, partition))
        return None if owner is None else owner[0]

    def preferred_server_assignor(self) -> str | None:
        """The assignor most members ask for (Kafka's preferredServerAssignor); None: the default."""
        if not self.server_assignors:
            return None
        return max(self.server_assignors.items(), key=lambda kv: kv[1])[0]

    def subscribed_topic_names(self) -> set[str]:
        """Every topic some member subscribes to, by name or through a resolved regex."""
        names = set(self.subscribed_names)
        for regex in self.subscribed_regexes:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names |= resolved.topics
        return names

    def member_subscribed_topics(self, member: ConsumerGroupMember) -> frozenset[str]:
        if member.subscribed_topic_regex:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                return member.subscribed_topic_names | resolved.topics
        return member.subscribed_topic_names

    def is_empty(self) -> bool:
        return not self.members

    @property
    def removed(self) -> bool:
        """Deleted or unloaded: a commit completing now must not resurrect its offsets."""
        return self.dead

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    def members_using_classic_protocol(self) -> int:
        return sum(1 for m in self.members.values() if m.uses_classic_protocol)

    # -- apply -----------------------------------------------------------------------------------------

    def apply(self, record: ConsumerGroupRecord) -> None:
        """Change the group by one record; the manager applies each record it writes, the loader each one
        it replays."""
        if isinstance(record, ConsumerGroupCurrentMemberAssignmentRecord):
            self._apply_current_assignment(record)
        elif isinstance(record, ConsumerGroupTargetAssignmentMemberRecord):
            if record.partitions is None:
                self.target_assignment.pop(record.member_id, None)
            else:
                self.target_assignment[record.member_id] = record.partitions
        elif isinstance(record, ConsumerGroupMemberMetadataRecord):
            self._apply_member_metadata(record)
        elif isinstance(record, ConsumerGroupMetadataRecord):
            self.group_epoch = 0 if record.epoch is None else record.epoch
        elif isinstance(record, ConsumerGroupTargetAssignmentMetadataRecord):
            self.assignment_epoch = -1 if record.assignment_epoch is None else record.assignment_epoch
            self._not_reconciled = {m.member_id for m in self.members.values()
                                    if not m.is_reconciled_to(self.assignment_epoch)}
        elif isinstance(record, ConsumerGroupPartitionMetadataRecord):
            self.subscription_metadata = {t.name: t for t in record.topics or ()}
        elif isinstance(record, ConsumerGroupRegularExpressionRecord):
            if record.value is None:
                self.resolved_regexes.pop(record.regex, None)
            else:
                self.resolved_regexes[record.regex] = record.value
        else:
            raise TypeError(f"not a consumer group record: {record!r}")
        self._update_state()

    def apply_all(self, records: Iterable[ConsumerGroupRecord]) -> None:
        for record in records:
            self.apply(record)

    def _apply_member_metadata(self, record: ConsumerGroupMemberMetadataRecord) -> None:
        old = self.members.get(record.member_id)
        if record.value is None:
            if old is not None:
                self._replace_member(old, None)
            return
        self._replace_member(old, (old or new_member(record.member_id)).with_metadata(record.value))

    def _apply_current_assignment(self, record: ConsumerGroupCurrentMemberAssignmentRecord) -> None:
        old = self.members.get(record.member_id)
        if record.value is None:
            if old is not None:
                # Kafka's replay: the member stays (its metadata tombstone follows) with no epoch and nothing owned.
                self._replace_member(old, old.with_assignment_cleared())
            return
        self._replace_member(old, (old or new_member(record.member_id)).with_assignment(record.value))

    def _replace_member(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None) -> None:
        if old is not None:
            self._count(old, -1)
            self._release_partitions(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
            del self.members[old.member_id]
            self._not_reconciled.discard(old.member_id)
        if new is not None:
            self.members[new.member_id] = new
            if not new.is_reconciled_to(self.assignment_epoch):
                self._not_reconciled.add(new.member_id)
            self._count(new, 1)
            self._claim_partitions(new)
            if new.instance_id is not None:
                self.static_members[new.instance_id] = new.member_id

    def _count(self, member: ConsumerGroupMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            self.subscribed_names[name] += delta
            if self.subscribed_names[name] <= 0:
                del self.subscribed_names[name]
        for counter, key in ((self.subscribed_regexes, member.subscribed_topic_regex),
                             (self.server_assignors, member.server_assignor_name)):
            if key:
                counter[key] += delta
                if counter[key] <= 0:
                    del counter[key]

    def _claim_partitions(self, member: ConsumerGroupMember) -> None:
        owners = self.partition_owners
        for topic_id, partition in _owned(member):
            current = owners.get((topic_id, partition))
            if current is not None:
                raise IllegalConsumerGroupState(
                    f"group {self.group_id}: partition {topic_id}-{partition} given to {member.member_id} at epoch "
                    f"{member.member_epoch} is still owned by {current[0]} at epoch {current[1]}")
            owners[(topic_id, partition)] = (member.member_id, member.member_epoch)

    def _release_partitions(self, member: ConsumerGroupMember) -> None:
        for key in _owned(member):
            self.partition_owners.pop(key, None)

    def _update_state(self) -> None:
        if not self.members:
            state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            state = ConsumerGroupState.ASSIGNING
        elif not self._not_reconciled:
            state = ConsumerGroupState.STABLE
        else:
            state = ConsumerGroupState.RECONCILING
        self.state = state


def _owned(member: ConsumerGroupMember) -> Iterator[tuple[uuid.UUID, int]]:
    for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
        for topic_id, partitions in assignment.items():
            for partition in partitions:
                yield topic_id, partition


__all__ = ["GROUP_TYPE_CONSUMER", "ConsumerGroup", "ConsumerGroupState", "IllegalConsumerGroupState", "MemberState"]
