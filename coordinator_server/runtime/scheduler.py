"""Every request of a group enters the runtime here: `write` (the group's lock, the core call, the answer once
the call's records are durable) or `read` (answered at once while no request of the group holds its lock,
else queued as a write, so it sees their outcome). No task and no future inside: a request's answer comes
through its `on_result` callback, and a bug met in the core or while writing through `on_failure`."""
from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import Any, Final, Generic, NamedTuple, TypeVar

from coordinator_server.group.coordinator import GroupCoordinator

from .appends import AppendPipeline
from .locks import KeyedLocks, QueuedCaller
from .timer import LoopTimer

T = TypeVar("T")
R = TypeVar("R")


class GroupScheduler:
    """`rearm` runs after a read (the timers due then run, and what they emit is written)."""

    def __init__(self, coordinator: GroupCoordinator, loop: asyncio.AbstractEventLoop, timer: LoopTimer,
                 appends: AppendPipeline, rearm: Callable[[], None]) -> None:
        self.coordinator = coordinator
        self.loop = loop
        self.timer = timer
        self.appends = appends
        self._rearm = rearm
        self.locks = KeyedLocks()
        # Per group, the calls queued behind the last waiter for its lock (`write`).
        self._batches: dict[str, _HeldBatch] = {}

    def write_answered(self, group_id: str, call: Callable[[T, int], R], inp: T, on_result: Callable[[R], None],
                       on_failure: Callable[[BaseException], None]) -> None:
        """`write` for a core call that answers in the call itself (LeaveGroup)."""
        self.write(group_id, _Immediate(call).handle, inp, on_result, on_failure)

    def read(self, group_id: str, read: Callable[[T, int], R], inp: T, on_result: Callable[[R], None],
             on_failure: Callable[[BaseException], None]) -> None:
        if self.locks.busy(group_id):
            self.write(group_id, _Immediate(read).handle, inp, on_result, on_failure)
            return
        try:
            result = read(inp, self.timer.now_ms())
            self._rearm()  # timers due now run after it, as after any call; their writes are theirs
        except Exception as e:
            on_failure(e)
            return
        on_result(result)

    def write(self, group_id: str, handle: Callable[[T, int, Callable[[R], None]], None], inp: T,
              on_result: Callable[[R], None], on_failure: Callable[[BaseException], None]) -> None:
        """The group's lock is taken at once when free, else once handed over (in turn); the core is called
        and the lock released once the appends of this call are complete. `on_result` gets the core's reply
        once both the reply is there and those appends are complete (a parked JoinGroup's reply comes later,
        from another member's call; a first JoinGroup's MEMBER_ID_REQUIRED comes at once but waits for the
        group's record). `on_failure`: a bug met in the core or while writing.

        Calls that find the lock taken queue as one batch while nobody queues behind them: a rebalance's
        requests arrive together, and once the group's record is being written every one of them waits, so
        one lock waiter stands for many of them. The batch starts from the release that hands it the lock,
        so its answers go out with those of the call that held it, not a loop turn later."""
        if self.locks.try_hold(group_id):
            self._run_one(group_id, handle, inp, on_result, on_failure)
            return
        batch = self._batches.get(group_id)
        if batch is not None and self.locks.last_waiter(group_id) is batch.waiter:
            batch.calls.append(_HeldCall(handle, inp, on_result, on_failure, contextvars.copy_context()))
            return
        calls: list[_HeldCall] = [_HeldCall(handle, inp, on_result, on_failure, contextvars.copy_context())]
        waiter = self.locks.queue(group_id, lambda: self._start_batch(group_id, calls))
        self._batches[group_id] = _HeldBatch(waiter, calls)

    def _run_one(self, group_id: str, handle: Callable[[T, int, Callable[[R], None]], None], inp: T,
                 on_result: Callable[[R], None], on_failure: Callable[[BaseException], None]) -> None:
        """The lock was free and is now held for this one call (most requests: every commit of a consumer,
        the first join of a round): `_run_held` without the list, the queue entry and the context copy."""
        try:
            pending = self._call(handle, inp, on_result, on_failure)
        except BaseException:
            self.locks.release(group_id)
            raise
        if pending is None or pending.done:
            self.locks.release(group_id)
        else:
            pending.release_to(self.locks, group_id)

    def _start_batch(self, group_id: str, calls: list[_HeldCall]) -> None:
        batch = self._batches.get(group_id)
        if batch is not None and batch.calls is calls:
            del self._batches[group_id]  # handed the lock: calls arriving from now on queue behind it
        self._run_held(group_id, calls, 0)

    def _run_held(self, group_id: str, calls: list[_HeldCall], start: int) -> None:
        """The group's lock is held for `calls[start:]`: each is made in turn, in its own request's context,
        the lock passing from one to the next without being released; a call's appends are waited for before
        the next (continued from their completion, no loop turn in between); the lock is released after the
        last. A long queue yields to the loop every `_BATCH_PER_CALLBACK` calls (other groups' requests are
        served in between)."""
        end = min(len(calls), start + _BATCH_PER_CALLBACK)
        try:
            i = start
            while i < end:
                call = calls[i]
                i += 1
                pending = call.context.run(self._call_held, call)
                if pending is not None and not pending.done:
                    pending.then = functools.partial(self._run_held, group_id, calls, i)
                    return
        except BaseException:
            self.locks.release(group_id)
            raise
        if end < len(calls):
            self.loop.call_soon(self._run_held, group_id, calls, end)
        else:
            self.locks.release(group_id)

    def _call_held(self, call: _HeldCall) -> _HeldReply[Any] | None:
        return self._call(call.handle, call.inp, call.on_result, call.on_failure)

    def _call(self, handle: Callable[[T, int, Callable[[R], None]], None], inp: T,
              on_result: Callable[[R], None], on_failure: Callable[[BaseException], None]) -> _HeldReply[R] | None:
        """Call the core for one request; what waits for its appends when it made any."""
        held: _HeldReply[R] = _HeldReply(on_result, on_failure)
        timer = self.timer
        try:
            now_ms = timer.now_ms()
            handle(inp, now_ms, held)
            timer.advance(now_ms)
            timer.arm()
            appends = self.coordinator.take_appends()
        except Exception as e:
            on_failure(e)
            return None
        if not appends:
            held.written()
            return None
        self.appends.write_group(appends, held.resolved)
        return held


# Queued calls of one group made per loop callback once its lock is handed over.
_BATCH_PER_CALLBACK: Final = 64


class _HeldCall(NamedTuple):
    handle: Callable[[Any, int, Callable[[Any], None]], None]
    inp: Any
    on_result: Callable[[Any], None]
    on_failure: Callable[[BaseException], None]
    context: contextvars.Context  # the request's: it runs from a queue, in another request's callback


class _HeldBatch:
    """Calls queued, in order, behind one waiter for their group's lock."""

    __slots__ = ("calls", "waiter")

    def __init__(self, waiter: QueuedCaller, calls: list[_HeldCall]) -> None:
        self.waiter = waiter
        self.calls = calls


class _Immediate(Generic[T, R]):
    """A core call that answers in the call itself (LeaveGroup, a queued OffsetFetch), in the shape of
    those that answer through a reply callback."""

    __slots__ = ("call",)

    def __init__(self, call: Callable[[T, int], R]) -> None:
        self.call = call

    def handle(self, inp: T, now_ms: int, reply: Callable[[R], None]) -> None:
        reply(self.call(inp, now_ms))


class _HeldReply(Generic[R]):
    """The core's reply to a request taken by `write`, passed on once the call's appends are complete too
    (only the first reply counts); once they are complete (`resolved`) the calls queued behind it run
    (`then`, set when they were not complete by the time the call returned). One object per call: a
    commit's path builds nothing else."""

    __slots__ = ("done", "durable", "has_result", "key", "locks", "on_failure", "on_result", "result", "then")

    def __init__(self, on_result: Callable[[R], None], on_failure: Callable[[BaseException], None]) -> None:
        self.on_result = on_result
        self.on_failure = on_failure
        self.durable = False
        self.has_result = False
        self.result: R | None = None
        self.done = False
        self.then: Callable[[], None] | None = None
        # The lock a lone call (`_run_one`) releases once resolved: set instead of a `then` closure, so a
        # commit's path allocates nothing more than this object.
        self.locks: KeyedLocks | None = None
        self.key = ""

    def release_to(self, locks: KeyedLocks, key: str) -> None:
        self.locks = locks
        self.key = key

    def __call__(self, result: R) -> None:
        """The core's reply (the object itself is the `reply` callback: no bound method per call)."""
        self.reply(result)

    def reply(self, result: R) -> None:
        if self.has_result:
            return
        self.has_result = True
        self.result = result
        if self.durable:
            self.on_result(result)

    def written(self) -> None:
        self.durable = True
        if self.has_result:
            self.on_result(self.result)  # type: ignore[arg-type]

    def resolved(self, error: BaseException | None) -> None:
        self.done = True
        if error is not None:
            self.on_failure(error)
        else:
            self.written()
        then = self.then
        if then is not None:
            self.then = None
            then()
        locks = self.locks
        if locks is not None:
            self.locks = None
            locks.release(self.key)
