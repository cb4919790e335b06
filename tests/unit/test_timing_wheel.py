"""The hierarchical timing wheel, driven by hand: no real clock anywhere."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_server.purgatory import Timer, TimerTask

ONE_DAY_MS = 86_400_000


class Clock:
    """What tasks read when they re-schedule from inside run(), as the core would."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms


class RecordingTask(TimerTask):
    def __init__(self, name: str, delay_ms: int, log: list[str], on_run: Callable[[], None] | None = None):
        super().__init__(delay_ms)
        self.name = name
        self.log = log
        self.on_run = on_run

    def run(self) -> None:
        self.log.append(self.name)
        if self.on_run is not None:
            self.on_run()


def drive_to(timer: Timer, target_ms: int) -> list[int]:
    """Advance the way the shell does: one wake-up per next_expiration_ms. Returns the wake-up times."""
    wakeups = []
    while (next_ms := timer.next_expiration_ms()) is not None and next_ms <= target_ms:
        wakeups.append(next_ms)
        timer.advance_clock(next_ms)
    timer.advance_clock(target_ms)
    return wakeups


def test_task_runs_when_clock_reaches_its_deadline() -> None:
    log: list[str] = []
    timer = Timer(start_ms=1_000)
    timer.add(RecordingTask("a", 10, log), now_ms=1_000)
    assert timer.advance_clock(1_009) == 0
    assert log == []
    assert timer.advance_clock(1_010) == 1
    assert log == ["a"]
    assert timer.size() == 0


def test_deadline_is_rounded_down_to_the_tick() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0, tick_ms=10)
    task = RecordingTask("a", 25, log)
    timer.add(task, now_ms=0)
    assert task.deadline_ms == 25
    assert timer.next_expiration_ms() == 20
    timer.advance_clock(19)
    assert log == []
    timer.advance_clock(20)
    assert log == ["a"]


def test_cancel_before_expiry_means_the_task_never_runs() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    task = RecordingTask("a", 5, log)
    timer.add(task, now_ms=0)
    task.cancel()
    task.cancel()  # idempotent
    assert task.cancelled and not task.scheduled
    assert timer.size() == 0
    assert timer.advance_clock(1_000) == 0
    assert log == []


def _lines_executed_by(fn: Callable[[], None]) -> int:
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()  # restore, not clear: a coverage tracer may be installed
    # A collection during fn() runs the finalizers of whatever earlier tests left behind, and their lines
    # would count as fn's (seen once in a full unit run): collect first, and not while counting.
    gc.collect()
    gc.disable()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
        gc.enable()
    return count


def test_cancel_does_not_scan_its_bucket() -> None:
    def lines_to_cancel_middle_of_bucket_holding(n: int) -> int:
        timer = Timer(start_ms=0)
        tasks = [RecordingTask(str(i), 7, []) for i in range(n)]
        for task in tasks:
            timer.add(task, now_ms=0)
        return _lines_executed_by(tasks[n // 2].cancel)

    assert lines_to_cancel_middle_of_bucket_holding(10) == lines_to_cancel_middle_of_bucket_holding(10_000)


def test_cancelling_every_task_of_a_huge_bucket_is_linear_overall() -> None:
    timer = Timer(start_ms=0)
    tasks = [RecordingTask(str(i), 3, []) for i in range(100_000)]
    for task in tasks:
        timer.add(task, now_ms=0)
    for task in tasks[::2] + tasks[1::2]:
        task.cancel()
    assert timer.size() == 0
    assert timer.next_expiration_ms() is None


def test_overflow_wheels_hold_a_deadline_one_day_away() -> None:
    log: list[str] = []
    timer = Timer(start_ms=5, tick_ms=1, wheel_size=20)
    task = RecordingTask("a", ONE_DAY_MS, log)
    timer.add(task, now_ms=5)
    deadline = 5 + ONE_DAY_MS
    wakeups = drive_to(timer, deadline - 1)
    assert log == []
    assert all(w <= deadline for w in wakeups)
    # A cascade through the overflow wheels takes a handful of wake-ups, not one per tick.
    assert len(wakeups) < 30
    timer.advance_clock(deadline)
    assert log == ["a"]


def test_a_single_large_jump_runs_overflowed_and_near_tasks_in_deadline_order() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0, tick_ms=1, wheel_size=20)
    for name, delay in [("day", ONE_DAY_MS), ("minute", 60_000), ("ms", 1), ("hour", 3_600_000)]:
        timer.add(RecordingTask(name, delay, log), now_ms=0)
    assert timer.advance_clock(10 * ONE_DAY_MS) == 4
    assert log == ["ms", "minute", "hour", "day"]


def test_task_added_during_run_with_a_due_deadline_runs_in_the_same_advance() -> None:
    log: list[str] = []
    clock = Clock(0)
    timer = Timer(start_ms=0)

    def add_children() -> None:
        timer.add(RecordingTask("zero", 0, log), clock.now_ms)
        # Scheduled from the parent's own deadline, so already due at the clock the timer advances to.
        timer.add(RecordingTask("from-deadline", 3, log), parent.deadline_ms)
        timer.add(RecordingTask("future", 3, log), clock.now_ms)

    parent = RecordingTask("parent", 10, log, on_run=add_children)
    timer.add(parent, now_ms=0)
    clock.now_ms = 500
    assert timer.advance_clock(clock.now_ms) == 3
    assert log == ["parent", "zero", "from-deadline"]
    assert timer.size() == 1
    timer.advance_clock(503)
    assert log[-1] == "future"


def test_task_added_during_run_for_later_waits_for_its_own_deadline() -> None:
    log: list[str] = []
    clock = Clock(0)
    timer = Timer(start_ms=0)

    def reschedule() -> None:
        if len(log) < 3:
            timer.add(RecordingTask("tick", 100, log, on_run=reschedule), clock.now_ms)

    timer.add(RecordingTask("tick", 100, log, on_run=reschedule), now_ms=0)
    for now in (99, 100, 199, 200, 299, 300, 400):
        clock.now_ms = now
        timer.advance_clock(now)
        assert len(log) == min(now // 100, 3)


def test_add_with_a_due_deadline_runs_at_the_next_advance_not_inside_add() -> None:
    # Kafka hands due tasks to an executor: they never run in the middle of the code that added them.
    log: list[str] = []
    timer = Timer(start_ms=0, tick_ms=10)
    timer.advance_clock(100)
    timer.add(RecordingTask("zero", 0, log), now_ms=100)
    timer.add(RecordingTask("negative", -5, log), now_ms=100)
    # Inside the current tick [100, 110) counts as due, as in Kafka.
    timer.add(RecordingTask("same-tick", 9, log), now_ms=100)
    timer.add(RecordingTask("next-tick", 10, log), now_ms=100)
    assert log == []
    assert timer.size() == 4
    assert timer.next_expiration_ms() == 100
    assert timer.advance_clock(100) == 3
    assert log == ["zero", "negative", "same-tick"]
    assert timer.size() == 1


def test_due_task_can_be_cancelled_before_the_next_advance() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    task = RecordingTask("zero", 0, log)
    timer.add(task, now_ms=0)
    task.cancel()
    assert timer.size() == 0 and timer.next_expiration_ms() is None
    assert timer.advance_clock(10) == 0 and log == []


def test_zero_delay_runs_at_the_next_advance_even_when_the_timer_was_not_advanced_recently() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    timer.add(RecordingTask("zero", 0, log), now_ms=50_000)
    assert log == []
    timer.advance_clock(50_000)
    assert log == ["zero"]


def test_next_expiration_is_none_when_only_cancelled_tasks_remain() -> None:
    timer = Timer(start_ms=0)
    tasks = [RecordingTask(str(d), d, []) for d in (5, 50, 5_000, ONE_DAY_MS)]
    for task in tasks:
        timer.add(task, now_ms=0)
    assert timer.next_expiration_ms() is not None
    for task in tasks:
        task.cancel()
    assert timer.next_expiration_ms() is None
    assert timer.size() == 0


def test_next_expiration_skips_cancelled_buckets_and_never_passes_the_earliest_live_task() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    early = RecordingTask("early", 5, log)
    live = RecordingTask("live", 7_000, log)
    timer.add(early, now_ms=0)
    timer.add(live, now_ms=0)
    assert timer.next_expiration_ms() == 5
    early.cancel()
    next_ms = timer.next_expiration_ms()
    assert next_ms is not None and next_ms <= 7_000
    wakeups = drive_to(timer, 7_000)
    assert log == ["live"]
    assert wakeups[-1] == 7_000


def test_a_cancelled_slot_is_requeued_when_reused() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    first = RecordingTask("first", 5, log)
    timer.add(first, now_ms=0)
    first.cancel()
    assert timer.next_expiration_ms() is None  # drops the emptied bucket from the queue
    timer.add(RecordingTask("second", 5, log), now_ms=0)
    assert timer.next_expiration_ms() == 5
    timer.advance_clock(5)
    assert log == ["second"]


def test_size_counts_only_scheduled_tasks() -> None:
    timer = Timer(start_ms=0)
    tasks = [RecordingTask(str(d), d, []) for d in (1, 2, 30, 40_000)]
    for task in tasks:
        timer.add(task, now_ms=0)
    assert timer.size() == 4
    tasks[2].cancel()
    assert timer.size() == 3
    timer.advance_clock(2)
    assert timer.size() == 1
    timer.add(RecordingTask("now", 0, []), now_ms=2)
    assert timer.size() == 2  # due, waiting for the next advance
    timer.advance_clock(2)
    assert timer.size() == 1


def test_readding_a_scheduled_task_moves_it_to_the_new_deadline() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    task = RecordingTask("a", 10, log)
    timer.add(task, now_ms=0)
    task.delay_ms = 100
    timer.add(task, now_ms=5)
    assert timer.size() == 1
    timer.advance_clock(104)
    assert log == []
    timer.advance_clock(105)
    assert log == ["a"]


def test_extending_moves_the_deadline_lazily_and_the_task_runs_at_the_new_one() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    task = RecordingTask("a", 10, log)
    timer.add(task, now_ms=0)
    bucket = task._bucket
    timer.extend(task, now_ms=5)  # deadline 15: stays in its bucket (expiring at 10)
    assert task._bucket is bucket and task.deadline_ms == 15
    assert drive_to(timer, 14) == [10]  # the old bucket expires and re-inserts it; nothing runs
    assert log == []
    timer.advance_clock(15)
    assert log == ["a"]


def test_extending_to_an_earlier_deadline_moves_the_task_at_once() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    task = RecordingTask("a", 100, log)
    timer.add(task, now_ms=0)
    task.delay_ms = 10
    timer.extend(task, now_ms=0)
    timer.advance_clock(10)
    assert log == ["a"]


def test_readding_a_cancelled_task_schedules_it_again() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    task = RecordingTask("a", 10, log)
    timer.add(task, now_ms=0)
    task.cancel()
    timer.add(task, now_ms=0)
    assert task.scheduled and not task.cancelled
    timer.advance_clock(10)
    assert log == ["a"]


def test_a_task_cancelled_by_an_earlier_task_of_the_same_bucket_does_not_run() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)
    victim = RecordingTask("victim", 10, log)
    timer.add(RecordingTask("killer", 10, log, on_run=victim.cancel), now_ms=0)
    timer.add(victim, now_ms=0)
    assert timer.advance_clock(10) == 1
    assert log == ["killer"]


def test_buckets_run_in_expiration_order_within_one_advance() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0, tick_ms=1, wheel_size=8)
    delays = [700, 3, 64, 9, 512, 1, 100]
    for delay in delays:
        timer.add(RecordingTask(str(delay), delay, log), now_ms=0)
    timer.advance_clock(10_000)
    assert log == [str(d) for d in sorted(delays)]


def test_a_raising_task_does_not_lose_the_rest_of_its_bucket() -> None:
    log: list[str] = []
    timer = Timer(start_ms=0)

    def boom() -> None:
        raise RuntimeError("bug in a timer callback")

    timer.add(RecordingTask("bad", 10, log, on_run=boom), now_ms=0)
    timer.add(RecordingTask("good", 10, log), now_ms=0)
    with pytest.raises(RuntimeError):
        timer.advance_clock(10)
    assert timer.next_expiration_ms() == 10
    timer.advance_clock(10)
    assert log == ["bad", "good"]


def test_advancing_backwards_is_a_no_op() -> None:
    log: list[str] = []
    timer = Timer(start_ms=1_000)
    timer.add(RecordingTask("a", 10, log), now_ms=1_000)
    assert timer.advance_clock(500) == 0
    timer.advance_clock(1_010)
    assert log == ["a"]


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(0, 20), (1, 1)])
def test_degenerate_wheel_shapes_are_refused(tick_ms: int, wheel_size: int) -> None:
    with pytest.raises(ValueError):
        Timer(start_ms=0, tick_ms=tick_ms, wheel_size=wheel_size)


# --- property tests against a reference model --------------------------------------------------------

DELAYS = st.integers(min_value=0, max_value=10**6)
ADVANCES = st.one_of(
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=0, max_value=5_000),
    st.integers(min_value=0, max_value=2 * 10**6),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), DELAYS, st.none()),
        # A task that, when it runs, adds a child with its own delay (re-entrant add).
        st.tuples(st.just("add"), DELAYS, st.integers(min_value=0, max_value=3_000)),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=10**6), st.none()),
        # Move a live task's deadline to now + the new delay (Timer.extend: lazily when it is later).
        st.tuples(st.just("extend"), st.integers(min_value=0, max_value=10**6), DELAYS),
        st.tuples(st.just("advance"), ADVANCES, st.none()),
    ),
    max_size=60,
)


class ModelTask(TimerTask):
    def __init__(self, harness: Harness, delay_ms: int, child_delay_ms: int | None) -> None:
        super().__init__(delay_ms)
        self.harness = harness
        self.child_delay_ms = child_delay_ms

    def run(self) -> None:
        self.harness.on_run(self)


class Harness:
    """Runs the Timer and records, per task, the clock reading when it ran."""

    def __init__(self, start_ms: int, tick_ms: int, wheel_size: int) -> None:
        self.now_ms = start_ms
        self.tick_ms = tick_ms
        self.timer = Timer(start_ms, tick_ms, wheel_size)
        self.tasks: list[ModelTask] = []
        self.ran_at: dict[int, int] = {}
        self.cancelled: set[int] = set()

    def add(self, delay_ms: int, child_delay_ms: int | None) -> ModelTask:
        task = ModelTask(self, delay_ms, child_delay_ms)
        self.tasks.append(task)
        self.timer.add(task, self.now_ms)
        return task

    def on_run(self, task: ModelTask) -> None:
        key = id(task)
        assert key not in self.ran_at, "a task ran twice"
        assert key not in self.cancelled, "a cancelled task ran"
        self.ran_at[key] = self.now_ms
        if task.child_delay_ms is not None:
            self.add(task.child_delay_ms, None)

    def cancel(self, index: int) -> None:
        if not self.tasks:
            return
        task = self.tasks[index % len(self.tasks)]
        if id(task) not in self.ran_at:
            self.cancelled.add(id(task))
        task.cancel()

    def extend(self, index: int, delay_ms: int) -> None:
        live = self.live()
        if not live:
            return
        task = live[index % len(live)]
        task.delay_ms = delay_ms
        self.timer.extend(task, self.now_ms)
        assert task.deadline_ms == self.now_ms + delay_ms

    def live(self) -> list[ModelTask]:
        return [t for t in self.tasks if id(t) not in self.ran_at and id(t) not in self.cancelled]

    def check_next_expiration(self) -> None:
        live = self.live()
        next_ms = self.timer.next_expiration_ms()
        if not live:
            assert next_ms is None
        else:
            earliest = min(t.deadline_ms for t in live)
            assert next_ms is not None
            assert next_ms <= earliest - earliest % self.tick_ms
        assert self.timer.size() == len(live)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, start_ms=st.integers(min_value=0, max_value=10**9), wheel_size=st.integers(2, 20))
def test_timer_with_1ms_tick_runs_exactly_the_tasks_a_heap_model_says_are_due(
    ops: list[tuple[str, int, int | None]], start_ms: int, wheel_size: int
) -> None:
    harness = Harness(start_ms, tick_ms=1, wheel_size=wheel_size)
    for kind, value, child in ops:
        if kind == "add":
            task = harness.add(value, child)
            # Nothing runs inside add: even a zero delay waits for the next advance.
            assert id(task) not in harness.ran_at
        elif kind == "cancel":
            harness.cancel(value)
        elif kind == "extend":
            harness.extend(value, child)
        else:
            harness.now_ms += value
            ran_before = set(harness.ran_at)
            harness.timer.advance_clock(harness.now_ms)
            # The heap reference: every scheduled, uncancelled deadline <= now, children included.
            due = {
                id(t)
                for t in harness.tasks
                if t.deadline_ms <= harness.now_ms and id(t) not in harness.cancelled
            }
            assert set(harness.ran_at) == due
            newly_ran = set(harness.ran_at) - ran_before
            assert all(harness.ran_at[k] == harness.now_ms for k in newly_ran)
        harness.check_next_expiration()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=OPS,
    start_ms=st.integers(min_value=0, max_value=10**9),
    tick_ms=st.sampled_from([2, 3, 7, 10, 64, 1_000]),
    wheel_size=st.integers(2, 20),
)
def test_timer_with_coarse_tick_never_runs_early_and_never_late(
    ops: list[tuple[str, int, int | None]], start_ms: int, tick_ms: int, wheel_size: int
) -> None:
    harness = Harness(start_ms, tick_ms=tick_ms, wheel_size=wheel_size)
    for kind, value, child in ops:
        if kind == "add":
            harness.add(value, child)
        elif kind == "cancel":
            harness.cancel(value)
        elif kind == "extend":
            harness.extend(value, child)
        else:
            harness.now_ms += value
            harness.timer.advance_clock(harness.now_ms)
            for task in harness.tasks:
                if id(task) in harness.cancelled:
                    continue
                if id(task) in harness.ran_at:
                    # Never before its deadline rounded down to the tick.
                    assert harness.ran_at[id(task)] >= task.deadline_ms - task.deadline_ms % tick_ms
                else:
                    assert task.deadline_ms > harness.now_ms, "a due task did not run"
        harness.check_next_expiration()
