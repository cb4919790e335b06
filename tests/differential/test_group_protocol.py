"""The classic group protocol, the same requests to Kafka and to the server: a group's whole life, then one
scenario per error a member can be answered."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest
from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse

from tests.differential.harness import Run, scenario
from tests.differential.steps import (
    UNKNOWN_MEMBER,
    await_rebalance,
    call,
    commit,
    describe,
    heartbeat,
    join_new,
    join_without_id,
    leave,
    member,
)
from tests.integration.group_client import GroupMember, close_all


class Versions(NamedTuple):
    join: int
    sync: int
    heartbeat: int
    leave: int
    describe: int


def _lifecycle(run: Run, v: Versions) -> None:
    """One member, a second joins (the first learns of it by heartbeat and rejoins), the second leaves, the
    first rebalances alone, then leaves; the group described at each state."""
    a, b = member(run, "client-a"), member(run, "client-b")
    try:
        join_new(run, a, "a", v.join)
        run.record("a: sync", a.sync({a.member_id: b"assignment-a1"}, version=v.sync))
        heartbeat(run, a, "a: heartbeat, stable", v.heartbeat)
        describe(run, "describe, one member", [a.group_id], v.describe)

        if v.join >= 4:
            join_without_id(run, b, "b: join without id", v.join)
        pending_b = b.send_join(v.join, member_id_required=False)
        await_rebalance(run, a, "a: heartbeat, b joining", v.heartbeat)
        describe(run, "describe, preparing rebalance", [a.group_id], v.describe)
        pending_a = a.send_join(v.join, member_id_required=False)
        run.record("a: rejoin", pending_a.result())
        run.record("b: join", pending_b.result())
        pending_sync_b = b.send_sync(version=v.sync)
        run.record("a: sync, leader", a.sync({a.member_id: b"assignment-a2", b.member_id: b"assignment-b2"},
                                             version=v.sync))
        run.record("b: sync, follower", pending_sync_b.result())
        heartbeat(run, a, "a: heartbeat, two members", v.heartbeat)
        heartbeat(run, b, "b: heartbeat, two members", v.heartbeat)
        describe(run, "describe, two members", [a.group_id], v.describe)

        leave(run, b, "b: leave", v.leave)
        await_rebalance(run, a, "a: heartbeat, b gone", v.heartbeat)
        run.record("a: rejoin alone", a.join(v.join, member_id_required=False))
        run.record("a: sync alone", a.sync({a.member_id: b"assignment-a3"}, version=v.sync))
        leave(run, a, "a: leave", v.leave)
        describe(run, "describe, empty", [a.group_id], v.describe)
        heartbeat(run, a, "a: heartbeat after leaving", v.heartbeat)
    finally:
        close_all([a, b])


LIFECYCLES = {
    "group-lifecycle-newest": Versions(join=9, sync=5, heartbeat=4, leave=5, describe=5),
    "group-lifecycle-v5": Versions(join=5, sync=3, heartbeat=3, leave=3, describe=3),
    "group-lifecycle-old": Versions(join=2, sync=1, heartbeat=1, leave=1, describe=1),
}
for _name, _versions in LIFECYCLES.items():
    scenario(_name)(lambda run, v=_versions: _lifecycle(run, v))


@pytest.mark.parametrize("name", LIFECYCLES)
def test_group_lifecycle(differential: Callable[[str], None], name: str) -> None:
    differential(name)


def _stable(run: Run, client_id: str = "client-a", version: int = 5) -> GroupMember:
    a = member(run, client_id)
    join_new(run, a, client_id, version)
    run.record(f"{client_id}: sync", a.sync({a.member_id: b"assignment"}, version=3))
    return a


@scenario("unknown-member")
def unknown_member(run: Run) -> None:
    a = _stable(run)
    try:
        heartbeat(run, a, "heartbeat, unknown member", member_id=UNKNOWN_MEMBER)
        heartbeat(run, a, "heartbeat, unknown group", group_id=run.group("nobody"))
        run.record("sync, unknown member", a.sync({}, version=5, member_id=UNKNOWN_MEMBER))
        run.record("sync, unknown group", a.sync({}, version=5, group_id=run.group("nobody")))
        run.record("join, unknown member id", a.join(5, member_id_required=False, member_id=UNKNOWN_MEMBER))
        leave(run, a, "leave v5, unknown member", 5, member_id=UNKNOWN_MEMBER)
        leave(run, a, "leave v1, unknown member", 1, member_id=UNKNOWN_MEMBER)
        commit(run, "commit, unknown member", 8, a.group_id, "t", {0: 1}, generation=a.generation_id,
               member_id=UNKNOWN_MEMBER)
        heartbeat(run, a, "heartbeat, still a member")
    finally:
        a.close()


@pytest.mark.parametrize("name", ["unknown-member"])
def test_unknown_member(differential: Callable[[str], None], name: str) -> None:
    differential(name)


@scenario("illegal-generation")
def illegal_generation(run: Run) -> None:
    a = _stable(run)
    try:
        heartbeat(run, a, "heartbeat, generation + 1", generation_id=a.generation_id + 1)
        heartbeat(run, a, "heartbeat, generation 0", generation_id=0)
        heartbeat(run, a, "heartbeat v0, generation - 1", version=0, generation_id=a.generation_id - 1)
        run.record("sync, generation + 1", a.sync({}, version=5, generation_id=a.generation_id + 1))
        commit(run, "commit, generation + 1", 8, a.group_id, "t", {0: 1}, generation=a.generation_id + 1,
               member_id=a.member_id)
        commit(run, "commit v2, generation + 1", 2, a.group_id, "t", {0: 1}, generation=a.generation_id + 1,
               member_id=a.member_id)
        commit(run, "commit v8, standalone into a live group", 8, a.group_id, "t", {0: 1})
        commit(run, "commit v8, no member id, right generation", 8, a.group_id, "t", {0: 1},
               generation=a.generation_id)
        commit(run, "commit v8, member id, generation -1", 8, a.group_id, "t", {0: 1}, member_id=a.member_id)
        heartbeat(run, a, "heartbeat, right generation")
    finally:
        a.close()


def test_illegal_generation(differential: Callable[[str], None]) -> None:
    differential("illegal-generation")


@scenario("invalid-session-timeout")
def invalid_session_timeout(run: Run) -> None:
    low, high = member(run, "client-low", session_timeout_ms=5_999), member(run, "client-high",
                                                                            session_timeout_ms=1_800_001)
    try:
        run.record("join v5 without id, below the minimum", low.join(5, member_id_required=False))
        run.record("join v3, below the minimum", low.join(3, member_id_required=False))
        run.record("join v5 without id, above the maximum", high.join(5, member_id_required=False))
        run.record("join v9, above the maximum", high.join(9, member_id_required=False))
    finally:
        close_all([low, high])


def test_invalid_session_timeout(differential: Callable[[str], None]) -> None:
    differential("invalid-session-timeout")


@scenario("inconsistent-protocol")
def inconsistent_protocol(run: Run) -> None:
    a = _stable(run)
    others = [member(run, "client-rr", protocol_names=("roundrobin",)),
              member(run, "client-connect", protocol_type="connect"),
              member(run, "client-none", protocol_names=()),
              member(run, "client-empty-type", group="fresh", protocol_type="")]
    rr, connect, none, empty_type = others
    try:
        run.record("join v3, other assignor", rr.join(3, member_id_required=False))
        run.record("join v5 without id, other assignor", rr.join(5, member_id_required=False))
        run.record("join v3, other protocol type", connect.join(3, member_id_required=False))
        run.record("join v3, no protocols", none.join(3, member_id_required=False))
        run.record("join v3 new group, empty protocol type", empty_type.join(3, member_id_required=False))
        run.record("sync, other protocol type", a.sync({}, version=5, protocol_type="connect"))
        run.record("sync, other protocol name", a.sync({}, version=5, protocol_name="roundrobin"))
        heartbeat(run, a, "heartbeat, group unchanged")
        describe(run, "describe", [a.group_id, empty_type.group_id])
    finally:
        close_all([a, *others])


def test_inconsistent_protocol(differential: Callable[[str], None]) -> None:
    differential("inconsistent-protocol")


@scenario("member-id-required")
def member_id_required(run: Run) -> None:
    dynamic = member(run, "client-a")
    static = member(run, "client-s", group="static", group_instance_id="instance-1")
    old = member(run, "client-old", group="old")
    try:
        join_new(run, dynamic, "dynamic v4", 4)
        run.record("static v5: join without id", static.join(5, member_id_required=False))
        run.record("old v3: join without id", old.join(3, member_id_required=False))
        describe(run, "describe", [dynamic.group_id, static.group_id, old.group_id])
    finally:
        close_all([dynamic, static, old])


def test_member_id_required(differential: Callable[[str], None]) -> None:
    differential("member-id-required")


@scenario("rebalance-in-progress")
def rebalance_in_progress(run: Run) -> None:
    a, b = _stable(run), member(run, "client-b")
    try:
        join_without_id(run, b, "b: join without id")
        pending_b = b.send_join(5, member_id_required=False)
        await_rebalance(run, a, "a: heartbeat, b joining")
        run.record("a: sync of the old generation while rebalancing", a.sync({a.member_id: b"x"}, version=5))
        commit(run, "a: commit of the old generation while rebalancing", 8, a.group_id, "t", {0: 1},
               generation=a.generation_id, member_id=a.member_id, conn=a.hb_conn)
        run.record("a: rejoin", a.join(5, member_id_required=False))
        run.record("b: join", pending_b.result())
        heartbeat(run, a, "a: heartbeat, awaiting sync")
        commit(run, "a: commit while awaiting sync", 8, a.group_id, "t", {0: 1}, generation=a.generation_id,
               member_id=a.member_id, conn=a.hb_conn)
        describe(run, "describe, awaiting sync", [a.group_id])
        pending_sync_b = b.send_sync(version=5)
        run.record("a: sync", a.sync({a.member_id: b"a", b.member_id: b"b"}, version=5))
        run.record("b: sync", pending_sync_b.result())
    finally:
        close_all([a, b])


def test_rebalance_in_progress(differential: Callable[[str], None]) -> None:
    differential("rebalance-in-progress")


@scenario("static-membership")
def static_membership(run: Run) -> None:
    """A static member (group.instance.id) restarts: its rejoin with no member id gets a new id and the old
    id is fenced; a second instance id joins and both leave in one batched LeaveGroup."""
    first = member(run, "client-s", group_instance_id="instance-1")
    restarted = member(run, "client-s", group_instance_id="instance-1")
    other = member(run, "client-t", group_instance_id="instance-2")
    try:
        run.record("s: join", first.join(5, member_id_required=False))
        run.record("s: sync", first.sync({first.member_id: b"s1"}, version=5))
        run.record("s restarted: join", restarted.join(5, member_id_required=False))
        heartbeat(run, first, "old id: heartbeat")
        heartbeat(run, restarted, "new id: heartbeat")
        heartbeat(run, restarted, "new id, other instance id: heartbeat", group_instance_id="instance-9")
        run.record("old id: sync", first.sync({}, version=5))
        pending_other = other.send_join(5, member_id_required=False)
        await_rebalance(run, restarted, "new id: heartbeat, t joining")
        run.record("s: rejoin", restarted.join(5, member_id_required=False))
        run.record("t: join", pending_other.result())
        describe(run, "describe", [restarted.group_id])
        run.record("leave both and an unknown instance", restarted.hb_conn.call(
            LeaveGroupRequest[5](group_id=restarted.group_id, members=[
                LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="instance-1", reason="r"),
                LeaveGroupRequest.MemberIdentity(member_id=other.member_id, group_instance_id="instance-2",
                                                 reason="r"),
                LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="instance-3", reason="r")]),
            LeaveGroupResponse))
        describe(run, "describe, after leaving", [restarted.group_id])
    finally:
        close_all([first, restarted, other])


def test_static_membership(differential: Callable[[str], None]) -> None:
    differential("static-membership")


@scenario("delete-groups")
def delete_groups(run: Run) -> None:
    a = _stable(run)
    gone = member(run, "client-b", group="empty")
    try:
        join_new(run, gone, "b")
        run.record("b: sync", gone.sync({gone.member_id: b"b"}, version=5))
        leave(run, gone, "b: leave")
        for version in (0, 2):
            call(run, f"delete v{version}", DeleteGroupsRequest[version](
                groups_names=[a.group_id, run.group(f"nobody{version}"), ""]), DeleteGroupsResponse)
        call(run, "delete the empty group", DeleteGroupsRequest[2](groups_names=[gone.group_id]), DeleteGroupsResponse)
        describe(run, "describe", [a.group_id, gone.group_id])
        heartbeat(run, a, "a: heartbeat")
    finally:
        close_all([a, gone])


def test_delete_groups(differential: Callable[[str], None]) -> None:
    differential("delete-groups")
