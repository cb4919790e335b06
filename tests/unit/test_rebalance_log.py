"""The rebalance log lines carry a machine-readable cause (`pipeline explain` reads them): the trigger,
the member that caused it, how long the join phase took, who arrived last, and how long the group was not
consuming. Times come from the harness's manual clock, so the durations are exact."""
from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from coordinator_server.group.rebalance_trace import RebalanceTrace
from protocol.errors import Errors

from .group_harness import Harness, join_result

OTHER_PROTOCOLS = (("range", b"other-subscription"),)


def _events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


def _rejoin(h: Harness, member_id: str, **kwargs: Any) -> Any:
    return h.join("g", member_id=member_id, **kwargs)


def test_a_new_member_names_itself_as_the_trigger_and_the_last_to_rejoin_made_the_phase_wait() -> None:
    h = Harness()
    a, b = h.form_group(2, client_id="old")
    with capture_logs() as logs:
        new = h.join_new_member(client_id="newcomer")
        h.sleep(400)
        first = _rejoin(h, a.member_id)
        h.sleep(600)
        last = _rejoin(h, b.member_id, client_id="old")
        results = [join_result(r) for r in (first, last, new)]
        generation = results[0].generation_id
        h.sleep(50)
        for r in sorted(results, key=lambda r: not r.members):  # the leader's sync makes it Stable
            h.sync("g", r.member_id, generation, {} if r.members else None)
    assert join_result(first).error is Errors.NONE
    [prep] = _events(logs, "preparing_rebalance")
    assert prep["trigger"] == "member_joined"
    assert prep["member_id"] == join_result(new).member_id and prep["client_id"] == "newcomer"
    assert prep["generation"] == generation - 1 and prep["previous_state"] == "Stable"
    assert prep["state_time_ms"] > 1_000_000_000_000  # the wall clock, as the records' timestamps
    [joined] = _events(logs, "join_completed")
    assert joined["generation"] == generation and joined["trigger"] == "member_joined"
    assert joined["join_ms"] == 1000 and joined["ended_by"] == "all_joined"
    assert joined["last_joined_member_id"] == b.member_id and joined["last_joined_client_id"] == "old"
    assert joined["last_joined_after_ms"] == 1000 and joined["not_rejoined"] == []
    [stable] = _events(logs, "group_stable")
    assert stable["generation"] == generation and stable["trigger"] == "member_joined"
    assert stable["rebalance_ms"] == 1050 and stable["sync_ms"] == 50


def test_a_member_that_does_not_rejoin_is_named_when_the_rebalance_timeout_ends_the_phase() -> None:
    h = Harness()
    a, b = h.form_group(2, rebalance_ms=5000, session_ms=60_000)
    with capture_logs() as logs:
        new = h.join_new_member(rebalance_ms=5000, session_ms=60_000)
        _rejoin(h, a.member_id, rebalance_ms=5000, session_ms=60_000)
        h.sleep(5000)
    assert join_result(new).error is Errors.NONE
    [removed] = _events(logs, "member_removed")
    assert removed["member_id"] == b.member_id and removed["cause"] == "rebalance_timeout"
    assert removed["client_id"] == "client" and removed["state"] == "PreparingRebalance"
    [joined] = _events(logs, "join_completed")
    assert joined["ended_by"] == "rebalance_timeout" and joined["not_rejoined"] == [b.member_id]
    assert joined["join_ms"] == 5000


def test_leave_and_session_expiry_name_the_member_and_the_cause() -> None:
    h = Harness()
    a, b, c = h.form_group(3, session_ms=6000)
    with capture_logs() as logs:
        h.leave("g", (c.member_id, None))
    [removed] = _events(logs, "member_removed")
    assert removed["cause"] == "leave" and removed["member_id"] == c.member_id
    [prep] = _events(logs, "preparing_rebalance")
    assert prep["trigger"] == "member_left" and prep["member_id"] == c.member_id
    replies = [_rejoin(h, m.member_id, session_ms=6000) for m in (a, b)]
    generation = join_result(replies[0]).generation_id
    for r in sorted((join_result(r) for r in replies), key=lambda r: not r.members):
        h.sync("g", r.member_id, generation, {} if r.members else None)
    with capture_logs() as logs:
        for _ in range(4):  # only a heartbeats: b's session runs out
            h.sleep(2000)
            h.heartbeat("g", a.member_id, generation)
    [removed] = _events(logs, "member_removed")
    assert removed["cause"] == "session_expiry" and removed["member_id"] == b.member_id
    [prep] = _events(logs, "preparing_rebalance")
    assert prep["trigger"] == "session_expired" and prep["member_id"] == b.member_id


def test_a_rejoin_with_other_metadata_is_a_metadata_change_and_the_leader_alone_is_a_leader_rejoin() -> None:
    h = Harness()
    a, b = h.form_group(2)
    leader = a if a.members else b
    follower = b if leader is a else a
    with capture_logs() as logs:
        _rejoin(h, follower.member_id, protocols=OTHER_PROTOCOLS)
    [prep] = _events(logs, "preparing_rebalance")
    assert prep["trigger"] == "metadata_changed" and prep["member_id"] == follower.member_id
    generation = join_result(_rejoin(h, leader.member_id, protocols=OTHER_PROTOCOLS)).generation_id
    h.sync("g", leader.member_id, generation, {})
    h.sync("g", follower.member_id, generation)
    with capture_logs() as logs:
        _rejoin(h, leader.member_id, protocols=OTHER_PROTOCOLS)
    [prep] = _events(logs, "preparing_rebalance")
    assert prep["trigger"] == "leader_rejoined" and prep["member_id"] == leader.member_id


def test_the_last_member_leaving_ends_in_an_empty_generation_with_the_same_cause() -> None:
    h = Harness()
    [a] = h.form_group(1)
    with capture_logs() as logs:
        h.leave("g", (a.member_id, None))
    [empty] = _events(logs, "group_empty")
    assert empty["trigger"] == "member_left" and empty["ended_by"] == "all_joined"
    assert empty["generation"] == a.generation_id + 1


def test_a_rebalance_restarted_before_it_became_stable_keeps_its_start() -> None:
    trace = RebalanceTrace("member_joined", 1000, from_empty=False)
    restarted = RebalanceTrace("metadata_changed", 4000, from_empty=False, previous=trace)
    restarted.on_join_completed(4500, [], 0)
    assert restarted.on_stable(5000) == {"trigger": "metadata_changed", "rebalance_ms": 4000, "sync_ms": 500}
