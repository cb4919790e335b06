"""JoinGroup for a classic group: creating the group, admitting members (KIP-394's pending members,
group.max.size), static members replacing themselves (KIP-345), and the rejoin rules per state.

Reached through the façade (coordinator.py) once it knows the group id is not a consumer group's; the join
phases the requests enter are the mechanics' (rebalance.py).
"""
from __future__ import annotations

from collections.abc import Callable

import structlog
from mypy_extensions import mypyc_attr

from protocol.errors import Errors

from . import delayed
from .api import JoinCallback, JoinGroupInput, JoinGroupResult
from .group import GroupMetadata
from .member import MemberMetadata
from .rebalance import GroupEvents, RebalanceMechanics
from .rebalance_trace import RebalanceTrigger
from .settings import GroupConfig
from .shard import CoordinatorShard
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .write_errors import write_error

log = structlog.get_logger("coordinator_server.group")


# The classic group manager's base (classic_manager.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class ClassicJoin(RebalanceMechanics):
    def __init__(self, shard: CoordinatorShard, config: GroupConfig, events: GroupEvents,
                 member_id_factory: Callable[[str], str]) -> None:
        super().__init__(shard, config, events)
        self.member_id_factory = member_id_factory

    def session_timeout_in_range(self, session_timeout_ms: int) -> bool:
        return self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms

    def handle_join_group(self, inp: JoinGroupInput, respond: JoinCallback) -> None:
        """A JoinGroup past the gate and the session-timeout check, for a group id no consumer group holds."""
        is_unknown_member = inp.member_id == ""
        group = self.shard.classic_group(inp.group_id)
        if group is None:
            if not is_unknown_member:
                respond(JoinGroupResult(Errors.UNKNOWN_MEMBER_ID, member_id=inp.member_id))
                return
            group = self.create_group(inp.group_id)
        if not self._accept_joining_member(group, inp.member_id):
            self._reject_over_capacity(group, inp.member_id)
            respond(JoinGroupResult(Errors.GROUP_MAX_SIZE_REACHED, member_id=""))
        elif is_unknown_member:
            self._do_new_member_join(group, inp, respond)
        else:
            self._do_current_member_join(group, inp, respond)
        if group.is_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))

    def create_simple_group(self, group_id: str) -> GroupMetadata:
        """A group created by an offset commit with no generation: Empty, no protocol type, in memory
        only — its offset records are what make it known after a restart."""
        group = GroupMetadata(group_id, self.shard.wall_ms)
        self.shard.groups[group_id] = group
        return group

    def create_group(self, group_id: str) -> GroupMetadata:
        group = GroupMetadata(group_id, self.shard.wall_ms)
        self.shard.groups[group_id] = group
        # As the new coordinator does: a group created by JoinGroup is recorded at once (gen 0, Empty),
        # so that it is known after a restart even if nothing else is written for it.
        self._store_group(group, {}, lambda error: None)
        return group

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.state is PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_members_awaiting_join < max_size
        return group.has(member_id) or group.size() < max_size

    def _reject_over_capacity(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None:
            # Only a member not parked in this join phase can be refused, so nothing of it is parked.
            self._remove_member(group, member, "group_max_size", "group.max.size reached")
        elif group.is_pending_member(member_id):
            log.info("pending_member_removed", group_id=group.group_id, member_id=member_id,
                     reason="group.max.size reached")
            group.pending_members.pop(member_id, None)
            self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member_id))

    def _do_new_member_join(self, group: GroupMetadata, inp: JoinGroupInput, respond: JoinCallback) -> None:
        if group.is_state(DEAD):
            respond(JoinGroupResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id=""))
            return
        if not group.supports_protocols(inp.protocol_type, {name for name, _ in inp.protocols}):
            respond(JoinGroupResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=""))
            return
        prefix = inp.group_instance_id if inp.group_instance_id is not None else inp.client_id
        new_member_id = self.member_id_factory(prefix)
        if inp.group_instance_id is not None:
            old_member_id = group.current_static_member_id(inp.group_instance_id)
            if old_member_id is not None:
                log.info("static_member_replaced", group_id=group.group_id, group_instance_id=inp.group_instance_id,
                         old_member_id=old_member_id, member_id=new_member_id, generation=group.generation_id,
                         state=str(group.state), client_id=inp.client_id,
                         old_client_id=group.get(old_member_id).client_id)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, inp, respond)
            else:
                self._add_member_and_rebalance(group, new_member_id, inp, respond)
        elif inp.api_version >= 4:
            # KIP-394: hand out the id and wait for the member to come back with it.
            if len(group.pending_members) >= self.config.group_max_pending_members:
                self._evict_oldest_pending_member(group)
            group.pending_members[new_member_id] = None
            self.heartbeat_purgatory.try_complete_else_watch(
                delayed.DelayedHeartbeat(self, group, new_member_id, True, inp.session_timeout_ms),
                (delayed.member_key(group.group_id, new_member_id),),
                self.shard.now_ms,
            )
            respond(JoinGroupResult(Errors.MEMBER_ID_REQUIRED, member_id=new_member_id))
        else:
            self._add_member_and_rebalance(group, new_member_id, inp, respond)

    def _evict_oldest_pending_member(self, group: GroupMetadata) -> None:
        """A flood of JoinGroups without a member id must not grow a group without bound; forgetting the
        oldest id rather than refusing the new one keeps the group open to real joiners (one whose id was
        forgotten gets UNKNOWN_MEMBER_ID and joins again)."""
        oldest = next(iter(group.pending_members))
        del group.pending_members[oldest]
        self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, oldest))
        group.pending_evictions += 1
        self.events.on_pending_member_evicted(group.group_id)
        if group.pending_evictions & (group.pending_evictions - 1) == 0:  # 1, 2, 4, 8...: a flood logs little
            log.warning("pending_members_evicted", group_id=group.group_id, evicted=group.pending_evictions,
                        max_pending_members=self.config.group_max_pending_members)

    def _do_current_member_join(self, group: GroupMetadata, inp: JoinGroupInput, respond: JoinCallback) -> None:
        member_id = inp.member_id
        if group.is_state(DEAD):
            respond(JoinGroupResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return
        if not group.supports_protocols(inp.protocol_type, {name for name, _ in inp.protocols}):
            respond(JoinGroupResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            return
        if group.is_pending_member(member_id):
            # A pending member never carries an instance id: ids of static members are not handed out first.
            self._add_member_and_rebalance(group, member_id, inp, respond)
            return
        error = self.validate_current_member(group, member_id, inp.group_instance_id, "join-group")
        if error is not None:
            respond(JoinGroupResult(error, member_id=member_id))
            return
        member = group.get(member_id)
        state = group.state
        if state is PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, inp, respond, "member rejoining during PreparingRebalance",
                                              "member_joined")  # no new rebalance: the trigger is unused
        elif state is COMPLETING_REBALANCE:
            if member.matches(inp.protocols):
                # A retry of a lost JoinGroup response: answer the current generation again.
                respond(self._current_join_result(group, member_id, include_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, inp, respond, "member metadata changed",
                                                  "metadata_changed")
        elif state is STABLE:
            if group.is_leader(member_id):
                # The leader rejoins to trigger a rebalance for changes the metadata doesn't show.
                self._update_member_and_rebalance(
                    group, member, inp, respond, "leader rejoined",
                    "leader_rejoined" if member.matches(inp.protocols) else "metadata_changed")
            elif not member.matches(inp.protocols):
                self._update_member_and_rebalance(group, member, inp, respond, "member metadata changed",
                                                  "metadata_changed")
            else:
                respond(self._current_join_result(group, member_id, include_members=False))
        else:
            respond(JoinGroupResult(Errors.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, inp: JoinGroupInput, respond: JoinCallback
    ) -> None:
        member = MemberMetadata(
            member_id, inp.group_instance_id, inp.client_id, inp.client_host, inp.rebalance_timeout_ms,
            inp.session_timeout_ms, inp.protocol_type, inp.protocols,
        )
        member.is_new = True
        member.join_api_version = inp.api_version
        member.awaiting_join = respond
        if group.is_state(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member)
        log.info("member_added", group_id=group.group_id, member_id=member_id, generation=group.generation_id,
                 group_instance_id=inp.group_instance_id, client_id=inp.client_id, reason=inp.reason or "not provided")
        # A new member cannot heartbeat yet and its socket is muted while it waits, so it gets the
        # new-member join timeout instead of its session timeout.
        self._complete_and_schedule_next_expiration(group, member, self.config.new_member_join_timeout_ms)
        self._note_join_arrival(group, member)
        self._maybe_prepare_rebalance(group, "join", f"adding new member {member_id}", "member_joined", member)

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, inp: JoinGroupInput, respond: JoinCallback, reason: str,
        trigger: RebalanceTrigger,
    ) -> None:
        self._supersede_parked_join(member)
        group.update_member(member, inp.protocols, inp.rebalance_timeout_ms, inp.session_timeout_ms, respond)
        member.join_api_version = inp.api_version
        self._note_join_arrival(group, member)
        self._maybe_prepare_rebalance(
            group, "join", f"{reason} ({member.member_id}); client reason: {inp.reason or 'not provided'}",
            trigger, member,
        )

    def _supersede_parked_join(self, member: MemberMetadata) -> None:
        # A second JoinGroup for a member already parked (the client retried on a new connection): the
        # first one would otherwise hold its connection forever.
        old = member.awaiting_join
        if old is not None:
            old(JoinGroupResult(Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id))

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, new_member_id: str, inp: JoinGroupInput, respond: JoinCallback
    ) -> None:
        assert inp.group_instance_id is not None
        current_leader = group.leader_id
        member = group.replace_static_member(inp.group_instance_id, old_member_id, new_member_id)
        old_protocols = member.supported_protocols
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        old_client = (member.client_id, member.client_host)
        member.client_id, member.client_host = inp.client_id, inp.client_host
        # The old id's heartbeat expires harmlessly (the id is gone); the new id gets its own.
        self.complete_and_schedule_next_heartbeat(group, member)
        group.update_member(member, inp.protocols, inp.rebalance_timeout_ms, inp.session_timeout_ms, respond)
        member.join_api_version = inp.api_version
        state = group.state
        if state is STABLE:
            if group.protocol_name == group.select_protocol():
                self._persist_static_replacement(
                    group, member, old_member_id, current_leader,
                    (old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms, old_client),
                )
            else:
                self._maybe_prepare_rebalance(
                    group, "static_replacement", f"static member {new_member_id} rejoined with a protocol change",
                    member=member,
                )
        elif state is COMPLETING_REBALANCE:
            # The old id may already be in the leader's assignment: only a new rebalance is safe.
            self._maybe_prepare_rebalance(
                group, "static_replacement", f"static member {new_member_id} rejoined during CompletingRebalance",
                member=member,
            )
        elif state is PREPARING_REBALANCE:
            self._note_join_arrival(group, member)  # it simply waits with the others
        else:
            raise AssertionError(f"static member of group {group.group_id} in state {state}")

    def _persist_static_replacement(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        old_member_id: str,
        current_leader: str | None,
        old: tuple[tuple[tuple[str, bytes], ...], int, int, tuple[str, str]],
    ) -> None:
        new_member_id = member.member_id
        generation = group.generation_id
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        instance_id = member.group_instance_id
        assert instance_id is not None

        def on_stored(error: Errors) -> None:
            if group.state is not STABLE or group.generation_id != generation or not group.has(new_member_id):
                # The group moved on while we were writing; the parked join was dealt with there.
                return
            if error is not Errors.NONE:
                log.warning("static_member_replacement_failed", group_id=group.group_id,
                            member_id=new_member_id, error=error.name)
                protocols, rebalance_ms, session_ms, client = old
                callback = member.awaiting_join
                group.update_member(member, protocols, rebalance_ms, session_ms, None)
                member.client_id, member.client_host = client
                reverted = group.replace_static_member(instance_id, new_member_id, old_member_id)
                self.complete_and_schedule_next_heartbeat(group, reverted)
                if callback is not None:
                    callback(JoinGroupResult(
                        write_error(error), generation_id=group.generation_id,
                        protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                        leader=current_leader or "", member_id="",
                    ))
                return
            is_leader = group.is_leader(new_member_id)
            if member.join_api_version >= 9:
                # KIP-814: the leader learns it leads but skips the assignor; the group stays Stable.
                result = self._current_join_result(group, new_member_id, include_members=is_leader)
                result.skip_assignment = is_leader
            else:
                # Older leaders would run the assignor and their sync would be ignored in Stable, so they
                # are told the old leader id and don't think they lead.
                result = self._current_join_result(group, new_member_id, include_members=False)
                result.leader = current_leader or ""
            group.maybe_invoke_join_callback(member, result)

        self._store_group(group, assignment, on_stored)
