"""LeaveGroup rules, as Kafka's classic coordinator applies them."""
from __future__ import annotations

from coordinator_server.group.state import EMPTY, PREPARING_REBALANCE, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result, sync_result


def test_leave_on_unknown_group_answers_none_with_unknown_member_per_member() -> None:
    h = Harness()
    result = h.leave("nope", ("a", None), ("b", None))
    assert result.error is Errors.NONE
    assert [m.error for m in result.members] == [Errors.UNKNOWN_MEMBER_ID] * 2


def test_leave_with_empty_group_id_is_invalid_group_id_top_level() -> None:
    result = Harness().leave("", ("a", None))
    assert result.error is Errors.INVALID_GROUP_ID and result.members == []


def test_leave_from_stable_removes_the_member_and_rebalances() -> None:
    h = Harness()
    _a, b = h.form_group(2)
    result = h.leave("g", (b.member_id, None))
    assert result.error is Errors.NONE and result.members[0].error is Errors.NONE
    assert not h.group().has(b.member_id)
    assert h.group().state is PREPARING_REBALANCE


def test_leave_of_the_last_member_completes_the_join_at_once_and_empties_the_group() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    assert h.group().state is EMPTY and h.group().generation_id == 2


def test_leave_during_preparing_rebalance_may_complete_the_join() -> None:
    h = Harness()
    a, b = h.form_group(2)
    ja = h.join(member_id=a.member_id)
    assert not ja.done
    h.leave("g", (b.member_id, None))
    assert join_result(ja).generation_id == 2
    assert [m.member_id for m in join_result(ja).members] == [a.member_id]


def test_leave_of_a_member_parked_in_join_answers_its_join_unknown_member_id() -> None:
    h = Harness()
    a, _b = h.form_group(2)
    ja = h.join(member_id=a.member_id)
    h.leave("g", (a.member_id, None))
    assert join_result(ja).error is Errors.UNKNOWN_MEMBER_ID and join_result(ja).member_id == ""


def test_leave_during_completing_rebalance_fails_parked_syncs_with_rebalance_in_progress() -> None:
    h = Harness()
    a = h.join_new_member()
    b = h.join_new_member()
    h.settle()
    ra, rb = join_result(a), join_result(b)
    leader = ra if ra.members else rb
    follower = rb if leader is ra else ra
    parked = h.sync("g", follower.member_id, 1)
    h.leave("g", (leader.member_id, None))
    assert sync_result(parked).error is Errors.REBALANCE_IN_PROGRESS


def test_batch_leave_answers_each_member_in_request_order() -> None:
    h = Harness()
    a, b, c = h.form_group(3)
    result = h.leave("g", (a.member_id, None), ("ghost", None), (c.member_id, None))
    assert [(m.member_id, m.error) for m in result.members] == [
        (a.member_id, Errors.NONE), ("ghost", Errors.UNKNOWN_MEMBER_ID), (c.member_id, Errors.NONE)
    ]
    assert list(h.group().members) == [b.member_id]


def test_leave_by_instance_id_alone_removes_that_static_member() -> None:
    h = Harness()
    s = h.join(instance="instance-1")
    h.settle()
    member_id = join_result(s).member_id
    result = h.leave("g", ("", "instance-1"))
    assert result.members[0].error is Errors.NONE
    assert not h.group().has(member_id)
    assert h.leave("g", ("", "instance-1")).members[0].error is Errors.UNKNOWN_MEMBER_ID
    assert h.leave("g", ("", None)).members[0].error is Errors.UNKNOWN_MEMBER_ID


def test_leave_with_wrong_member_for_instance_is_fenced() -> None:
    h = Harness()
    s = h.join(instance="instance-1")
    h.settle()
    result = h.leave("g", ("someone-else", "instance-1"))
    assert result.members[0].error is Errors.FENCED_INSTANCE_ID
    assert h.group().has(join_result(s).member_id)


def test_leave_of_a_pending_member_drops_it() -> None:
    h = Harness()
    h.form_group(1)
    pending_id = join_result(h.join()).member_id
    assert h.leave("g", (pending_id, None)).members[0].error is Errors.NONE
    assert pending_id not in h.group().pending_members
    assert h.group().state is STABLE
