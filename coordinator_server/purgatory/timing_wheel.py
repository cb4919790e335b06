"""Hierarchical timing wheel: Kafka's TimingWheel, TimerTaskList and SystemTimer, driven by an injected clock.

Theory of operation
-------------------
A wheel has ``wheel_size`` buckets of ``tick_ms`` each, so it covers ``interval_ms = tick_ms * wheel_size``
starting at its ``current_ms`` (always a multiple of its tick). A task whose deadline falls inside that
window goes into the bucket for ``deadline // tick_ms``; a later one goes to an overflow wheel whose tick is
this wheel's interval (created lazily, so a timer with only short timeouts never pays for it). Inside one
window every virtual bucket id maps to a distinct slot, which is why a bucket can be reused only after it
expired and was flushed.

Buckets are circular doubly-linked lists whose sentinel is the bucket itself, with the links stored on the
task: cancel is an O(1) unlink and a task costs one object, no separate entry.

Time only moves inside ``Timer.advance_clock``. A heap orders buckets by expiration; a bucket is pushed
only when its expiration changes (Kafka's ``setExpiration`` returning true), i.e. once per use of a slot.
Advancing pops every due bucket in expiration order, moves the wheels' clocks to that expiration, then
re-inserts the bucket's tasks: at that clock they either fall through to a finer wheel or are due and run.
Buckets emptied by cancels are dropped lazily from the heap top by ``next_expiration_ms``.

A task that is already due when added does not run inside ``add``: it waits in a due list for the next
``advance_clock``, as Kafka hands such tasks to an executor that runs once the adding thread has released
its group lock. So a delayed operation never completes in the middle of the request that scheduled it.
"""

from __future__ import annotations

import heapq
import itertools
from abc import ABCMeta, abstractmethod
from typing import Final, cast

from mypy_extensions import mypyc_attr


# TimerTask is subclassed outside the compiled modules (setup.py), so its base must allow that too.
@mypyc_attr(allow_interpreted_subclasses=True)
class _Link:
    """A node of a circular doubly-linked list. Buckets are the sentinels, tasks the members."""

    __slots__ = ("_next", "_prev")

    _next: _Link
    _prev: _Link


# Unlinked tasks point here instead of at themselves: a self-reference would be a cycle, and cycles are
# only freed by the cyclic GC, which matters with millions of short-lived timer tasks.
_UNLINKED: Final = _Link()
_UNLINKED._next = _UNLINKED
_UNLINKED._prev = _UNLINKED


@mypyc_attr(allow_interpreted_subclasses=True)
class TimerTask(_Link, metaclass=ABCMeta):
    """Base class for something scheduled on the Timer. Subclasses override run()."""

    __slots__ = ("_bucket", "_cancelled", "deadline_ms", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.deadline_ms = -1
        self._bucket: _Bucket | None = None
        self._cancelled = False
        self._next = _UNLINKED
        self._prev = _UNLINKED

    @property
    def scheduled(self) -> bool:
        """True while the task sits in a timer bucket (added, not yet run, not cancelled)."""
        return self._bucket is not None

    @property
    def cancelled(self) -> bool:
        """True if cancel() removed the task from the timer before it ran (reset by re-adding it)."""
        return self._cancelled

    def cancel(self) -> None:
        if self._bucket is not None:
            self._cancelled = True
            self._unlink()

    @abstractmethod
    def run(self) -> None:
        """Called by the timer when the deadline passes, unless cancelled first."""

    def _unlink(self) -> None:
        bucket = self._bucket
        assert bucket is not None
        prev, nxt = self._prev, self._next
        prev._next = nxt
        nxt._prev = prev
        self._next = _UNLINKED
        self._prev = _UNLINKED
        self._bucket = None
        bucket.timer._size -= 1


class _Bucket(_Link):
    """Kafka's TimerTaskList: one slot of one wheel, holding tasks that expire within one tick of it."""

    __slots__ = ("expiration_ms", "timer")

    def __init__(self, timer: Timer) -> None:
        self._next = self
        self._prev = self
        self.timer = timer
        self.expiration_ms = -1

    def is_empty(self) -> bool:
        return self._next is self

    def append(self, task: TimerTask) -> None:
        tail = self._prev
        task._prev = tail
        task._next = self
        tail._next = task
        self._prev = task
        task._bucket = self
        self.timer._size += 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Returns True if the expiration changed, i.e. the bucket must be (re)queued."""
        if self.expiration_ms == expiration_ms:
            return False
        self.expiration_ms = expiration_ms
        return True


class _TimingWheel:
    __slots__ = ("buckets", "current_ms", "interval_ms", "overflow", "tick_ms", "timer", "wheel_size")

    def __init__(self, timer: Timer, tick_ms: int, wheel_size: int, start_ms: int) -> None:
        self.timer = timer
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_ms = start_ms - start_ms % tick_ms
        self.buckets = [_Bucket(timer) for _ in range(wheel_size)]
        self.overflow: _TimingWheel | None = None

    def advance_clock(self, time_ms: int) -> None:
        # Never backwards and only whole ticks: the slot mapping assumes current_ms is a tick multiple.
        if time_ms >= self.current_ms + self.tick_ms:
            self.current_ms = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_ms)

    def overflow_wheel(self) -> _TimingWheel:
        if self.overflow is None:
            self.overflow = _TimingWheel(self.timer, self.interval_ms, self.wheel_size, self.current_ms)
        return self.overflow


class Timer:
    """Kafka's SystemTimer: a hierarchical timing wheel plus an ordering of bucket expirations."""

    __slots__ = ("_due", "_queue", "_runs", "_seq", "_size", "_wheel")

    def __init__(self, start_ms: int, tick_ms: int = 1, wheel_size: int = 20) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            # With one slot the overflow wheel's tick equals its parent's and the chain never ends.
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._size = 0
        self._runs = 0
        # The sequence number breaks expiration ties so the heap never compares buckets.
        self._seq = itertools.count()
        self._queue: list[tuple[int, int, _Bucket]] = []
        self._wheel = _TimingWheel(self, tick_ms, wheel_size, start_ms)
        # Tasks that were due when added; a bucket so that cancel stays an O(1) unlink.
        self._due = _Bucket(self)

    def add(self, task: TimerTask, now_ms: int) -> None:
        """Schedule task at now_ms + task.delay_ms. A task already due (delay_ms <= 0, or a deadline inside
        the current tick of the finest wheel, Kafka's rule) runs at the next advance_clock, not here."""
        if task._bucket is not None:
            task._unlink()
        task._cancelled = False
        task.deadline_ms = now_ms + task.delay_ms
        if task.delay_ms <= 0 or not self._insert(task):
            self._due.append(task)

    def extend(self, task: TimerTask, now_ms: int) -> None:
        """Move task's deadline to now_ms + task.delay_ms, as `add` does; when that is no earlier than its
        deadline so far and it sits in a wheel bucket, lazily: only the deadline changes, and when its
        bucket expires the flush re-inserts it by the new deadline instead of running it. A member's
        heartbeat moves its session deadline this way, several times per session, for the price of an
        attribute store; the bucket's expiration costs one extra re-insert per session timeout."""
        deadline_ms = now_ms + task.delay_ms
        bucket = task._bucket
        if bucket is not None and bucket is not self._due and deadline_ms >= task.deadline_ms:
            task.deadline_ms = deadline_ms
            return
        self.add(task, now_ms)

    def advance_clock(self, now_ms: int) -> int:
        """Run every task due by now_ms: first those added already due, then expired buckets in expiration
        order (and anything they make due meanwhile); returns how many ran."""
        runs_before = self._runs
        queue = self._queue
        while True:
            self._run_due()
            if not (queue and queue[0][0] <= now_ms):
                break
            expiration_ms, _, bucket = heapq.heappop(queue)
            if bucket.expiration_ms != expiration_ms:
                continue
            self._wheel.advance_clock(expiration_ms)
            self._flush(bucket, expiration_ms)
        # Safe only now that nothing <= now_ms is queued: no live bucket is left behind the wheel clocks.
        # Keeping the clocks current makes later adds land in the finest wheel that fits.
        self._wheel.advance_clock(now_ms)
        return self._runs - runs_before

    def _run_due(self) -> None:
        due = self._due
        while not due.is_empty():
            task = cast(TimerTask, due._next)
            task._unlink()
            self._run(task)

    def next_expiration_ms(self) -> int | None:
        """The earliest expiration of a bucket that still holds a task, or None if nothing is scheduled.
        Tasks added already due make it the wheel's current time: run them as soon as possible."""
        if not self._due.is_empty():
            return self._wheel.current_ms
        queue = self._queue
        while queue:
            expiration_ms, _, bucket = queue[0]
            live = bucket.expiration_ms == expiration_ms
            if live and not bucket.is_empty():
                return expiration_ms
            heapq.heappop(queue)
            if live:
                # Emptied by cancels. Forgetting the expiration makes the next add to this slot requeue it.
                bucket.expiration_ms = -1
        return None

    def size(self) -> int:
        """Number of scheduled tasks: added, not yet run, not cancelled."""
        return self._size

    def _insert(self, task: TimerTask) -> bool:
        """Put task in the finest wheel whose window covers its deadline; False if it is already due."""
        deadline_ms = task.deadline_ms
        wheel = self._wheel
        if deadline_ms < wheel.current_ms + wheel.tick_ms:
            return False
        while deadline_ms >= wheel.current_ms + wheel.interval_ms:
            wheel = wheel.overflow_wheel()
        virtual_id = deadline_ms // wheel.tick_ms
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        bucket.append(task)
        if bucket.set_expiration(virtual_id * wheel.tick_ms):
            heapq.heappush(self._queue, (bucket.expiration_ms, next(self._seq), bucket))
        return True

    def _flush(self, bucket: _Bucket, expiration_ms: int) -> None:
        # Re-inserting cannot land in this bucket: the wheel clocks now sit at its expiration, so its
        # tasks are either due or belong to a finer wheel, and new adds map to other slots of the window.
        bucket.expiration_ms = -1
        try:
            while not bucket.is_empty():
                task = cast(TimerTask, bucket._next)
                task._unlink()
                if not self._insert(task):
                    self._due.append(task)
        except BaseException:
            # A task raised: keep the rest of the bucket due so the next advance runs them.
            if not bucket.is_empty() and bucket.set_expiration(expiration_ms):
                heapq.heappush(self._queue, (expiration_ms, next(self._seq), bucket))
            raise

    def _run(self, task: TimerTask) -> None:
        self._runs += 1
        task.run()
