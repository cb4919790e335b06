"""The mechanics under the classic group's request handlers: entering and completing join phases, the
pending-sync deadline, session liveness, removing members, and writing the group's record.

The classic group manager (classic_join.py, classic_manager.py) builds on this class; the delayed
operations in delayed.py call back into it through their `RebalanceCallbacks` protocol, which this class
satisfies — so delayed.py needs no import of this module. Every callback re-checks the group, because a
timer set for one generation may fire in another. The clock, the group table and the appends are the
shard's (shard.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

import structlog
from mypy_extensions import mypyc_attr

from coordinator_server.purgatory import DelayedOperationPurgatory
from protocol.errors import Errors

from . import delayed
from .api import JoinGroupResult, SyncGroupResult
from .group import GroupMetadata
from .member import MemberMetadata
from .rebalance_trace import RebalanceTrace, RebalanceTrigger, member_fields
from .records import GroupMetadataRecord, GroupMetadataValue, MemberRecord
from .settings import GroupConfig
from .shard import CoordinatorShard
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .timers import TimerKey

log = structlog.get_logger("coordinator_server.group")


def pending_sync_key(group_id: str) -> TimerKey:
    """The pending-sync deadline's key: one per group, replaced by each generation's."""
    return ("classic", "sync", group_id)


# Why a rebalance started or a member went, as a small fixed set (metric labels); the free-text reason
# with member ids and client reasons goes to the log line.
RebalanceReason = Literal["join", "leave", "session_expiry", "new_member_timeout", "pending_sync_timeout",
                          "static_replacement", "group_max_size", "storage_error"]
RemovalReason = Literal["leave", "session_expiry", "new_member_timeout", "rebalance_timeout",
                        "pending_sync_timeout", "group_max_size"]
# The removals that go through _remove_member (and may start a rebalance for the same reason).
_RemoveReason = Literal["leave", "session_expiry", "new_member_timeout", "group_max_size"]
# The trigger a log line names when the caller does not say more (a JoinGroup says which one it is).
_TRIGGER_OF: dict[RebalanceReason, RebalanceTrigger] = {
    "join": "member_joined", "leave": "member_left", "session_expiry": "session_expired",
    "new_member_timeout": "new_member_timeout", "pending_sync_timeout": "sync_timeout",
    "static_replacement": "static_member_replaced", "group_max_size": "group_max_size",
    "storage_error": "storage_error",
}


# metrics.GroupMetrics, not compiled, implements these.
@mypyc_attr(allow_interpreted_subclasses=True)
class GroupEvents:
    """What the core reports for metrics: plain calls with values it already has (its monotonic now_ms,
    never a clock read). This no-op default keeps the core free of any metrics library; the shell passes
    `coordinator_server.metrics.GroupMetrics`."""

    def on_rebalance(self, group_id: str, reason: RebalanceReason, now_ms: int) -> None:
        """The group entered PreparingRebalance."""

    def on_stable(self, group_id: str, now_ms: int) -> None:
        """The group became Stable (the leader's assignment is durable)."""

    def on_rebalance_abandoned(self, group_id: str) -> None:
        """The rebalance ended without a Stable generation (the group went Empty or Dead)."""

    def on_member_removed(self, group_id: str, reason: RemovalReason) -> None:
        """A member left the group (pending KIP-394 members are not counted: they never joined)."""

    def on_pending_member_evicted(self, group_id: str) -> None:
        """A pending KIP-394 member was forgotten because its group held group_max_pending_members."""


# The classic group manager's base (classic_join.py), in a module of its own.
@mypyc_attr(allow_interpreted_subclasses=True)
class RebalanceMechanics:
    def __init__(self, shard: CoordinatorShard, config: GroupConfig, events: GroupEvents) -> None:
        self.shard = shard
        self.config = config
        self.events = events
        self.heartbeat_purgatory: DelayedOperationPurgatory[delayed.DelayedHeartbeat] = DelayedOperationPurgatory(
            "Heartbeat", shard.timer
        )
        self.rebalance_purgatory: DelayedOperationPurgatory[delayed.DelayedOperation] = DelayedOperationPurgatory(
            "Rebalance", shard.timer
        )

    @property
    def now_ms(self) -> int:
        return self.shard.now_ms

    def validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
    ) -> Errors | None:
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return Errors.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("static_member_fenced", group_id=group.group_id, member_id=member_id,
                         group_instance_id=group_instance_id, current_member_id=current, operation=operation)
                return Errors.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return Errors.UNKNOWN_MEMBER_ID
        return None

    def _current_join_result(self, group: GroupMetadata, member_id: str, include_members: bool) -> JoinGroupResult:
        return JoinGroupResult(
            Errors.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member_id,
            members=group.current_member_metadata() if include_members else [],
        )

    def _can_rebalance(self, group: GroupMetadata) -> bool:
        return group.state in (STABLE, COMPLETING_REBALANCE, EMPTY)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, kind: RebalanceReason, reason: str,
                                 trigger: RebalanceTrigger | None = None, member: MemberMetadata | None = None) -> None:
        if self._can_rebalance(group):
            self._prepare_rebalance(group, kind, reason, trigger, member)

    def _prepare_rebalance(self, group: GroupMetadata, kind: RebalanceReason, reason: str,
                           trigger: RebalanceTrigger | None = None, member: MemberMetadata | None = None) -> None:
        """`member` is the one that caused it (joined, left, expired...), named in the log line."""
        if group.is_state(COMPLETING_REBALANCE):
            # Members parked in SyncGroup must rejoin: their assignment belongs to a dead generation.
            self._reset_and_propagate_assignment_error(group, Errors.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        was_empty = group.is_state(EMPTY)
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        operation: delayed.DelayedJoin
        if was_empty:
            delay = self.config.initial_rebalance_delay_ms
            operation = delayed.InitialDelayedJoin(
                self, self.rebalance_purgatory, group, delay, delay, max(rebalance_timeout_ms - delay, 0)
            )
        else:
            operation = delayed.DelayedJoin(self, group, rebalance_timeout_ms)
        previous = group.state
        group.transition_to(PREPARING_REBALANCE, self.shard.wall_ms)
        # Set before the join can complete (at once, below, when every member is already in).
        trace = RebalanceTrace(trigger or _TRIGGER_OF[kind], self.shard.now_ms, was_empty,
                               group.rebalance_trace if previous is COMPLETING_REBALANCE else None)
        group.rebalance_trace = trace
        if member is not None and member.is_awaiting_join:
            trace.on_arrival(member, self.shard.now_ms)
        log.info("preparing_rebalance", group_id=group.group_id, generation=group.generation_id,
                 reason=reason, members=group.size(), trigger=trace.trigger, **member_fields(member),
                 previous_state=str(previous), state_time_ms=group.state_timestamp_ms)
        self.events.on_rebalance(group.group_id, kind, self.shard.now_ms)
        self.rebalance_purgatory.try_complete_else_watch(operation, (delayed.join_key(group.group_id),), self.shard.now_ms)

    def _note_join_arrival(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """A member's JoinGroup is parked in the current join phase (before the phase is checked)."""
        trace = group.rebalance_trace
        if trace is not None and group.is_state(PREPARING_REBALANCE) and member.is_awaiting_join:
            trace.on_arrival(member, self.shard.now_ms)

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        if group.has_all_members_joined():
            return force_complete()
        return False

    def on_expire_join(self, group: GroupMetadata) -> None:
        log.info("rebalance_timeout", group_id=group.group_id, generation=group.generation_id)

    def on_complete_join(self, group: GroupMetadata) -> None:
        not_rejoined = group.not_yet_rejoined_members()
        pending_members = len(group.pending_members)
        for member in not_rejoined:
            if member.is_static:
                continue  # static members are kept: they may come back with the same instance id
            log.info("member_removed", group_id=group.group_id, generation=group.generation_id,
                     reason="did not rejoin before the rebalance timeout", cause="rebalance_timeout",
                     **member_fields(member), state=str(group.state))
            group.remove(member.member_id)
            self._remove_heartbeat_for_leaving_member(group, member.member_id)
            self.events.on_member_removed(group.group_id, "rebalance_timeout")
        if group.is_state(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin remain: wait another round for them (or their
            # session timeouts) rather than completing a generation with nobody to answer.
            log.warning("no_member_rejoined", group_id=group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                delayed.DelayedJoin(self, group, group.rebalance_timeout_ms()),
                (delayed.join_key(group.group_id),),
                self.shard.now_ms,
            )
            return
        group.init_next_generation(self.shard.wall_ms)
        trace = group.rebalance_trace
        phase = {} if trace is None else trace.on_join_completed(
            self.shard.now_ms, [m.member_id for m in not_rejoined], pending_members)
        if group.is_state(EMPTY):
            log.info("group_empty", group_id=group.group_id, generation=group.generation_id,
                     reason="no members left when the join phase completed", **phase,
                     state_time_ms=group.state_timestamp_ms)
            group.rebalance_trace = None
            self.events.on_rebalance_abandoned(group.group_id)
            self._store_group(group, {}, lambda error: None)
            return
        log.info("join_completed", group_id=group.group_id, generation=group.generation_id,
                 protocol=group.protocol_name, leader=group.leader_id, members=group.size(),
                 reason="every member rejoined or the rebalance timeout passed", **phase,
                 state_time_ms=group.state_timestamp_ms)
        for member in list(group.members.values()):
            result = self._current_join_result(group, member.member_id, include_members=group.is_leader(member.member_id))
            group.maybe_invoke_join_callback(member, result)
            self.complete_and_schedule_next_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: Errors) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: Errors) -> None:
        ok = error is Errors.NONE
        for member in list(group.members.values()):
            result = SyncGroupResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment if ok else b"",
            )
            if group.maybe_invoke_sync_callback(member, result):
                # A session that ran out while the member waited was ignored; start a fresh one now.
                self.complete_and_schedule_next_heartbeat(group, member)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        # Every member must SyncGroup within the rebalance timeout (KIP-814 era). A keyed timer, not a
        # delayed operation: nothing completes it but its cancellation once the last member has synced.
        generation = group.generation_id
        self.shard.timers.schedule(pending_sync_key(group.group_id), group.rebalance_timeout_ms(),
                                   self.shard.now_ms, lambda: self.on_expire_pending_sync(group, generation))

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.shard.timers.cancel(pending_sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self.shard.timers.cancel(pending_sync_key(group.group_id))

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        # The timer carries the generation it was set for: the group may be in another one by now.
        if generation_id != group.generation_id or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync_members:
            return
        laggards = sorted(group.pending_sync_members)
        first: MemberMetadata | None = None
        for member_id in laggards:
            member = group.remove(member_id)
            first = first or member
            log.info("member_removed", group_id=group.group_id, generation=group.generation_id,
                     reason="no SyncGroup before the rebalance timeout", cause="pending_sync_timeout",
                     member_id=member_id, client_id=member.client_id if member else None,
                     group_instance_id=member.group_instance_id if member else None, state=str(group.state))
            self._remove_heartbeat_for_leaving_member(group, member_id)
            self.events.on_member_removed(group.group_id, "pending_sync_timeout")
        self._prepare_rebalance(group, "pending_sync_timeout", f"pending sync expired for {laggards}", member=first)

    def complete_and_schedule_next_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        # The hot path of every heartbeat. Kafka completes the member's DelayedHeartbeat (its on_complete
        # does nothing) and parks a new one that is then unsatisfied until the next heartbeat; when that
        # is all that would happen, moving the existing operation to the new deadline is the same. The
        # operation is the member's own (not found by its key: with a million members that lookup and
        # the memory it touches were a tenth of a heartbeat; only a member's own, never a pending
        # member's, is kept there) and must still be the only one watched under the member's key, for the
        # same member id (a replaced static member's changes), in this group.
        current = cast("delayed.DelayedHeartbeat | None", member.heartbeat_op)
        if (current is not None and current.group is group and current.member_id == member.member_id
                and current.scheduled and self.heartbeat_purgatory.is_sole_watcher(current)):
            member.heartbeat_satisfied = False
            if not member.has_satisfied_heartbeat():
                self.heartbeat_purgatory.reschedule(current, timeout_ms, self.shard.now_ms)
                return
        key = delayed.member_key(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        operation = delayed.DelayedHeartbeat(self, group, member.member_id, False, timeout_ms)
        member.heartbeat_op = None if self.heartbeat_purgatory.try_complete_else_watch(
            operation, (key,), self.shard.now_ms) else operation

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member_id))

    def try_complete_heartbeat(
        self, group: GroupMetadata, member_id: str, is_pending: bool, force_complete: Callable[[], bool]
    ) -> bool:
        if group.is_state(DEAD):
            return force_complete()
        if is_pending:
            # Done once the pending member has joined (or is gone).
            if group.has(member_id) or not group.is_pending_member(member_id):
                return force_complete()
            return False
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if group.is_state(DEAD):
            return
        if is_pending:
            if group.is_pending_member(member_id):
                log.info("pending_member_expired", group_id=group.group_id, member_id=member_id)
                self._remove_pending_member_and_update_group(group, member_id)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        if member.is_new:
            self._remove_member(group, member, "new_member_timeout", "new member join timeout")
        else:
            self._remove_member(group, member, "session_expiry", "session timeout")

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata, kind: _RemoveReason, reason: str) -> None:
        log.info("member_removed", group_id=group.group_id, generation=group.generation_id, reason=reason,
                 cause=kind, **member_fields(member), state=str(group.state))
        # Its parked JoinGroup learns it is out and rejoins from scratch if it is still alive.
        group.maybe_invoke_join_callback(member, JoinGroupResult(Errors.UNKNOWN_MEMBER_ID, member_id=""))
        # A parked SyncGroup would otherwise hold its connection: the member is no longer in the group.
        group.maybe_invoke_sync_callback(member, SyncGroupResult(Errors.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._remove_heartbeat_for_leaving_member(group, member.member_id)
        self.events.on_member_removed(group.group_id, kind)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, kind, f"removing member {member.member_id}: {reason}", member=member)
        elif group.is_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_members.pop(member_id, None)
        if group.is_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))

    def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes], on_done: Callable[[Errors], None]) -> None:
        record = GroupMetadataRecord(group.group_id, self.group_metadata_value(group, assignment))
        self.shard.emit_append(group.group_id, (record,), on_done)

    def group_metadata_value(self, group: GroupMetadata, assignment: dict[str, bytes]) -> GroupMetadataValue:
        protocol = group.protocol_name
        members = tuple(
            MemberRecord(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(protocol) if protocol is not None else b"",
                assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        ) if protocol is not None else ()
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id if protocol is not None else None,
            current_state_timestamp_ms=group.state_timestamp_ms,
            members=members,
        )
