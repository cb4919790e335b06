"""Static membership (KIP-345) and SkipAssignment (KIP-814)."""
from __future__ import annotations

from coordinator_server.group.state import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, Reply, join_result, sync_result


def _static_group(h: Harness, instances: tuple[str, ...] = ("i-1", "i-2"), **kwargs: object) -> dict[str, str]:
    """Static members join and sync; returns instance id -> member id."""
    replies = {i: h.join(instance=i, client_id=f"client-{i}", **kwargs) for i in instances}  # type: ignore[arg-type]
    h.settle()
    results = {i: join_result(r) for i, r in replies.items()}
    leader = next(r for r in results.values() if r.members)
    assignments = {r.member_id: f"assigned-to-{i}".encode() for i, r in results.items()}
    for r in results.values():
        h.sync("g", r.member_id, r.generation_id, assignments if r is leader else None)
    assert h.group().state is STABLE
    return {i: r.member_id for i, r in results.items()}


def test_static_member_joins_without_member_id_required_and_its_id_starts_with_the_instance_id() -> None:
    h = Harness()
    reply = h.join(instance="instance-7", version=5)
    assert not reply.done  # parked in the join phase, not MEMBER_ID_REQUIRED
    h.settle()
    assert join_result(reply).error is Errors.NONE
    assert join_result(reply).member_id.startswith("instance-7-")


def test_static_member_rejoining_while_stable_keeps_its_assignment_without_a_rebalance() -> None:
    h = Harness()
    ids = _static_group(h)
    records_before = len(h.group_records())
    rejoin = h.join(instance="i-2", client_id="client-i-2")  # restarted: unknown member id
    result = join_result(rejoin)
    assert result.error is Errors.NONE
    assert result.member_id != ids["i-2"] and result.member_id.startswith("i-2-")
    assert result.generation_id == 1
    group = h.group()
    assert group.state is STABLE and group.generation_id == 1
    sync = h.sync("g", result.member_id, 1)
    assert sync_result(sync).assignment == b"assigned-to-i-2"
    # The new member id is made durable before the join is answered.
    assert len(h.group_records()) == records_before + 1
    persisted = h.group_records()[-1].value
    assert persisted is not None and result.member_id in {m.member_id for m in persisted.members}
    assert h.heartbeat("g", ids["i-1"], 1) is Errors.NONE  # nobody else noticed


def test_old_member_id_of_a_replaced_static_member_is_fenced() -> None:
    h = Harness()
    ids = _static_group(h)
    h.join(instance="i-2", client_id="client-i-2")
    assert h.heartbeat("g", ids["i-2"], 1, instance="i-2") is Errors.FENCED_INSTANCE_ID
    assert h.heartbeat("g", ids["i-2"], 1) is Errors.UNKNOWN_MEMBER_ID
    assert sync_result(h.sync("g", ids["i-2"], 1, instance="i-2")).error is Errors.FENCED_INSTANCE_ID


def test_replacement_answers_a_join_parked_under_the_old_id_with_fenced_instance_id() -> None:
    h = Harness()
    ids = _static_group(h)
    old_join = h.join(member_id=ids["i-1"], instance="i-1")  # the leader rejoins: PreparingRebalance
    assert not old_join.done
    h.join(instance="i-1", client_id="client-i-1")
    assert join_result(old_join).error is Errors.FENCED_INSTANCE_ID
    assert join_result(old_join).generation_id == -1


def test_static_leader_replacement_v9_learns_it_leads_and_skips_assignment() -> None:
    h = Harness()
    ids = _static_group(h)
    leader_instance = next(i for i, m in ids.items() if h.group().is_leader(m))
    result = join_result(h.join(instance=leader_instance, client_id="x", version=9))
    assert result.skip_assignment is True
    assert result.leader == result.member_id
    assert len(result.members) == 2
    assert h.group().state is STABLE


def test_static_leader_replacement_before_v9_is_told_the_old_leader_id() -> None:
    h = Harness()
    ids = _static_group(h)
    leader_instance = next(i for i, m in ids.items() if h.group().is_leader(m))
    result = join_result(h.join(instance=leader_instance, client_id="x", version=8))
    assert result.skip_assignment is False
    assert result.leader == ids[leader_instance] != result.member_id
    assert result.members == []


def test_static_follower_replacement_gets_no_members_and_the_current_leader() -> None:
    h = Harness()
    ids = _static_group(h)
    follower_instance = next(i for i, m in ids.items() if not h.group().is_leader(m))
    result = join_result(h.join(instance=follower_instance, client_id="x"))
    assert result.members == [] and not result.skip_assignment
    assert result.leader == h.group().leader_id


def test_static_replacement_with_a_protocol_change_triggers_a_rebalance() -> None:
    h = Harness()
    _static_group(h, instances=("i-1",), protocols=(("range", b""), ("roundrobin", b"")))
    assert h.group().protocol_name == "range"
    # The restarted member now prefers roundrobin: the protocol of the next generation would change.
    rejoin = h.join(instance="i-1", client_id="x", protocols=(("roundrobin", b""), ("range", b"")))
    # It is the only member and has rejoined, so the new join phase completes at once.
    result = join_result(rejoin)
    assert (result.generation_id, result.protocol_name) == (2, "roundrobin")
    assert h.group().state is COMPLETING_REBALANCE


def test_static_replacement_during_completing_rebalance_starts_a_new_rebalance() -> None:
    h = Harness()
    replies = [h.join(instance=i) for i in ("i-1", "i-2")]
    h.settle()
    assert h.group().state is COMPLETING_REBALANCE
    h.join(instance="i-2")
    assert h.group().state is PREPARING_REBALANCE
    assert all(r.done for r in replies)


def test_static_replacement_during_preparing_rebalance_just_waits_with_the_others() -> None:
    h = Harness()
    ids = _static_group(h)
    h.join(member_id=ids["i-1"], instance="i-1")  # PreparingRebalance
    new = h.join(instance="i-2")
    # Everyone (i-1 and the new i-2) has rejoined: the join completes into generation 2.
    assert join_result(new).generation_id == 2


def test_failed_replacement_write_reverts_to_the_old_member_id() -> None:
    h = Harness()
    ids = _static_group(h)
    h.fail_appends(Errors.MESSAGE_TOO_LARGE)
    result = join_result(h.join(instance="i-2", client_id="x"))
    assert result.error is Errors.UNKNOWN_SERVER_ERROR
    assert result.member_id == ""
    h.fail_appends(None)  # type: ignore[arg-type]
    assert h.group().static_members["i-2"] == ids["i-2"]
    assert h.heartbeat("g", ids["i-2"], 1, instance="i-2") is Errors.NONE


def test_static_members_that_do_not_rejoin_are_kept_at_the_rebalance_timeout() -> None:
    h = Harness()
    ids = _static_group(h, session_ms=100_000, rebalance_ms=20_000)
    j1 = h.join(member_id=ids["i-1"], instance="i-1", session_ms=100_000, rebalance_ms=20_000,
                protocols=(("range", b"changed"),))
    h.sleep(20_000)
    result = join_result(j1)
    assert result.error is Errors.NONE and result.generation_id == 2
    assert h.group().has(ids["i-2"])  # kept, listed for the leader's assignment
    assert {m.member_id for m in result.members} == set(ids.values())


def test_known_static_member_with_an_unknown_instance_id_is_unknown_member_id() -> None:
    h = Harness()
    ids = _static_group(h)
    assert h.heartbeat("g", ids["i-1"], 1, instance="i-9") is Errors.UNKNOWN_MEMBER_ID
    bad: Reply = h.join(member_id=ids["i-1"], instance="i-2")
    assert join_result(bad).error is Errors.FENCED_INSTANCE_ID
