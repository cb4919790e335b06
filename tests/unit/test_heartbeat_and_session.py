"""Heartbeat and session expiry rules: the delayed heartbeat that expires a silent member's session."""
from __future__ import annotations

from coordinator_server.group.state import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result


def test_heartbeat_in_stable_answers_none() -> None:
    h = Harness()
    [a] = h.form_group(1)
    assert h.heartbeat("g", a.member_id, 1) is Errors.NONE


def test_heartbeat_on_unknown_group_or_member_is_unknown_member_id() -> None:
    h = Harness()
    assert h.heartbeat("nope", "m", 1) is Errors.UNKNOWN_MEMBER_ID
    h.form_group(1)
    assert h.heartbeat("g", "stranger", 1) is Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_with_empty_group_id_is_invalid_group_id() -> None:
    assert Harness().heartbeat("", "m", 1) is Errors.INVALID_GROUP_ID


def test_heartbeat_generation_is_checked_before_the_state() -> None:
    h = Harness()
    a, b = h.form_group(2)
    h.join(member_id=a.member_id)  # PreparingRebalance
    assert h.heartbeat("g", b.member_id, 7) is Errors.ILLEGAL_GENERATION
    assert h.heartbeat("g", b.member_id, 1) is Errors.REBALANCE_IN_PROGRESS


def test_heartbeat_during_preparing_rebalance_answers_rebalance_in_progress_and_keeps_member_alive() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000, rebalance_ms=60_000)
    ja = h.join(member_id=a.member_id, session_ms=10_000, rebalance_ms=60_000)
    for _ in range(5):
        h.sleep(5_000)
        assert h.heartbeat("g", b.member_id, 1) is Errors.REBALANCE_IN_PROGRESS
    assert h.group().has(b.member_id)  # 25 s passed, session is 10 s: heartbeats kept it
    assert not ja.done


def test_heartbeat_during_completing_rebalance_answers_none() -> None:
    h = Harness()
    a = h.join_new_member()
    h.settle()
    assert h.group().state is COMPLETING_REBALANCE
    assert h.heartbeat("g", join_result(a).member_id, 1) is Errors.NONE


def test_heartbeat_from_a_member_on_an_empty_group_is_unknown_member_id() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    assert h.group().state is EMPTY
    assert h.heartbeat("g", a.member_id, 2) is Errors.UNKNOWN_MEMBER_ID


def test_silent_member_is_removed_at_its_session_timeout_and_the_group_rebalances() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000)
    for _ in range(2):
        h.sleep(4_000)
        assert h.heartbeat("g", a.member_id, 1) is Errors.NONE
    h.sleep(4_000)
    # b has been silent for 12 s.
    assert not h.group().has(b.member_id)
    assert h.group().state is PREPARING_REBALANCE
    assert h.heartbeat("g", a.member_id, 1) is Errors.REBALANCE_IN_PROGRESS


def test_session_deadline_is_the_session_timeout_after_the_last_heartbeat() -> None:
    h = Harness()
    [a] = h.form_group(1, session_ms=10_000)
    h.sleep(5_000)
    h.heartbeat("g", a.member_id, 1)
    h.sleep(9_999)
    assert h.group().has(a.member_id)
    h.sleep(1)
    assert not h.group().has(a.member_id)


def test_last_member_expiring_empties_the_group_and_bumps_the_generation() -> None:
    h = Harness()
    [_a] = h.form_group(1, session_ms=10_000)
    h.sleep(10_000)
    group = h.group()
    assert group.state is EMPTY and group.generation_id == 2 and group.size() == 0
    assert h.group_records()[-1].value is not None and h.group_records()[-1].value.members == ()


def test_parked_join_counts_as_liveness() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000, rebalance_ms=100_000)
    ja = h.join(member_id=a.member_id, session_ms=10_000, rebalance_ms=100_000)
    for _ in range(4):
        h.sleep(5_000)
        h.heartbeat("g", b.member_id, 1)
    # a sent nothing for 20 s but its JoinGroup is parked: it is alive.
    assert h.group().has(a.member_id)
    assert not ja.done


def test_parked_sync_counts_as_liveness_and_a_fresh_session_starts_on_delivery() -> None:
    h = Harness()
    a = h.join_new_member(session_ms=10_000, rebalance_ms=100_000)
    b = h.join_new_member(session_ms=10_000, rebalance_ms=100_000)
    h.settle()
    ra, rb = join_result(a), join_result(b)
    leader = ra if ra.members else rb
    follower = rb if leader is ra else ra
    parked = h.sync("g", follower.member_id, 1)
    for _ in range(3):  # the follower sends nothing for 15 s, past its 10 s session
        h.sleep(5_000)
        h.heartbeat("g", leader.member_id, 1)
    assert h.group().has(follower.member_id) and not parked.done
    h.sync("g", leader.member_id, 1, {})
    assert parked.done
    h.sleep(9_999)
    assert h.group().has(follower.member_id)
    h.sleep(1)
    assert not h.group().has(follower.member_id)


def test_new_member_is_governed_by_the_join_timeout_not_its_session_timeout() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000, rebalance_ms=600_000)
    h.join(member_id=a.member_id, session_ms=10_000, rebalance_ms=600_000)  # PreparingRebalance
    new = h.join_new_member(session_ms=10_000, rebalance_ms=600_000)
    for _ in range(59):  # keep b alive, never rejoining: the phase stays open
        h.sleep(5_000)
        h.heartbeat("g", b.member_id, 1)
    assert not new.done  # 295 s: past its 10 s session, within the 300 s new-member join timeout
    h.sleep(5_000)
    h.heartbeat("g", b.member_id, 1)
    assert join_result(new).error is Errors.UNKNOWN_MEMBER_ID and join_result(new).member_id == ""


def test_join_completion_counts_as_a_heartbeat() -> None:
    h = Harness()
    a = h.join_new_member(session_ms=10_000)
    h.settle()
    h.sleep(9_999)
    assert h.group().has(join_result(a).member_id)


def test_stable_sync_counts_as_a_heartbeat() -> None:
    h = Harness()
    [a] = h.form_group(1, session_ms=10_000)
    h.sleep(8_000)
    h.sync("g", a.member_id, 1)
    h.sleep(8_000)
    assert h.group().has(a.member_id) and h.group().state is STABLE


def test_immediate_join_answer_does_not_restart_the_session() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000)
    follower = a if not a.members else b
    leader = b if follower is a else a
    h.sleep(6_000)
    h.heartbeat("g", leader.member_id, 1)
    assert join_result(h.join(member_id=follower.member_id, session_ms=10_000)).error is Errors.NONE
    h.sleep(4_000)
    h.heartbeat("g", leader.member_id, 1)
    assert not h.group().has(follower.member_id)
