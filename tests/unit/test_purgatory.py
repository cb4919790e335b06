"""DelayedOperation and DelayedOperationPurgatory, with the timer advanced by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator_server.purgatory import DelayedOperation, DelayedOperationPurgatory, Timer


class FakeOperation(DelayedOperation):
    """Completes when `ready` is set; records every callback into a shared event log."""

    def __init__(self, name: str, delay_ms: int, events: list[str], ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.events = events
        self.ready = ready
        self.after_complete: Callable[[], None] | None = None

    def try_complete(self) -> bool:
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.events.append(f"{self.name}:complete")
        if self.after_complete is not None:
            self.after_complete()

    def on_expiration(self) -> None:
        self.events.append(f"{self.name}:expired")


class ReadyOnceWatched(FakeOperation):
    """Its condition only holds after the purgatory has watched it: exercises the second try."""

    def try_complete(self) -> bool:
        self.ready = self.ready or self.watched_once
        self.watched_once = True
        return super().try_complete()

    watched_once = False


@pytest.fixture
def timer() -> Timer:
    return Timer(start_ms=10_000)


@pytest.fixture
def purgatory(timer: Timer) -> DelayedOperationPurgatory[FakeOperation]:
    return DelayedOperationPurgatory("Heartbeat", timer)


def test_force_complete_runs_on_complete_exactly_once() -> None:
    events: list[str] = []
    op = FakeOperation("a", 100, events)
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.is_completed
    assert events == ["a:complete"]


def test_safe_try_complete_does_nothing_once_completed() -> None:
    events: list[str] = []
    op = FakeOperation("a", 100, events, ready=True)
    assert op.safe_try_complete() is True
    assert op.safe_try_complete() is False
    assert events == ["a:complete"]


def test_try_complete_else_watch_completes_at_once_without_watching_or_scheduling(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    op = FakeOperation("a", 100, events, ready=True)
    assert purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000) is True
    assert events == ["a:complete"]
    assert (purgatory.watched(), purgatory.delayed(), purgatory.num_keys(), timer.size()) == (0, 0, 0, 0)


def test_second_try_after_watching_completes_and_unwatches(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    op = ReadyOnceWatched("a", 100, events)
    assert purgatory.try_complete_else_watch(op, ["g", "m"], now_ms=10_000) is True
    assert events == ["a:complete"]
    assert (purgatory.watched(), purgatory.delayed(), purgatory.num_keys(), timer.size()) == (0, 0, 0, 0)


def test_an_incomplete_operation_is_watched_under_every_key_and_timed(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    op = FakeOperation("a", 100, [])
    assert purgatory.try_complete_else_watch(op, ["g", "m1", "m2", "m1"], now_ms=10_000) is False
    assert purgatory.watched() == 3  # duplicate keys watch once
    assert purgatory.num_keys() == 3
    assert purgatory.delayed() == 1
    assert timer.size() == 1
    assert op.deadline_ms == 10_100


def test_check_and_complete_completes_ready_operations_and_forgets_them(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    a, b = FakeOperation("a", 100, events), FakeOperation("b", 100, events)
    purgatory.try_complete_else_watch(a, ["g"], now_ms=10_000)
    purgatory.try_complete_else_watch(b, ["g"], now_ms=10_000)
    assert purgatory.check_and_complete("g") == 0
    a.ready = True
    assert purgatory.check_and_complete("g") == 1
    assert events == ["a:complete"]
    assert (purgatory.watched(), purgatory.delayed(), timer.size()) == (1, 1, 1)
    assert not a.scheduled  # completion cancelled its timeout
    assert purgatory.check_and_complete("no-such-key") == 0


def test_completion_through_one_key_unwatches_all_its_keys(
    purgatory: DelayedOperationPurgatory[FakeOperation],
) -> None:
    op = FakeOperation("a", 100, [])
    purgatory.try_complete_else_watch(op, ["g", "m1", "m2"], now_ms=10_000)
    op.ready = True
    assert purgatory.check_and_complete("m1") == 1
    assert purgatory.check_and_complete("m2") == 0
    assert (purgatory.watched(), purgatory.num_keys()) == (0, 0)


def test_expiration_calls_on_complete_then_on_expiration(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    op = FakeOperation("a", 100, events)
    purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000)
    timer.advance_clock(10_099)
    assert events == []
    timer.advance_clock(10_100)
    assert events == ["a:complete", "a:expired"]
    assert (purgatory.watched(), purgatory.delayed(), purgatory.num_keys()) == (0, 0, 0)


def test_completion_before_the_timer_fires_means_no_expiration(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    op = FakeOperation("a", 100, events)
    purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000)
    op.ready = True
    purgatory.check_and_complete("g")
    assert timer.advance_clock(20_000) == 0
    assert events == ["a:complete"]


def test_timer_expiry_and_check_and_complete_racing_complete_once(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    first = FakeOperation("first", 100, events)
    op = FakeOperation("op", 100, events)
    # Same deadline, same bucket: `first` expires first and its callback re-checks the key, which
    # completes `op` while the timer is still flushing that bucket. `op` must not also expire.
    purgatory.try_complete_else_watch(first, ["g"], now_ms=10_000)
    purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000)
    op.ready = True

    def recheck() -> None:
        purgatory.check_and_complete("g")

    first.after_complete = recheck
    assert timer.advance_clock(10_100) == 1
    assert events == ["first:complete", "op:complete", "first:expired"]
    assert (purgatory.watched(), purgatory.delayed(), timer.size()) == (0, 0, 0)


def test_zero_delay_operation_expires_at_the_next_advance_not_inside_try_complete_else_watch(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    op = FakeOperation("a", 0, events)
    assert purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000) is False
    assert events == []
    timer.advance_clock(10_000)
    assert events == ["a:complete", "a:expired"]
    assert (purgatory.watched(), purgatory.delayed(), purgatory.num_keys(), timer.size()) == (0, 0, 0, 0)


def test_an_already_completed_operation_is_neither_watched_nor_scheduled(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    op = FakeOperation("a", 100, [])
    op.force_complete()
    assert purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000) is False
    assert (purgatory.watched(), purgatory.num_keys(), timer.size()) == (0, 0, 0)


def test_an_operation_cannot_wait_twice(purgatory: DelayedOperationPurgatory[FakeOperation]) -> None:
    op = FakeOperation("a", 100, [])
    purgatory.try_complete_else_watch(op, ["g"], now_ms=10_000)
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(op, ["h"], now_ms=10_000)


def test_watching_needs_a_key(purgatory: DelayedOperationPurgatory[FakeOperation]) -> None:
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(FakeOperation("a", 100, []), [], now_ms=10_000)


def test_force_complete_from_outside_unwatches_and_cancels_the_timeout(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    op = FakeOperation("a", 100, events)
    purgatory.try_complete_else_watch(op, ["g", "m"], now_ms=10_000)
    assert op.force_complete() is True
    assert (purgatory.watched(), purgatory.delayed(), purgatory.num_keys(), timer.size()) == (0, 0, 0, 0)
    assert op.cancelled


def test_cancel_for_key_returns_watchers_and_leaves_them_on_the_timer(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    a, b = FakeOperation("a", 100, events), FakeOperation("b", 100, events)
    purgatory.try_complete_else_watch(a, ["g", "m"], now_ms=10_000)
    purgatory.try_complete_else_watch(b, ["g"], now_ms=10_000)
    assert purgatory.cancel_for_key("g") == [a, b]
    assert purgatory.cancel_for_key("g") == []
    assert (purgatory.watched(), purgatory.num_keys(), purgatory.delayed()) == (1, 1, 2)
    assert events == []
    timer.advance_clock(10_100)
    assert events == ["a:complete", "a:expired", "b:complete", "b:expired"]
    assert (purgatory.watched(), purgatory.num_keys(), purgatory.delayed()) == (0, 0, 0)


def test_completed_watchers_are_purged_at_once_under_every_key(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    # Kafka would leave the completed entries under the other keys until its reaper swept them.
    ops = [FakeOperation(str(i), 100, []) for i in range(50)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["group", f"member-{op.name}"], now_ms=10_000)
    assert purgatory.watched() == 100
    for op in ops[:20]:
        op.ready = True
    assert purgatory.check_and_complete("group") == 20
    assert purgatory.watched() == 60
    assert purgatory.num_keys() == 31
    assert purgatory.delayed() == 30


def test_keys_without_watchers_do_not_leak(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    now = 10_000
    for generation in range(2_000):
        op = FakeOperation(str(generation), 30, [])
        purgatory.try_complete_else_watch(op, [f"member-{generation}"], now_ms=now)
        if generation % 2:
            op.ready = True
            purgatory.check_and_complete(f"member-{generation}")
        now += 1
        timer.advance_clock(now)
    timer.advance_clock(now + 30)
    assert (purgatory.watched(), purgatory.num_keys(), purgatory.delayed(), timer.size()) == (0, 0, 0, 0)


def test_on_complete_may_park_a_new_operation_under_the_same_key(
    purgatory: DelayedOperationPurgatory[FakeOperation], timer: Timer
) -> None:
    events: list[str] = []
    first = FakeOperation("first", 100, events, ready=False)
    second = FakeOperation("second", 100, events)
    purgatory.try_complete_else_watch(first, ["m"], now_ms=10_000)

    def park_next() -> None:
        purgatory.try_complete_else_watch(second, ["m"], now_ms=10_050)

    first.after_complete = park_next
    first.ready = True
    assert purgatory.check_and_complete("m") == 1
    assert (purgatory.watched(), purgatory.num_keys(), purgatory.delayed()) == (1, 1, 1)
    timer.advance_clock(10_150)
    assert events == ["first:complete", "second:complete", "second:expired"]


def test_purgatories_sharing_a_timer_count_only_their_own_delayed(timer: Timer) -> None:
    joins: DelayedOperationPurgatory[FakeOperation] = DelayedOperationPurgatory("Rebalance", timer)
    heartbeats: DelayedOperationPurgatory[FakeOperation] = DelayedOperationPurgatory("Heartbeat", timer)
    joins.try_complete_else_watch(FakeOperation("j", 300, []), ["g"], now_ms=10_000)
    heartbeats.try_complete_else_watch(FakeOperation("h1", 100, []), ["m1"], now_ms=10_000)
    heartbeats.try_complete_else_watch(FakeOperation("h2", 100, []), ["m2"], now_ms=10_000)
    assert (joins.delayed(), heartbeats.delayed(), timer.size()) == (1, 2, 3)
    timer.advance_clock(10_100)
    assert (joins.delayed(), heartbeats.delayed(), timer.size()) == (1, 0, 1)


def test_reschedule_moves_the_deadline_and_keeps_the_watch(timer: Timer,
                                                           purgatory: DelayedOperationPurgatory[FakeOperation]) -> None:
    events: list[str] = []
    op = FakeOperation("hb", 100, events)
    purgatory.try_complete_else_watch(op, ["member"], now_ms=10_000)
    assert purgatory.is_sole_watcher(op)
    timer.advance_clock(10_090)
    purgatory.reschedule(op, 100, now_ms=10_090)  # a heartbeat at 10,090: the deadline becomes 10,190
    timer.advance_clock(10_150)
    assert events == [] and purgatory.delayed() == 1 and timer.size() == 1
    timer.advance_clock(10_190)
    assert events == ["hb:complete", "hb:expired"]
    assert not purgatory.is_sole_watcher(op) and purgatory.delayed() == 0 and purgatory.watched() == 0


def test_reschedule_refuses_an_operation_it_does_not_hold(timer: Timer,
                                                          purgatory: DelayedOperationPurgatory[FakeOperation]) -> None:
    events: list[str] = []
    done = FakeOperation("done", 100, events, ready=True)
    purgatory.try_complete_else_watch(done, ["k"], now_ms=10_000)
    with pytest.raises(ValueError):
        purgatory.reschedule(done, 100, now_ms=10_000)
    other = DelayedOperationPurgatory[FakeOperation]("Other", timer)
    parked = FakeOperation("parked", 100, events)
    other.try_complete_else_watch(parked, ["k"], now_ms=10_000)
    with pytest.raises(ValueError):
        purgatory.reschedule(parked, 100, now_ms=10_000)


def test_is_sole_watcher_only_while_alone_under_its_one_key(timer: Timer,
                                                          purgatory: DelayedOperationPurgatory[FakeOperation]) -> None:
    events: list[str] = []
    a, b = FakeOperation("a", 100, events), FakeOperation("b", 100, events)
    purgatory.try_complete_else_watch(a, ["k"], now_ms=10_000)
    assert purgatory.is_sole_watcher(a)
    purgatory.try_complete_else_watch(b, ["k"], now_ms=10_000)
    assert not purgatory.is_sole_watcher(a) and not purgatory.is_sole_watcher(b)
    b.force_complete()
    assert purgatory.is_sole_watcher(a)
    # Watched under two keys, it is nobody's sole watcher; nor is one whose key was cancelled, or one
    # waiting in another purgatory.
    two = FakeOperation("two", 100, events)
    purgatory.try_complete_else_watch(two, ["x", "y"], now_ms=10_000)
    assert not purgatory.is_sole_watcher(two)
    assert purgatory.cancel_for_key("k") == [a] and not purgatory.is_sole_watcher(a)
    other = DelayedOperationPurgatory[FakeOperation]("Other", timer)
    elsewhere = FakeOperation("elsewhere", 100, events)
    other.try_complete_else_watch(elsewhere, ["k"], now_ms=10_000)
    assert other.is_sole_watcher(elsewhere) and not purgatory.is_sole_watcher(elsewhere)
