"""DelayedProduce on the real purgatory and timing wheel, with the clock advanced by hand."""
from __future__ import annotations

from coordinator_server.purgatory import DelayedOperationPurgatory, Timer
from coordinator_server.replication.delayed_produce import DelayedProduce, fail_partition, produce_key
from coordinator_server.replication.leader import PartitionLeader
from protocol.errors import Errors

T0 = 50_000
LAG_MS = 10_000
TP = ("orders", 0)
TP2 = ("orders", 1)


def leader(isr: tuple[int, ...] = (1, 2), leo: int = 10) -> PartitionLeader:
    return PartitionLeader.make_leader(1, 4, (1, 2, 3), isr, 7, leo, leo, T0, LAG_MS)


class Setup:
    def __init__(self) -> None:
        self.timer = Timer(start_ms=T0)
        self.purgatory: DelayedOperationPurgatory[DelayedProduce] = DelayedOperationPurgatory("Produce", self.timer)
        self.answers: list[dict[tuple[str, int], Errors]] = []

    def park(self, appends: dict[tuple[str, int], tuple[PartitionLeader, int]], min_isr: int = 2,
             timeout_ms: int = 30_000) -> DelayedProduce:
        op = DelayedProduce(timeout_ms, appends, min_isr, self.answers.append)
        self.purgatory.try_complete_else_watch(op, op.watch_keys(), T0)
        return op


def test_completes_with_none_when_the_hw_passes_the_append() -> None:
    s = Setup()
    p = leader()
    p.on_leader_append(13)
    op = s.park({TP: (p, 13)})
    assert not op.is_completed and s.purgatory.watched() == 1
    p.update_follower_fetch_state(2, 12, T0 + 5)
    assert s.purgatory.check_and_complete(produce_key(*TP)) == 0
    p.update_follower_fetch_state(2, 13, T0 + 6)
    assert s.purgatory.check_and_complete(produce_key(*TP)) == 1
    assert s.answers == [{TP: Errors.NONE}]
    assert s.purgatory.watched() == 0 and s.purgatory.delayed() == 0


def test_already_replicated_completes_at_once() -> None:
    s = Setup()
    p = leader(isr=(1,))
    p.on_leader_append(11)
    assert s.park({TP: (p, 11)}, min_isr=1).is_completed
    assert s.answers == [{TP: Errors.NONE}]


def test_isr_below_min_when_the_hw_arrives_is_not_enough_replicas_after_append() -> None:
    s = Setup()
    p = leader(isr=(1, 2))
    p.update_follower_fetch_state(2, 10, T0 + 1)
    p.on_leader_append(12)
    s.park({TP: (p, 12)})
    change = p.maybe_shrink_isr(T0 + 2 * LAG_MS)
    assert change is not None and change.isr == {1}
    assert p.on_isr_write_succeeded(change, 8)  # the HW is released to the leader's LEO
    s.purgatory.check_and_complete(produce_key(*TP))
    assert s.answers == [{TP: Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND}]


def test_expiry_answers_request_timed_out_for_what_is_still_pending() -> None:
    s = Setup()
    done, waiting = leader(isr=(1,)), leader()
    done.on_leader_append(11)
    waiting.on_leader_append(11)
    op = s.park({TP: (done, 11), TP2: (waiting, 11)}, min_isr=1, timeout_ms=500)
    assert not op.is_completed
    s.timer.advance_clock(T0 + 499)
    assert s.answers == []
    s.timer.advance_clock(T0 + 500)
    assert s.answers == [{TP: Errors.NONE, TP2: Errors.REQUEST_TIMED_OUT}]
    assert s.purgatory.delayed() == 0 and s.purgatory.watched() == 0


def test_leadership_lost_fails_every_waiter_of_the_partition() -> None:
    s = Setup()
    p, other = leader(), leader()
    p.on_leader_append(12)
    other.on_leader_append(12)
    only_tp = s.park({TP: (p, 11)})
    both = s.park({TP: (p, 12), TP2: (other, 12)})
    p.resign()
    assert fail_partition(s.purgatory, *TP) == 1
    assert s.answers == [{TP: Errors.NOT_LEADER_OR_FOLLOWER}]
    assert only_tp.is_completed and not both.is_completed
    other.update_follower_fetch_state(2, 12, T0 + 1)
    s.purgatory.check_and_complete(produce_key(*TP2))
    assert s.answers[1] == {TP: Errors.NOT_LEADER_OR_FOLLOWER, TP2: Errors.NONE}
    assert s.purgatory.watched() == 0 and s.purgatory.delayed() == 0


def test_a_resigned_leader_found_by_a_check_answers_not_leader() -> None:
    s = Setup()
    p = leader()
    p.on_leader_append(12)
    s.park({TP: (p, 12)})
    p.resign()
    s.purgatory.check_and_complete(produce_key(*TP))
    assert s.answers == [{TP: Errors.NOT_LEADER_OR_FOLLOWER}]


def test_a_stale_leader_never_completes_with_none() -> None:
    # Its ISR shrink fails the version check, so the HW stays held by the follower that left it.
    s = Setup()
    p = leader(isr=(1, 2))
    p.on_leader_append(12)
    s.park({TP: (p, 12)}, min_isr=1, timeout_ms=100)
    change = p.maybe_shrink_isr(T0 + 2 * LAG_MS)
    assert change is not None
    p.on_isr_write_failed()
    s.purgatory.check_and_complete(produce_key(*TP))
    s.timer.advance_clock(T0 + 100)
    assert s.answers == [{TP: Errors.REQUEST_TIMED_OUT}]
