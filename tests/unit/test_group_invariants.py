"""A stateful property test of the group core: random sequences of joins (dynamic and static, several
versions), syncs, heartbeats, leaves, offset commits, passing time and failing writes, with the core's
bookkeeping invariants checked after every step. A violation prints the exact sequence that caused it."""
from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator_server.group.state import DEAD, EMPTY, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness

GROUPS = ["g1", "g2"]
INSTANCES = [None, None, "i-1", "i-2"]
PROTOCOLS = [(("range", b"a"),), (("range", b"b"), ("roundrobin", b"")), (("roundrobin", b""),)]


class GroupCoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(initial_rebalance_delay_ms=100, min_session_timeout_ms=10)
        # What clients believe: group -> list of (member id, instance id, generation).
        self.known: dict[str, list[tuple[str, str | None, int]]] = {g: [] for g in GROUPS}

    def _remember(self, group: str, reply_value: object, instance: str | None) -> None:
        result = reply_value
        member_id = getattr(result, "member_id", "")
        if member_id:
            self.known[group].append((member_id, instance, getattr(result, "generation_id", -1)))
            self.known[group] = self.known[group][-8:]

    @rule(group=st.sampled_from(GROUPS), instance=st.sampled_from(INSTANCES),
          protocols=st.sampled_from(PROTOCOLS), version=st.sampled_from([3, 5, 7, 9]),
          session=st.sampled_from([50, 200, 1000]), reuse=st.booleans(), pick=st.integers(0, 7))
    def join(self, group: str, instance: str | None, protocols: tuple[tuple[str, bytes], ...], version: int,
             session: int, reuse: bool, pick: int) -> None:
        member_id = ""
        if reuse and self.known[group]:
            member_id, instance, _ = self.known[group][pick % len(self.known[group])]
        if version < 5:
            instance = None
        reply = self.h.join(group, member_id=member_id, instance=instance, protocols=protocols,
                            version=version, session_ms=session, rebalance_ms=session * 3)
        if reply.done:
            self._remember(group, reply.value, instance)
            if reply.value.error is Errors.MEMBER_ID_REQUIRED and pick % 2 == 0:
                second = self.h.join(group, member_id=reply.value.member_id, protocols=protocols,
                                     version=version, session_ms=session, rebalance_ms=session * 3)
                if second.done:
                    self._remember(group, second.value, None)

    @rule(group=st.sampled_from(GROUPS), pick=st.integers(0, 7), as_leader=st.booleans())
    def sync(self, group: str, pick: int, as_leader: bool) -> None:
        if not self.known[group]:
            return
        member_id, instance, generation = self.known[group][pick % len(self.known[group])]
        g = self.h.coordinator.classic_group(group)
        assignments = None
        if as_leader and g is not None:
            generation = g.generation_id
            assignments = {m: b"x" for m in g.members}
        self.h.sync(group, member_id, generation, assignments, instance=instance)

    @rule(group=st.sampled_from(GROUPS), pick=st.integers(0, 7))
    def heartbeat(self, group: str, pick: int) -> None:
        if self.known[group]:
            member_id, instance, _ = self.known[group][pick % len(self.known[group])]
            g = self.h.coordinator.classic_group(group)
            self.h.heartbeat(group, member_id, g.generation_id if g else 0, instance=instance)

    @rule(group=st.sampled_from(GROUPS), pick=st.integers(0, 7), by_instance=st.booleans())
    def leave(self, group: str, pick: int, by_instance: bool) -> None:
        if self.known[group]:
            member_id, instance, _ = self.known[group][pick % len(self.known[group])]
            self.h.leave(group, ("" if by_instance and instance else member_id, instance))

    @rule(group=st.sampled_from(GROUPS), pick=st.integers(0, 7), offset=st.integers(0, 100))
    def commit(self, group: str, pick: int, offset: int) -> None:
        member_id, instance, generation = ("", None, -1)
        if self.known[group] and pick % 3:
            member_id, instance, generation = self.known[group][pick % len(self.known[group])]
        self.h.commit(group, {("t", pick % 2): offset}, generation, member_id, instance)

    @rule(ms=st.sampled_from([0, 1, 10, 50, 100, 300, 1000, 700_000]))
    def sleep(self, ms: int) -> None:
        self.h.sleep(ms)

    @rule(fail=st.booleans())
    def storage(self, fail: bool) -> None:
        self.h.fail_appends(Errors.KAFKA_STORAGE_ERROR if fail else None)  # type: ignore[arg-type]

    @rule(hold=st.booleans())
    def writes_in_flight(self, hold: bool) -> None:
        # Other requests and timers run while earlier writes are still on their way to the disk.
        if hold:
            self.h.hold_appends()
        else:
            self.h.release_appends(self.h.failing or Errors.NONE)

    @invariant()
    def bookkeeping_is_consistent(self) -> None:
        for group in self.h.coordinator.groups.values():
            members = group.members
            assert group.state is not DEAD, "a Dead group stays in the coordinator's map"
            for instance_id, member_id in group.static_members.items():
                assert member_id in members, f"{group.group_id}: instance {instance_id} maps to absent {member_id}"
                assert members[member_id].group_instance_id == instance_id
            for member in members.values():
                if member.group_instance_id is not None:
                    assert group.static_members.get(member.group_instance_id) == member.member_id
            assert group.num_members_awaiting_join == sum(m.awaiting_join is not None for m in members.values())
            assert (group.leader_id is None) == (not members), f"{group.group_id}: leader {group.leader_id}"
            assert group.leader_id is None or group.leader_id in members
            assert not (group.pending_members.keys() & set(members))
            assert group.pending_sync_members <= set(members)
            if group.state is EMPTY:
                assert not members and not group.static_members
            if group.state is STABLE:
                assert members and group.protocol_name is not None
            expected = {}
            for member in members.values():
                for name, _ in member.supported_protocols:
                    expected[name] = expected.get(name, 0) + 1
            assert dict(group.supported_protocols) == expected


GroupCoreMachine.TestCase.settings = settings(
    max_examples=500, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestGroupCore = GroupCoreMachine.TestCase
