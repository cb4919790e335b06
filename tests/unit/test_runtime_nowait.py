"""GroupScheduler.write (runtime/scheduler.py), every group request's one entry, without a task. A reply goes out only
once the call's own appends are durable; a request that finds the group's lock taken waits its turn behind
everyone already waiting, whether its caller awaits the answer or takes it by callback (queued requests run as
a batch, a slice per loop callback); a bug in the core or in a write fails the request and frees the lock."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from coordinator_server.net.awaiting import as_future
from coordinator_server.runtime import CoordinatorRuntime
from coordinator_server.storage import StorageError
from tests.unit.test_runtime_appends import FakeCore, FakeLog


@pytest.fixture
async def setup() -> tuple[CoordinatorRuntime, FakeLog, FakeCore]:
    log, core = FakeLog(), FakeCore()
    return CoordinatorRuntime(log, core, asyncio.get_running_loop()), log, core


class Calls:
    """Core calls that record their order, reply (now or later) and emit appends as told."""

    def __init__(self, core: FakeCore) -> None:
        self.core = core
        self.order: list[str] = []
        self.replies: dict[str, Callable[[str], None]] = {}
        self.results: list[str] = []
        self.failures: list[BaseException] = []

    def handle(self, *, reply_now: bool = True, emit: bool = False, crash: bool = False
               ) -> Callable[[str, int, Callable[[str], None]], None]:
        def call(inp: str, now_ms: int, reply: Callable[[str], None]) -> None:
            self.order.append(inp)
            if crash:
                raise RuntimeError("core bug")
            if emit:
                self.core.emit(inp)
            self.replies[inp] = reply
            if reply_now:
                reply(f"answer-{inp}")

        return call

    def nowait(self, runtime: CoordinatorRuntime, name: str, **kwargs: Any) -> None:
        runtime._scheduler.write("g", self.handle(**kwargs), name, self.results.append, self.failures.append)

    def awaited(self, runtime: CoordinatorRuntime, name: str) -> asyncio.Future[str]:
        return as_future(lambda inp, ok, fail: runtime._scheduler.write("g", self.handle(), inp, ok, fail), name)


async def test_a_reply_given_at_once_waits_for_the_calls_own_appends(setup: Any) -> None:
    runtime, log, core = setup
    calls = Calls(core)
    calls.nowait(runtime, "first-join", emit=True)  # MEMBER_ID_REQUIRED at once, the group's record to write
    assert calls.results == []
    log.done("first-join")
    await asyncio.sleep(0)
    assert calls.results == ["answer-first-join"]
    assert len(runtime.locks) == 0


async def test_a_parked_reply_goes_out_when_it_comes(setup: Any) -> None:
    runtime, _log, core = setup
    calls = Calls(core)
    calls.nowait(runtime, "parked-join", reply_now=False)
    assert calls.results == [] and len(runtime.locks) == 0  # nothing written: the lock is free again
    calls.replies["parked-join"]("joined")
    calls.replies["parked-join"]("a second reply")  # only the first counts
    assert calls.results == ["joined"]


async def test_requests_that_find_the_lock_taken_wait_their_turn_in_order(setup: Any) -> None:
    runtime, log, core = setup
    calls = Calls(core)
    calls.nowait(runtime, "a", emit=True)  # holds the group's lock until its record is durable
    awaiting = calls.awaited(runtime, "b")
    await asyncio.sleep(0)
    calls.nowait(runtime, "c")
    calls.nowait(runtime, "d", emit=True)
    calls.nowait(runtime, "e")
    assert calls.order == ["a"]
    log.done("a")
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls.order == ["a", "b", "c", "d"]  # e waits behind d's record
    assert awaiting.done() and awaiting.result() == "answer-b"
    log.done("d")
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls.order == ["a", "b", "c", "d", "e"]
    assert calls.results == ["answer-a", "answer-c", "answer-d", "answer-e"]
    assert len(runtime.locks) == 0


async def test_a_bug_fails_the_request_and_frees_the_lock(setup: Any) -> None:
    runtime, log, core = setup
    calls = Calls(core)
    calls.nowait(runtime, "crashes", crash=True)
    assert [str(e) for e in calls.failures] == ["core bug"] and len(runtime.locks) == 0
    core.then["written"] = lambda: (_ for _ in ()).throw(RuntimeError("completion bug"))
    calls.nowait(runtime, "written", emit=True)
    calls.nowait(runtime, "next")
    log.done("written", StorageError("disk gone"))
    for _ in range(3):
        await asyncio.sleep(0)
    assert [str(e) for e in calls.failures] == ["core bug", "completion bug"]
    assert calls.results == ["answer-next"] and len(runtime.locks) == 0


async def test_a_long_queue_runs_in_order_a_slice_per_loop_callback(setup: Any) -> None:
    runtime, log, core = setup
    calls = Calls(core)
    calls.nowait(runtime, "record", emit=True)
    names = [f"join-{i}" for i in range(200)]
    for name in names:
        calls.nowait(runtime, name)
    awaiting = calls.awaited(runtime, "leave")
    await asyncio.sleep(0)
    log.done("record")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert 1 < len(calls.order) < 201  # other work of the loop gets a turn within the queue
    for _ in range(10):
        await asyncio.sleep(0)
    assert calls.order == ["record", *names, "leave"]  # the awaiting caller queued behind them all
    assert calls.results == [f"answer-{n}" for n in ["record", *names]]
    assert awaiting.done() and len(runtime.locks) == 0
