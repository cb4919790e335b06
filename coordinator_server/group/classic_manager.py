"""The classic group manager: SyncGroup, Heartbeat and LeaveGroup for classic groups, their unloading,
and KIP-848's migration of a classic group to a consumer group and back (migration.py).

Theory of operation. Synchronous and single-threaded: every entry point runs to completion at the shard's
current time; parked JoinGroup/SyncGroup requests are answered later through their callbacks, from
whichever call completes them (another member's request, a timer, or the completion of a durable append).
Soft state (parked callbacks, liveness) changes directly; hard state (assignments) changes only once its
record is durable. Timers are delayed operations in two purgatories on the shard's timing wheel; each
re-checks the group when it fires, because the group may have moved on.

The class is layered: the rebalance mechanics (rebalance.py) under JoinGroup (classic_join.py) under this.
The façade (coordinator.py) routes to it once it knows the group id names a classic group (or none).
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Final

import structlog
from mypy_extensions import mypyc_attr

from protocol.errors import Errors

from . import delayed
from .api import (
    HeartbeatInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    LeaveMemberResult,
    SyncCallback,
    SyncGroupInput,
    SyncGroupResult,
)
from .classic_join import ClassicJoin
from .consumer.group import ConsumerGroup
from .consumer.member import ConsumerGroupMember
from .group import GroupMetadata
from .migration import (
    classic_group_from_consumer,
    consumer_group_records,
    downgrade_refusal,
    upgrade_refusal,
)
from .records import CoordinatorRecord, GroupMetadataRecord, OffsetCommitValue
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .write_errors import write_error

log = structlog.get_logger("coordinator_server.group")

# A heartbeat's usual answers as C statics (Final, compiled): reading an attribute of the Errors enum goes
# through its metaclass on every call.
_HEARTBEAT_OK: Final = Errors.NONE
_HEARTBEAT_REBALANCING: Final = Errors.REBALANCE_IN_PROGRESS


# Under the façade, whose scripted test cores are interpreted subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class ClassicGroupManager(ClassicJoin):
    # -- SyncGroup -----------------------------------------------------------------------------------

    def handle_sync_group(self, group: GroupMetadata, inp: SyncGroupInput, respond: SyncCallback) -> None:
        error = self._validate_sync_group(group, inp)
        if error is not None:
            respond(SyncGroupResult(error))
            return
        state = group.state
        if state is EMPTY:
            respond(SyncGroupResult(Errors.UNKNOWN_MEMBER_ID))
        elif state is PREPARING_REBALANCE:
            respond(SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
        elif state is COMPLETING_REBALANCE:
            member = group.get(inp.member_id)
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = respond
            self._remove_pending_sync_member(group, inp.member_id)
            if group.is_leader(inp.member_id):
                self._store_leader_assignment(group, inp)
        elif state is STABLE:
            self._remove_pending_sync_member(group, inp.member_id)
            member = group.get(inp.member_id)
            respond(SyncGroupResult(Errors.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self.complete_and_schedule_next_heartbeat(group, member)
        else:
            raise AssertionError(f"SyncGroup reached group {group.group_id} in state {state}")

    def _validate_sync_group(self, group: GroupMetadata, inp: SyncGroupInput) -> Errors | None:
        if group.is_state(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = self.validate_current_member(group, inp.member_id, inp.group_instance_id, "sync-group")
        if error is not None:
            return error
        if inp.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        if inp.protocol_type is not None and inp.protocol_type != group.protocol_type:
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        if inp.protocol_name is not None and inp.protocol_name != group.protocol_name:
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _store_leader_assignment(self, group: GroupMetadata, inp: SyncGroupInput) -> None:
        given = dict(inp.assignments)
        # Members the leader left out get an empty assignment; ids that are not members are ignored.
        assignment = {member_id: given.get(member_id, b"") for member_id in group.members}
        missing = [m for m in group.members if m not in given]
        log.info("assignment_received", group_id=group.group_id, generation=group.generation_id,
                 leader=inp.member_id, members=group.size(), missing=len(missing))
        generation = group.generation_id

        def on_stored(error: Errors) -> None:
            # Another member may have joined meanwhile: act only if this generation is still completing.
            if not (group.is_state(COMPLETING_REBALANCE) and group.generation_id == generation):
                return
            if error is not Errors.NONE:
                self._reset_and_propagate_assignment_error(group, write_error(error))
                self._maybe_prepare_rebalance(group, "storage_error", f"error {error.name} storing the group assignment")
                return
            for member in group.members.values():
                member.assignment = assignment.get(member.member_id, b"")
            self._propagate_assignment(group, Errors.NONE)
            group.transition_to(STABLE, self.shard.wall_ms)
            trace, group.rebalance_trace = group.rebalance_trace, None
            log.info("group_stable", group_id=group.group_id, generation=group.generation_id,
                     reason="leader's assignment is durable", leader=group.leader_id, members=group.size(),
                     **({} if trace is None else trace.on_stable(self.shard.now_ms)), state_time_ms=group.state_timestamp_ms)
            self.events.on_stable(group.group_id, self.shard.now_ms)

        self._store_group(group, assignment, on_stored)

    # -- Heartbeat -----------------------------------------------------------------------------------

    def handle_heartbeat(self, group: GroupMetadata, inp: HeartbeatInput) -> Errors:
        if group.is_state(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = self.validate_current_member(group, inp.member_id, inp.group_instance_id, "heartbeat")
        if error is not None:
            return error
        if inp.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        state = group.state
        if state is EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        self.complete_and_schedule_next_heartbeat(group, group.get(inp.member_id))
        if state is PREPARING_REBALANCE:
            return _HEARTBEAT_REBALANCING
        return _HEARTBEAT_OK

    # -- LeaveGroup ----------------------------------------------------------------------------------

    def handle_leave_group(self, group: GroupMetadata, inp: LeaveGroupInput) -> LeaveGroupResult:
        if group.is_state(DEAD):
            return LeaveGroupResult(Errors.COORDINATOR_NOT_AVAILABLE)
        results = []
        for leaving in inp.members:
            reason = f"LeaveGroup; client reason: {leaving.reason or 'not provided'}"
            results.append(LeaveMemberResult(
                leaving.member_id, leaving.group_instance_id, self._leave_one(group, leaving.member_id,
                                                                              leaving.group_instance_id, reason)
            ))
        return LeaveGroupResult(Errors.NONE, results)

    def _leave_one(self, group: GroupMetadata, member_id: str, group_instance_id: str | None, reason: str) -> Errors:
        if member_id == "":
            # Admin removal of a static member by instance id (KIP-345).
            current = group.current_static_member_id(group_instance_id) if group_instance_id is not None else None
            if current is None:
                return Errors.UNKNOWN_MEMBER_ID
            self._remove_member(group, group.get(current), "leave", reason)
            return Errors.NONE
        if group.is_pending_member(member_id):
            self._remove_pending_member_and_update_group(group, member_id)
            self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member_id))
            log.info("pending_member_left", group_id=group.group_id, member_id=member_id)
            return Errors.NONE
        error = self.validate_current_member(group, member_id, group_instance_id, "leave-group")
        if error is not None:
            return error
        self._remove_member(group, group.get(member_id), "leave", reason)
        return Errors.NONE

    # -- leaving the table ---------------------------------------------------------------------------

    def remove_group(self, group: GroupMetadata) -> None:
        """Mark the group Dead and forget it; its tombstone is the caller's to write."""
        group.transition_to(DEAD, self.shard.wall_ms)
        del self.shard.groups[group.group_id]

    def unload_group(self, group: GroupMetadata, reason: str = "coordinator shutdown") -> None:
        previous = group.state
        group.transition_to(DEAD, self.shard.wall_ms)
        log.info("group_unloaded", group_id=group.group_id, generation=group.generation_id,
                 previous_state=str(previous), reason=reason)
        self.events.on_rebalance_abandoned(group.group_id)
        if previous is PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(
                    member, JoinGroupResult(Errors.NOT_COORDINATOR, member_id=member.member_id)
                )
            self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))
        elif previous in (STABLE, COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync_callback(member, SyncGroupResult(Errors.NOT_COORDINATOR))
                self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member.member_id))
        self._remove_sync_expiration(group)

    def retire_group(self, group: GroupMetadata, reason: str) -> None:
        """The classic group leaves the coordinator's table for another form: its parked requests learn that
        a new rebalance started, its timers find it Dead."""
        previous = group.state
        group.transition_to(DEAD, self.shard.wall_ms)
        del self.shard.groups[group.group_id]
        log.info("group_unloaded", group_id=group.group_id, generation=group.generation_id,
                 previous_state=str(previous), reason=reason)
        self.events.on_rebalance_abandoned(group.group_id)
        for member in list(group.members.values()):
            group.maybe_invoke_join_callback(member, JoinGroupResult(Errors.REBALANCE_IN_PROGRESS,
                                                                     member_id=member.member_id))
            group.maybe_invoke_sync_callback(member, SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
            self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member.member_id))
        self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))
        self._remove_sync_expiration(group)

    def on_loaded(self, group: GroupMetadata) -> None:
        """A group replayed from the log joins the table: every member gets a fresh session, and a group
        over group.max.size rebalances (Kafka's onLoaded)."""
        self.shard.groups[group.group_id] = group
        for member in list(group.members.values()):
            self.complete_and_schedule_next_heartbeat(group, member)
        if group.size() > self.config.group_max_size:
            self._prepare_rebalance(group, "group_max_size", "group is over group.max.size after loading",
                                    trigger="group_loaded")

    # -- KIP-848 migration between the protocols (migration.py) ----------------------------------------

    def is_empty(self, group_id: str) -> bool | None:
        group = self.shard.classic_group(group_id)
        return None if group is None else group.is_state(EMPTY)

    def take_over(self, group_id: str) -> tuple[dict[tuple[str, int], OffsetCommitValue], CoordinatorRecord]:
        group = self.shard.classic_group(group_id)
        assert group is not None, f"no classic group {group_id} to take over"
        self.remove_group(group)
        return group.offsets, GroupMetadataRecord(group_id, None)

    def upgrade(self, group_id: str, migration_policy: str, max_size: int,
                topic_id: Callable[[str], uuid.UUID | None]
                ) -> tuple[list[CoordinatorRecord], dict[tuple[str, int], OffsetCommitValue]] | None:
        """The records that turn the classic group into a consumer group, and its offsets; None if refused.
        Raises MalformedConsumerProtocol when its members' subscriptions cannot be read."""
        group = self.shard.classic_group(group_id)
        assert group is not None, f"no classic group {group_id} to upgrade"
        refusal = upgrade_refusal(group, migration_policy, max_size)
        if refusal is not None:
            log.info("classic_group_not_upgraded", group_id=group_id, reason=refusal)
            return None
        records = consumer_group_records(group, topic_id)
        self.retire_group(group, "upgraded to a consumer group")
        return [GroupMetadataRecord(group_id, None), *records], group.offsets

    def downgrade(self, group: ConsumerGroup, remaining: list[ConsumerGroupMember], migration_policy: str,
                  topic_name: Callable[[uuid.UUID], str | None]) -> list[CoordinatorRecord] | None:
        refusal = downgrade_refusal(remaining, migration_policy, self.config.group_max_size)
        if refusal is not None:
            if remaining and all(m.uses_classic_protocol for m in remaining):
                log.info("consumer_group_not_downgraded", group_id=group.group_id, reason=refusal)
            return None
        classic = classic_group_from_consumer(group, remaining, topic_name, self.shard.wall_ms)
        classic.offsets = group.offsets
        # The conversion replaces the consumer group's entry in the one table; the consumer manager then
        # removes the consumer group, leaving this entry be.
        self.shard.groups[classic.group_id] = classic
        assignment = {m.member_id: m.assignment for m in classic.members.values()}
        record = GroupMetadataRecord(classic.group_id, self.group_metadata_value(classic, assignment))
        log.info("consumer_group_downgraded", group_id=classic.group_id, generation=classic.generation_id,
                 members=classic.size(), protocol=classic.protocol_name,
                 reason="only classic protocol members remain")
        for member in classic.members.values():
            self.complete_and_schedule_next_heartbeat(classic, member)
        self._prepare_rebalance(classic, "leave", f"Downgrade group {classic.group_id} from consumer to classic.",
                                trigger="protocol_migration")
        return [record]
