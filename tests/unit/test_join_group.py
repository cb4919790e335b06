"""JoinGroup rules, as Kafka's classic coordinator applies them."""
from __future__ import annotations

from coordinator_server.group.state import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result


def test_first_member_of_empty_group_completes_alone_and_leads_when_initial_delay_is_zero() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    reply = h.join_new_member()
    h.sleep(0)
    result = join_result(reply)
    assert result.error is Errors.NONE
    assert result.generation_id == 1
    assert result.leader == result.member_id
    assert [m.member_id for m in result.members] == [result.member_id]
    assert result.protocol_name == "range" and result.protocol_type == "consumer"
    assert h.group().state is COMPLETING_REBALANCE


def test_initial_delayed_join_waits_the_configured_delay_and_never_completes_early() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new_member()
    b = h.join_new_member()
    h.sleep(2999)
    # Every member has joined, yet the initial delay still runs its course.
    assert not a.done and not b.done
    assert h.group().state is PREPARING_REBALANCE


def test_initial_delayed_join_extends_while_new_members_arrive_capped_by_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    first = h.join_new_member(rebalance_ms=10_000)
    for _ in range(3):  # new members at 2500, 5000 and 7500
        h.sleep(2500)
        h.join_new_member(rebalance_ms=10_000)
    # Waits of 3000, 3000, 3000, then the 1000 left of the 10000 rebalance timeout: done at 10000.
    h.sleep(9999 - 7500)
    assert not first.done
    h.sleep(1)
    assert join_result(first).generation_id == 1
    assert len(join_result(first).members) == 4


def test_initial_delay_completes_once_no_new_member_arrived_during_a_wait() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new_member()
    h.sleep(1000)
    h.join_new_member()
    h.sleep(2000)  # first wait over; a member arrived, so wait again
    assert not a.done
    h.sleep(3000)
    assert a.done and len(join_result(a).members) == 2


def test_join_v4_with_unknown_member_id_gets_member_id_required_and_a_pending_id() -> None:
    h = Harness()
    reply = h.join(version=4, client_id="my-client")
    result = join_result(reply)
    assert result.error is Errors.MEMBER_ID_REQUIRED
    assert result.member_id.startswith("my-client-")
    assert result.generation_id == -1 and result.leader == "" and result.members == []
    group = h.group()
    assert result.member_id in group.pending_members
    assert group.size() == 0 and group.state is EMPTY  # no rebalance triggered


def test_join_v3_with_unknown_member_id_is_added_directly() -> None:
    h = Harness()
    reply = h.join(version=3)
    h.settle()
    assert join_result(reply).error is Errors.NONE
    assert h.group().size() == 1


def test_member_id_is_client_id_dash_uuid() -> None:
    from coordinator_server.group.coordinator import default_member_id

    member_id = default_member_id("consumer-1")
    _prefix, _, _rest = member_id.partition("-1-")
    assert member_id.startswith("consumer-1-") and len(member_id) == len("consumer-1-") + 36


def test_pending_member_expires_after_its_session_timeout() -> None:
    h = Harness()
    pending_id = join_result(h.join(session_ms=6000)).member_id
    h.sleep(5999)
    assert pending_id in h.group().pending_members
    h.sleep(1)
    assert pending_id not in h.group().pending_members
    # Its id is useless now.
    later = h.join(member_id=pending_id)
    assert join_result(later).error is Errors.UNKNOWN_MEMBER_ID


def test_a_flood_of_joins_without_member_id_keeps_a_bounded_number_pending() -> None:
    h = Harness(group_max_pending_members=3)
    [a] = h.form_group(1)
    ids = [join_result(h.join(client_id="flood")).member_id for _ in range(10)]
    group = h.group()
    assert list(group.pending_members) == ids[-3:]  # the oldest were forgotten, newest kept
    assert group.pending_evictions == 7
    assert h.coordinator.heartbeat_purgatory.delayed() == 1 + 3  # a's session timer and 3 pending timers
    # A forgotten id is refused like an expired one; a kept one joins.
    assert join_result(h.join(member_id=ids[0])).error is Errors.UNKNOWN_MEMBER_ID
    assert a.member_id in group.members


def test_pending_member_blocks_completion_of_a_non_initial_join() -> None:
    h = Harness()
    [a] = h.form_group(1)
    pending_id = join_result(h.join()).member_id  # MEMBER_ID_REQUIRED
    rejoin = h.join(member_id=a.member_id)  # leader rejoin: rebalance, all current members joined
    h.sleep(0)
    assert not rejoin.done, "a pending member must hold the join phase open"
    h.join(member_id=pending_id)
    h.settle()
    assert join_result(rejoin).generation_id == 2
    assert len(join_result(rejoin).members) == 2


def test_pending_member_is_not_a_member_for_heartbeat_sync_and_leave_works() -> None:
    h = Harness()
    [a] = h.form_group(1)
    pending_id = join_result(h.join()).member_id
    assert h.heartbeat("g", pending_id, a.generation_id) is Errors.UNKNOWN_MEMBER_ID
    assert h.sync("g", pending_id, a.generation_id).value.error is Errors.UNKNOWN_MEMBER_ID
    result = h.leave("g", (pending_id, None))
    assert result.members[0].error is Errors.NONE
    assert pending_id not in h.group().pending_members


def test_second_join_with_inconsistent_protocols_keeps_the_id_pending() -> None:
    h = Harness()
    h.form_group(1)
    pending_id = join_result(h.join()).member_id
    bad = h.join(member_id=pending_id, protocols=(("other", b""),))
    assert join_result(bad).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert pending_id in h.group().pending_members
    good = h.join(member_id=pending_id)
    h.settle()
    assert join_result(good).error is Errors.NONE


def test_session_timeout_bounds_are_inclusive_and_echo_the_member_id() -> None:
    h = Harness(min_session_timeout_ms=6000, max_session_timeout_ms=300_000)
    assert join_result(h.join(session_ms=5999)).error is Errors.INVALID_SESSION_TIMEOUT
    assert join_result(h.join(session_ms=300_001)).error is Errors.INVALID_SESSION_TIMEOUT
    echoed = join_result(h.join(member_id="someone", session_ms=1))
    assert echoed.error is Errors.INVALID_SESSION_TIMEOUT and echoed.member_id == "someone"
    assert join_result(h.join(session_ms=6000)).error is Errors.MEMBER_ID_REQUIRED
    assert join_result(h.join(session_ms=300_000)).error is Errors.MEMBER_ID_REQUIRED


def test_empty_group_id_is_invalid_group_id() -> None:
    h = Harness()
    assert join_result(h.join(group="")).error is Errors.INVALID_GROUP_ID


def test_known_member_id_on_unknown_group_is_unknown_member_id() -> None:
    h = Harness()
    assert join_result(h.join(group="nope", member_id="m-1")).error is Errors.UNKNOWN_MEMBER_ID
    assert join_result(h.join(group="nope", member_id="m-1", instance="i-1")).error is Errors.UNKNOWN_MEMBER_ID


def test_empty_protocol_type_or_no_protocols_on_empty_group_is_inconsistent_group_protocol() -> None:
    h = Harness()
    assert join_result(h.join(protocol_type="")).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert join_result(h.join(protocols=())).error is Errors.INCONSISTENT_GROUP_PROTOCOL


def test_new_member_must_share_protocol_type_and_a_protocol_with_every_member() -> None:
    h = Harness()
    h.form_group(2)
    wrong_type = h.join(protocol_type="connect")
    assert join_result(wrong_type).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert join_result(wrong_type).member_id == ""
    no_common = h.join(protocols=(("sticky", b""),))
    assert join_result(no_common).error is Errors.INCONSISTENT_GROUP_PROTOCOL


def test_group_max_size_refuses_a_new_member_once_full() -> None:
    h = Harness(group_max_size=2)
    h.form_group(2)
    third = h.join(version=3)
    assert join_result(third).error is Errors.GROUP_MAX_SIZE_REACHED
    assert join_result(third).member_id == ""
    assert h.group().size() == 2


def test_group_max_size_counts_parked_joins_during_preparing_rebalance() -> None:
    h = Harness(group_max_size=2)
    a, _b = h.form_group(2)
    h.join(member_id=a.member_id)  # PreparingRebalance, one parked
    assert h.group().state is PREPARING_REBALANCE
    c = h.join(version=3)  # 1 parked < 2: accepted
    assert not c.done
    d = h.join(version=3)  # 2 parked: refused
    assert join_result(d).error is Errors.GROUP_MAX_SIZE_REACHED


def test_join_in_completing_rebalance_with_same_metadata_returns_current_generation() -> None:
    h = Harness()
    a = h.join_new_member()
    b = h.join_new_member()
    h.settle()
    follower = join_result(a) if not join_result(a).members else join_result(b)
    assert h.group().state is COMPLETING_REBALANCE
    again = h.join(member_id=follower.member_id)
    assert join_result(again).error is Errors.NONE
    assert join_result(again).generation_id == follower.generation_id
    assert join_result(again).members == []
    assert h.group().state is COMPLETING_REBALANCE


def test_leader_retrying_join_in_completing_rebalance_gets_the_member_list_again() -> None:
    h = Harness()
    a = h.join_new_member()
    h.settle()
    leader = join_result(a)
    again = h.join(member_id=leader.member_id)
    assert [m.member_id for m in join_result(again).members] == [leader.member_id]


def test_join_in_completing_rebalance_with_changed_metadata_rebalances_and_fails_parked_syncs() -> None:
    h = Harness()
    a = h.join_new_member()
    b = h.join_new_member()
    h.settle()
    ra, rb = join_result(a), join_result(b)
    follower = ra if not ra.members else rb
    leader = rb if follower is ra else ra
    parked = h.sync("g", follower.member_id, follower.generation_id)
    assert not parked.done
    h.join(member_id=leader.member_id, protocols=(("range", b"changed"),))
    assert parked.value.error is Errors.REBALANCE_IN_PROGRESS
    assert h.group().state is PREPARING_REBALANCE


def test_stable_follower_with_same_metadata_gets_current_generation_without_rebalance() -> None:
    h = Harness()
    a, b = h.form_group(2)
    follower = a if not a.members else b
    again = h.join(member_id=follower.member_id)
    result = join_result(again)
    assert result.error is Errors.NONE and result.generation_id == 1 and result.members == []
    assert result.leader == h.group().leader_id and not result.skip_assignment
    assert h.group().state is STABLE


def test_stable_leader_rejoining_always_triggers_a_rebalance() -> None:
    h = Harness()
    a, b = h.form_group(2)
    leader = a if a.members else b
    again = h.join(member_id=leader.member_id)
    assert not again.done
    assert h.group().state is PREPARING_REBALANCE


def test_stable_follower_with_changed_metadata_triggers_a_rebalance() -> None:
    h = Harness()
    a, b = h.form_group(2)
    follower = a if not a.members else b
    h.join(member_id=follower.member_id, protocols=(("range", b"new-subscription"),))
    assert h.group().state is PREPARING_REBALANCE


def test_join_during_preparing_rebalance_parks_until_every_member_rejoined() -> None:
    h = Harness()
    a, b, c = h.form_group(3)
    ja = h.join(member_id=a.member_id)
    jb = h.join(member_id=b.member_id)
    assert not ja.done and not jb.done
    jc = h.join(member_id=c.member_id)
    for reply in (ja, jb, jc):
        assert join_result(reply).generation_id == 2
    assert h.group().state is COMPLETING_REBALANCE


def test_dynamic_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.form_group(2, rebalance_ms=20_000, session_ms=60_000)
    ja = h.join(member_id=a.member_id, rebalance_ms=20_000, session_ms=60_000)
    h.heartbeat("g", b.member_id, 1)
    h.sleep(19_999)
    assert not ja.done
    h.sleep(1)
    result = join_result(ja)
    assert result.generation_id == 2
    assert [m.member_id for m in result.members] == [a.member_id]
    assert not h.group().has(b.member_id)


def test_unknown_member_join_on_empty_group_with_known_id_is_unknown_member_id() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    assert h.group().state is EMPTY
    assert join_result(h.join(member_id=a.member_id)).error is Errors.UNKNOWN_MEMBER_ID


def test_protocol_is_selected_by_member_votes_among_protocols_all_support() -> None:
    h = Harness()
    h.join_new_member(protocols=(("range", b""), ("roundrobin", b"")))
    h.join_new_member(protocols=(("roundrobin", b""), ("range", b"")))
    c = h.join_new_member(protocols=(("roundrobin", b""), ("range", b"")))
    h.settle()
    assert join_result(c).protocol_name == "roundrobin"


def test_protocol_only_common_name_wins() -> None:
    h = Harness()
    h.join_new_member(protocols=(("range", b""), ("roundrobin", b"")))
    b = h.join_new_member(protocols=(("roundrobin", b""), ("blah", b"")))
    h.settle()
    assert join_result(b).protocol_name == "roundrobin"


def test_leader_gets_every_member_with_metadata_of_the_selected_protocol() -> None:
    h = Harness()
    a = h.join_new_member(protocols=(("range", b"a-meta"),))
    b = h.join_new_member(protocols=(("range", b"b-meta"),))
    h.settle()
    leader = join_result(a) if join_result(a).members else join_result(b)
    assert sorted(m.metadata for m in leader.members) == [b"a-meta", b"b-meta"]


def test_a_second_join_for_a_parked_member_answers_the_first() -> None:
    h = Harness()
    a, b = h.form_group(2)
    first = h.join(member_id=a.member_id)
    second = h.join(member_id=a.member_id)
    assert join_result(first).error is Errors.REBALANCE_IN_PROGRESS
    assert not second.done
    h.join(member_id=b.member_id)
    assert join_result(second).error is Errors.NONE


def test_generation_advances_when_the_group_empties() -> None:
    h = Harness()
    [a] = h.form_group(1)
    assert h.group().generation_id == 1
    h.leave("g", (a.member_id, None))
    assert h.group().state is EMPTY and h.group().generation_id == 2
    b = h.join_new_member()
    h.settle()
    assert join_result(b).generation_id == 3


def test_leader_is_reelected_when_the_leader_does_not_rejoin() -> None:
    h = Harness()
    a, b = h.form_group(2)
    leader = a if a.members else b
    follower = b if leader is a else a
    # A changed subscription makes the follower's join start a rebalance the leader sits out.
    jf = h.join(member_id=follower.member_id, protocols=(("range", b"changed"),))
    h.heartbeat("g", leader.member_id, 1)
    h.sleep(30_000)
    result = join_result(jf)
    assert result.leader == follower.member_id
    assert [m.member_id for m in result.members] == [follower.member_id]


def test_reason_is_accepted_and_logged() -> None:
    from structlog.testing import capture_logs

    h = Harness()
    with capture_logs() as logs:
        h.join_new_member(reason="the consumer was restarted")
    assert any(e.get("reason") == "the consumer was restarted" for e in logs)
