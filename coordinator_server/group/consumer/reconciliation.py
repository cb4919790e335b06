"""Reconciliation: one member's next step towards the target assignment (Kafka's CurrentAssignmentBuilder).

The rule that keeps a partition from being consumed twice: a member gives up partitions before it moves
to a new epoch, and it is given a partition only once no other member owns it (owns = assigned or pending
revocation). So a member is in one of three states:

- STABLE: at its epoch's target. If a newer target exists, it is reconciled towards it.
- UNREVOKED_PARTITIONS: it still owns partitions it must give up, and stays at its old epoch until its
  heartbeat no longer reports them (`owned`, from the request).
- UNRELEASED_PARTITIONS: it is at the new epoch but some of its target partitions are still owned by
  others; it gets them at a later heartbeat, once released.

Partitions it keeps it never stops owning: a member that keeps its partitions keeps fetching them.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from .member import ConsumerGroupMember, MemberState
from .records import Assignment

# (topic id, partition) -> the owner's epoch, or -1 when nobody owns it.
PartitionEpoch = Callable[[uuid.UUID, int], int]
OwnedPartitions = Mapping[uuid.UUID, Iterable[int]] | None  # None: the request did not say


class FencedByReconciliation(Exception):
    """A member in a state this server does not know must give up everything and rejoin."""


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owned: OwnedPartitions,
              current_partition_epoch: PartitionEpoch, subscribed_topic_ids: frozenset[uuid.UUID]) -> ConsumerGroupMember:
    """The member's next state; the member itself when it cannot move yet."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target, owned,
                                    current_partition_epoch, subscribed_topic_ids)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, current_partition_epoch,
                                subscribed_topic_ids)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, current_partition_epoch,
                                subscribed_topic_ids)
    if owned is None or any(owned.values()):
        raise FencedByReconciliation("The consumer group member is in a unknown state. The member must "
                                     "abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, owned, current_partition_epoch,
                            subscribed_topic_ids)


def _owns_any(owned: OwnedPartitions, partitions: Assignment) -> bool:
    if owned is None:
        return True  # unknown: assume it still owns them
    for topic_id, owned_partitions in owned.items():
        pending = partitions.get(topic_id)
        if pending and any(p in pending for p in owned_partitions):
            return True
    return False


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
                     owned: OwnedPartitions, current_partition_epoch: PartitionEpoch,
                     subscribed_topic_ids: frozenset[uuid.UUID]) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending_assignment: dict[uuid.UUID, frozenset[int]] = {}
    has_unreleased = False
    own_pending = member.partitions_pending_revocation
    for topic_id in set(target) | set(member.assigned_partitions):
        # A topic the member no longer subscribes to is revoked whatever the target says.
        wanted = target.get(topic_id, frozenset()) if topic_id in subscribed_topic_ids else frozenset()
        current = member.assigned_partitions.get(topic_id, frozenset())
        keep = current & wanted
        give_up = current - keep
        to_assign = set(wanted - keep)
        releasing = own_pending.get(topic_id, frozenset())
        unreleased = {p for p in to_assign
                      if current_partition_epoch(topic_id, p) != -1 and p not in releasing}
        if unreleased:
            has_unreleased = True
            to_assign -= unreleased
        if keep:
            assigned[topic_id] = keep
        if give_up:
            revoking[topic_id] = give_up
        if to_assign:
            pending_assignment[topic_id] = frozenset(to_assign)
    if revoking and _owns_any(owned, revoking):
        # Revoke first: it stays at its epoch until it reports the partitions gone.
        return replace(member.update_epoch(member_epoch), state=MemberState.UNREVOKED_PARTITIONS,
                       assigned_partitions=assigned, partitions_pending_revocation=revoking)
    for topic_id, partitions in pending_assignment.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return replace(member.update_epoch(target_epoch), state=state, assigned_partitions=assigned,
                   partitions_pending_revocation={})
