"""The classic group protocol against the real server: members on their own connections speaking raw
JoinGroup/SyncGroup/Heartbeat/LeaveGroup, with small timeouts."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from .conftest import ServerProcess
from .group_client import (
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    Connection,
    GroupMember,
    close_all,
    join_all,
    rebalance,
    sync_all,
    wait_until,
)

pytestmark = pytest.mark.integration

MIN_SESSION_MS = 100
MAX_SESSION_MS = 30_000
INITIAL_DELAY_MS = 200

MemberFactory = Callable[..., GroupMember]


@pytest.fixture
def srv(server_factory: Any) -> ServerProcess:
    server: ServerProcess = server_factory(
        initial_rebalance_delay_ms=INITIAL_DELAY_MS, min_session_timeout_ms=MIN_SESSION_MS,
        max_session_timeout_ms=MAX_SESSION_MS,
    )
    return server


@pytest.fixture
def member(srv: ServerProcess) -> Iterator[MemberFactory]:
    made: list[GroupMember] = []

    def factory(client_id: str, group_id: str = "grp", **kwargs: Any) -> GroupMember:
        kwargs.setdefault("rebalance_timeout_ms", 3000)
        m = GroupMember(srv, group_id, client_id, **kwargs)
        made.append(m)
        return m

    yield factory
    close_all(made)


def stable_group(member: MemberFactory, names: list[str], **kwargs: Any) -> list[GroupMember]:
    members = [member(n, **kwargs) for n in names]
    _, syncs = rebalance(members)
    assert all(s.error_code == NONE for s in syncs), syncs
    return members


def assert_one_generation(members: list[GroupMember], joins: list[Any]) -> None:
    assert {j.error_code for j in joins} == {NONE}
    assert len({j.generation_id for j in joins}) == 1
    assert len({j.leader for j in joins}) == 1
    leader = joins[0].leader
    assert leader in {m.member_id for m in members}
    for m, j in zip(members, joins, strict=True):
        if m.member_id == leader:
            assert sorted((x.member_id, x.metadata) for x in j.members) == sorted(
                (x.member_id, x.client_id.encode()) for x in members)
        else:
            assert j.members == []


def heartbeats_until(members: list[GroupMember], code: int, timeout_s: float = 10.0) -> None:
    """Every member heartbeats (as a live client would) until each has seen `code`."""
    seen: set[int] = set()

    def all_seen() -> bool:
        for m in members:
            if id(m) not in seen and m.heartbeat() == code:
                seen.add(id(m))
        return len(seen) == len(members)

    wait_until(all_seen, timeout_s, interval_s=0.1, what=f"heartbeats answering {code}")


# ------------------------------------------------------------------------------------ joining


def test_three_members_join_one_generation_leader_gets_member_list(member: MemberFactory) -> None:
    a, b, c = (member(n) for n in ("a", "b", "c"))
    joins = join_all([a, b, c])
    assert_one_generation([a, b, c], joins)
    assert joins[0].generation_id == 1
    assert {j.protocol_name for j in joins} == {"range"}
    leader = next(m for m in (a, b, c) if m.is_leader)
    followers = [m for m in (a, b, c) if m is not leader]

    # Followers that sync before the leader wait for the leader's assignment.
    parked = [f.send_sync() for f in followers]
    assert not any(p.answered_within(0.2) for p in parked)
    plan = {m.member_id: f"plan-for-{m.client_id}".encode() for m in (a, b, c)}
    lead = leader.sync(plan)
    for m, resp in [(leader, lead), *((f, p.result()) for f, p in zip(followers, parked, strict=True))]:
        assert (resp.error_code, resp.assignment) == (NONE, plan[m.member_id])
        assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")
    assert [m.heartbeat() for m in (a, b, c)] == [NONE] * 3


def test_leader_assignment_missing_members_get_empty_assignment(member: MemberFactory) -> None:
    a, b = member("a"), member("b")
    join_all([a, b])
    leader, follower = (a, b) if a.is_leader else (b, a)
    parked = follower.send_sync()
    assert leader.sync({leader.member_id: b"mine", "not-a-member": b"ignored"}).assignment == b"mine"
    assert (parked.result().error_code, parked.result().assignment) == (NONE, b"")


@pytest.mark.parametrize("version", [4, 5, 6, 7, 8, 9])
def test_member_id_required_round_trip_from_v4(member: MemberFactory, version: int) -> None:
    m = member("client-x")
    first = m.conn.call(m.join_request(version), JoinGroupResponse)
    assert first.error_code == MEMBER_ID_REQUIRED
    prefix, suffix = first.member_id[:-37], first.member_id[-36:]
    assert prefix == "client-x" and first.member_id[-37] == "-" and uuid.UUID(suffix)
    assert (first.generation_id, first.leader, first.members) == (-1, "", [])
    assert first.protocol_name == (None if version >= 7 else "")
    if version >= 7:
        assert first.protocol_type is None
    # A pending member is not a member yet.
    assert m.heartbeat(generation_id=-1, member_id=first.member_id) == UNKNOWN_MEMBER_ID
    pending_sync = m.conn.call(m.sync_request(3, member_id=first.member_id, generation_id=0), SyncGroupResponse)
    assert pending_sync.error_code == UNKNOWN_MEMBER_ID
    m.member_id = first.member_id
    joined = m.join(version)
    assert (joined.error_code, joined.member_id, joined.leader, joined.generation_id) == (
        NONE, first.member_id, first.member_id, 1)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_v0_to_v3_join_directly_without_member_id_required(member: MemberFactory, version: int) -> None:
    m = member("old-client")
    joined = m.join(version)
    assert joined.error_code == NONE
    assert joined.member_id.startswith("old-client-")
    assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, joined.member_id, "range")


def test_new_member_joining_stable_group_triggers_rebalance(member: MemberFactory) -> None:
    a, b = stable_group(member, ["a", "b"])
    generation = a.generation_id
    c = member("c")
    parked = c.send_join()
    assert not parked.answered_within(0.3), "the new member's join must wait for the others to rejoin"
    heartbeats_until([a, b], REBALANCE_IN_PROGRESS)
    joins = [*join_all([a, b]), parked.result()]
    assert_one_generation([a, b, c], joins)
    assert joins[0].generation_id == generation + 1
    assert all(s.error_code == NONE for s in sync_all([a, b, c]))
    assert [m.heartbeat() for m in (a, b, c)] == [NONE] * 3


def test_follower_rejoin_with_same_metadata_answers_current_generation(member: MemberFactory) -> None:
    a, b = stable_group(member, ["a", "b"])
    follower = a if not a.is_leader else b
    generation = follower.generation_id
    again = follower.join()
    assert (again.error_code, again.generation_id, again.members) == (NONE, generation, [])
    assert [m.heartbeat() for m in (a, b)] == [NONE, NONE]


# ------------------------------------------------------------------------------------ leaving


@pytest.mark.parametrize("leave_version", [0, 1, 2, 3, 4, 5])
def test_member_leaving_makes_others_rebalance_without_it(member: MemberFactory, leave_version: int) -> None:
    a, b, c = stable_group(member, ["a", "b", "c"])
    generation = a.generation_id
    leaver = c if not c.is_leader else a
    stay = [m for m in (a, b, c) if m is not leaver]
    resp = leaver.leave(leave_version)
    assert resp.error_code == NONE
    if leave_version >= 3:
        assert [(r.member_id, r.group_instance_id, r.error_code) for r in resp.members] == [
            (leaver.member_id, None, NONE)]
    heartbeats_until(stay, REBALANCE_IN_PROGRESS)
    joins = join_all(stay)
    assert_one_generation(stay, joins)
    assert joins[0].generation_id == generation + 1
    leader = next(m for m in stay if m.is_leader)
    assert leaver.member_id not in {x.member_id for x in joins[stay.index(leader)].members}
    assert all(s.error_code == NONE for s in sync_all(stay))
    assert leaver.heartbeat(generation_id=generation + 1) == UNKNOWN_MEMBER_ID


def test_leader_leaving_hands_leadership_to_a_remaining_member(member: MemberFactory) -> None:
    a, b, c = stable_group(member, ["a", "b", "c"])
    leader = next(m for m in (a, b, c) if m.is_leader)
    stay = [m for m in (a, b, c) if m is not leader]
    assert leader.leave(3).error_code == NONE
    heartbeats_until(stay, REBALANCE_IN_PROGRESS)
    joins = join_all(stay)
    assert_one_generation(stay, joins)
    assert joins[0].leader != leader.member_id
    assert all(s.error_code == NONE for s in sync_all(stay))


def test_last_member_leaving_empties_group_and_next_generation_skips_one(member: MemberFactory) -> None:
    a = stable_group(member, ["a"])[0]
    assert a.generation_id == 1
    assert a.leave(3).error_code == NONE
    # Stable gen 1 -> (rebalance with nobody) -> Empty gen 2: a new member starts generation 3.
    b = member("b")
    assert b.join().generation_id == 3
    assert a.heartbeat(generation_id=1) == UNKNOWN_MEMBER_ID


def test_silent_member_removed_at_session_timeout(srv: ServerProcess, member: MemberFactory) -> None:
    a, b = member("a"), member("b")
    silent = member("silent", session_timeout_ms=1000)
    rebalance([a, b, silent])
    synced_at = time.monotonic()
    generation = a.generation_id
    heartbeats_until([a, b], REBALANCE_IN_PROGRESS, timeout_s=8)
    removed_after_s = time.monotonic() - synced_at
    event = srv.wait_for_event("member_removed", member_id=silent.member_id)
    assert event["reason"] == "session timeout"
    assert removed_after_s >= 0.9, "removed before its session timeout"
    joins = join_all([a, b])
    assert_one_generation([a, b], joins)
    assert joins[0].generation_id == generation + 1
    assert all(s.error_code == NONE for s in sync_all([a, b]))
    assert silent.heartbeat() == UNKNOWN_MEMBER_ID


def heartbeat_window(members: list[GroupMember], session_s: float, span_s: float, since: float) -> bool:
    """Heartbeat every 150 ms for `span_s` and assert each member stays alive while it kept its side of the
    contract. A member's deadline is reset no earlier than the moment its previous heartbeat (or, for the first,
    the rebalance at `since`) was sent, and its next heartbeat reaches the server no later than the answer comes
    back; so while answer minus previous send is under the session, expiry would be a server bug. A longer gap
    (this process or the machine stalled) lets the server expire the member rightly: return False, unchecked."""
    last_sent = {id(m): since for m in members}
    end = time.monotonic() + span_s
    while time.monotonic() < end:
        for m in members:
            sent = time.monotonic()
            code = m.heartbeat()
            if time.monotonic() - last_sent[id(m)] >= session_s:
                return False
            assert code == NONE, (m.client_id, code)
            last_sent[id(m)] = sent
        time.sleep(0.15)
    return True


def test_heartbeats_keep_short_session_member_alive(member: MemberFactory) -> None:
    for attempt in range(5):
        group = [member(n, group_id=f"short-{attempt}", session_timeout_ms=600) for n in ("a", "short")]
        since = time.monotonic()
        _, syncs = rebalance(group)
        if any(s.error_code != NONE for s in syncs):
            # Only a stall between JoinGroup's answer and SyncGroup may cost the session here.
            assert time.monotonic() - since >= 0.6, syncs
            continue
        if heartbeat_window(group, 0.6, 1.5, since):  # 1.5 s: well past the session timeout
            return
    pytest.fail("the test process never kept a heartbeat gap under the 600 ms session in 5 tries")


# ---------------------------------------------------------------------------------- static members


@pytest.mark.parametrize(("restarted", "version"), [("follower", 5), ("leader", 5), ("leader", 9)])
def test_static_member_restart_keeps_assignment_without_rebalance(
    member: MemberFactory, restarted: str, version: int
) -> None:
    static = member("static", group_instance_id="instance-1", session_timeout_ms=3000)
    dynamic = member("dynamic")
    # The first member added leads; the static member is added on its first JoinGroup (no 79 step).
    first, second = (static, dynamic) if restarted == "leader" else (dynamic, static)
    p1 = first.send_join()
    assert not p1.answered_within(0.05)  # parked, and added before the second member
    p2 = second.send_join()
    joins = [p1.result(), p2.result()]
    assert_one_generation([first, second], joins)
    assert static.is_leader == (restarted == "leader")
    plan = {static.member_id: b"static-partitions", dynamic.member_id: b"dynamic-partitions"}
    sync_all([static, dynamic], plan)
    generation, old_id, old_leader = static.generation_id, static.member_id, static.leader
    assert static.assignment == b"static-partitions"

    # The process restarts: new connection, no member id, same instance id.
    static.close()
    reborn = member("static", group_instance_id="instance-1", session_timeout_ms=3000)
    joined = reborn.join(version)
    assert joined.error_code == NONE
    assert joined.member_id != old_id and joined.member_id.startswith("instance-1-")
    assert joined.generation_id == generation
    if restarted == "leader" and version >= 9:
        assert (joined.leader, joined.skip_assignment) == (joined.member_id, True)
        assert sorted(m.member_id for m in joined.members) == sorted([joined.member_id, dynamic.member_id])
    else:
        # v5-8 leaders are told the old leader id, so they don't run the assignor.
        assert joined.leader == old_leader and joined.members == []
        if version >= 9:
            assert joined.skip_assignment is False
    resynced = reborn.sync()  # Stable: the stored assignment comes straight back
    assert (resynced.error_code, resynced.assignment) == (NONE, b"static-partitions")
    assert dynamic.heartbeat() == NONE  # no rebalance
    assert reborn.heartbeat() == NONE
    assert dynamic.sync().assignment == b"dynamic-partitions"
    # The old incarnation is fenced.
    assert reborn.heartbeat(member_id=old_id) == FENCED_INSTANCE_ID
    assert reborn.conn.call(reborn.sync_request(3, member_id=old_id), SyncGroupResponse).error_code == \
        FENCED_INSTANCE_ID


def test_static_member_admin_leave_by_instance_id(member: MemberFactory) -> None:
    static, dynamic = member("s", group_instance_id="inst-s"), member("d")
    rebalance([static, dynamic])
    conn = dynamic.hb_conn
    resp = conn.call(LeaveGroupRequest[3](group_id="grp", members=[
        LeaveGroupRequest.MemberIdentity(member_id="wrong-id", group_instance_id="inst-s"),
        LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="inst-s"),
        LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="no-such-instance"),
        LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="inst-s"),
    ]), LeaveGroupResponse)
    assert resp.error_code == NONE
    # Results in request order: a wrong member id for a mapped instance is fenced; the admin form
    # (member id "") removes by instance id; an unknown (or just removed) instance is unknown.
    assert [(r.member_id, r.group_instance_id, r.error_code) for r in resp.members] == [
        ("wrong-id", "inst-s", FENCED_INSTANCE_ID), ("", "inst-s", NONE),
        ("", "no-such-instance", UNKNOWN_MEMBER_ID), ("", "inst-s", UNKNOWN_MEMBER_ID)]
    assert dynamic.heartbeat() == REBALANCE_IN_PROGRESS


# ---------------------------------------------------------------------------------- invalid input


def test_empty_group_id_is_invalid_group_id(srv: ServerProcess) -> None:
    conn = Connection((srv.host, srv.port), "bad")
    try:
        join = JoinGroupRequest[5](group_id="", session_timeout_ms=1000, rebalance_timeout_ms=1000, member_id="",
                                   group_instance_id=None, protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="r", metadata=b"")])
        assert conn.call(join, JoinGroupResponse).error_code == INVALID_GROUP_ID
        sync = SyncGroupRequest[3](group_id="", generation_id=1, member_id="m", group_instance_id=None,
                                   assignments=[])
        assert conn.call(sync, SyncGroupResponse).error_code == INVALID_GROUP_ID
        hb = HeartbeatRequest[2](group_id="", generation_id=1, member_id="m")
        assert conn.call(hb, HeartbeatResponse).error_code == INVALID_GROUP_ID
        leave0 = conn.call(LeaveGroupRequest[0](group_id="", member_id="m"), LeaveGroupResponse)
        assert leave0.error_code == INVALID_GROUP_ID
        leave3 = conn.call(LeaveGroupRequest[3](group_id="", members=[
            LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None)]), LeaveGroupResponse)
        assert (leave3.error_code, leave3.members) == (INVALID_GROUP_ID, [])
    finally:
        conn.close()


@pytest.mark.parametrize(("session_ms", "error"), [
    (MIN_SESSION_MS - 1, INVALID_SESSION_TIMEOUT),
    (MIN_SESSION_MS, MEMBER_ID_REQUIRED),
    (MAX_SESSION_MS, MEMBER_ID_REQUIRED),
    (MAX_SESSION_MS + 1, INVALID_SESSION_TIMEOUT),
])
def test_session_timeout_must_be_within_configured_bounds(member: MemberFactory, session_ms: int, error: int) -> None:
    m = member("s", session_timeout_ms=session_ms)
    resp = m.conn.call(m.join_request(5), JoinGroupResponse)
    assert resp.error_code == error
    if error == INVALID_SESSION_TIMEOUT:
        assert resp.member_id == ""
        # A known member id is echoed back.
        again = m.conn.call(m.join_request(5, member_id="someone"), JoinGroupResponse)
        assert (again.error_code, again.member_id) == (INVALID_SESSION_TIMEOUT, "someone")


def test_stale_generation_is_illegal_generation(member: MemberFactory) -> None:
    a, b = stable_group(member, ["a", "b"])
    stale = a.generation_id - 1
    assert a.heartbeat(generation_id=stale) == ILLEGAL_GENERATION
    assert a.heartbeat(generation_id=a.generation_id + 1) == ILLEGAL_GENERATION
    assert a.sync(generation_id=stale).error_code == ILLEGAL_GENERATION
    # Generation is checked before the state: still 22 while a rebalance is in progress.
    c = member("c")
    parked = c.send_join()
    wait_until(lambda: b.heartbeat() == REBALANCE_IN_PROGRESS, what="rebalance started")
    assert b.heartbeat(generation_id=stale) == ILLEGAL_GENERATION
    assert b.sync(generation_id=stale).error_code == ILLEGAL_GENERATION
    assert b.sync().error_code == REBALANCE_IN_PROGRESS
    join_all([a, b])
    assert parked.result().error_code == NONE


def test_unknown_member_is_unknown_member_id(member: MemberFactory) -> None:
    a, = stable_group(member, ["a"])
    assert a.heartbeat(member_id="nobody") == UNKNOWN_MEMBER_ID
    assert a.sync(member_id="nobody").error_code == UNKNOWN_MEMBER_ID
    # JoinGroup with an id the group does not know (existing group, and a group that does not exist).
    stranger = member("stranger")
    assert stranger.join(member_id="nobody").error_code == UNKNOWN_MEMBER_ID
    lost = member("lost", group_id="no-such-group")
    resp = lost.conn.call(lost.join_request(5, member_id="nobody"), JoinGroupResponse)
    assert (resp.error_code, resp.member_id, resp.generation_id) == (UNKNOWN_MEMBER_ID, "nobody", -1)
    assert lost.heartbeat(member_id="nobody", generation_id=1) == UNKNOWN_MEMBER_ID
    assert lost.sync(member_id="nobody", generation_id=1).error_code == UNKNOWN_MEMBER_ID
    # LeaveGroup: per member for v3+, folded into the top-level error for v0-2.
    leave3 = a.hb_conn.call(LeaveGroupRequest[3](group_id="grp", members=[
        LeaveGroupRequest.MemberIdentity(member_id="nobody", group_instance_id=None)]), LeaveGroupResponse)
    assert leave3.error_code == NONE
    assert [(r.member_id, r.error_code) for r in leave3.members] == [("nobody", UNKNOWN_MEMBER_ID)]
    for version in (0, 1, 2):
        folded = a.hb_conn.call(LeaveGroupRequest[version](group_id="grp", member_id="nobody"), LeaveGroupResponse)
        assert folded.error_code == UNKNOWN_MEMBER_ID
    assert a.heartbeat() == NONE  # the real member is untouched


# ------------------------------------------------------------------------------ response layouts


def test_join_group_response_layout_per_version(member: MemberFactory) -> None:
    # One group per version, all joining at once (each waits out the initial rebalance delay).
    members = [member(f"v{version}", group_id=f"layout-{version}") for version in range(10)]
    pendings = [m.send_join(version) for version, m in enumerate(members)]
    for version, (m, pending) in enumerate(zip(members, pendings, strict=True)):
        resp = pending.result()
        assert (resp.error_code, resp.generation_id, resp.protocol_name) == (NONE, 1, "range"), version
        assert [(x.member_id, x.metadata) for x in resp.members] == [(m.member_id, m.client_id.encode())]
        assert resp.protocol_type == ("consumer" if version >= 7 else None), version
        if version >= 9:
            assert resp.skip_assignment is False
        if version >= 5:
            assert resp.members[0].group_instance_id is None


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_sync_group_response_layout_per_version(member: MemberFactory, version: int) -> None:
    m = member("m")
    m.join()
    resp = m.sync({m.member_id: b"assigned"}, version=version)
    assert (resp.error_code, resp.assignment) == (NONE, b"assigned")
    if version >= 5:
        assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")
    else:
        assert (resp.protocol_type, resp.protocol_name) == (None, None)
    if version >= 1:
        assert resp.throttle_time_ms == 0
    # Errors carry no protocol fields and an empty assignment.
    bad = m.sync(version=version, generation_id=99)
    assert (bad.error_code, bad.assignment) == (ILLEGAL_GENERATION, b"")
    if version >= 5:
        assert (bad.protocol_type, bad.protocol_name) == (None, None)
        mismatch = m.sync(version=5, protocol_name="roundrobin")
        assert mismatch.error_code == 23  # INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_heartbeat_every_version_answers_none(member: MemberFactory, version: int) -> None:
    m, = stable_group(member, ["m"])
    assert m.heartbeat(version) == NONE


def test_leave_group_v0_folds_member_error_into_top_level(member: MemberFactory) -> None:
    a, b = stable_group(member, ["a", "b"])
    assert a.leave(0).error_code == NONE
    assert a.leave(0).error_code == UNKNOWN_MEMBER_ID  # already gone
    batch = b.hb_conn.call(LeaveGroupRequest[4](group_id="grp", members=[
        LeaveGroupRequest.MemberIdentity(member_id=a.member_id, group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id=b.member_id, group_instance_id=None),
    ]), LeaveGroupResponse)
    assert batch.error_code == NONE
    assert [(r.member_id, r.error_code) for r in batch.members] == [
        (a.member_id, UNKNOWN_MEMBER_ID), (b.member_id, NONE)]
