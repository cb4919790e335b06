"""CoordinatorRuntime's durable appends (runtime/appends.py): one future per drain, completed from the
log's round callback.

A fake log records what is submitted and lets the test play the writer (calling each append's callback);
a fake core emits appends. What must hold: a drain resolves only once its appends, and the appends their
completions emit, are complete; the log receives appends in the order the core emitted them; write
errors map to the same codes as before; completions run in the submitting request's context; the clock
advance after completions runs once per round.
"""
from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

import pytest

from coordinator_server.group.api import PendingAppend
from coordinator_server.group.coordinator import GroupCoordinator
from coordinator_server.group.records import OffsetCommitRecord, OffsetCommitValue
from coordinator_server.runtime import CoordinatorRuntime
from coordinator_server.storage import RecordTooLargeError, StorageError
from coordinator_server.storage.coordinator_log import CoordinatorLog
from protocol.errors import Errors

REQUEST = contextvars.ContextVar("request", default=None)


class FakeLog(CoordinatorLog):  # a subclass: the runtime is compiled (setup.py) and checks its arguments' types
    def __init__(self) -> None:
        self.submitted: list[tuple[str, int, Callable[[StorageError | None], None]]] = []
        self.refuse: dict[str, StorageError] = {}

    def submit(self, partition: int, records: Any, timestamp_ms: int,
               on_done: Callable[[StorageError | None], None], leader_epoch: int = 0) -> bool:
        name = records[0].group_id
        if name in self.refuse:
            raise self.refuse[name]
        self.submitted.append((name, partition, on_done))
        return True

    def names(self) -> list[str]:
        return [n for n, _, _ in self.submitted]

    def done(self, name: str, error: StorageError | None = None) -> None:
        """Play the writer: call back from outside any request's context, as the writer task does."""
        cb = next(cb for n, _, cb in self.submitted if n == name)
        contextvars.Context().run(cb, error)


class FakeCore(GroupCoordinator):  # (as FakeLog)
    def __init__(self) -> None:
        self.wall_offset_ms = 0
        self.appends: list[PendingAppend] = []
        self.completed: list[tuple[str, Errors, Any]] = []
        self.clock_advances = 0
        self.then: dict[str, Callable[[], None]] = {}  # what completing an append emits

    def emit(self, name: str, partition: int = 0) -> None:
        def on_complete(error: Errors, now_ms: int) -> None:
            self.completed.append((name, error, REQUEST.get()))
            if name in self.then:
                self.then[name]()

        rec = OffsetCommitRecord(name, "t", 0, OffsetCommitValue(1, -1, "", 0, -1))
        self.appends.append(PendingAppend(name, partition, (rec,), on_complete))

    def take_appends(self) -> list[PendingAppend]:
        out, self.appends = self.appends, []
        return out

    def advance_clock(self, now_ms: int) -> int:
        self.clock_advances += 1
        return 0

    def tick(self, now_ms: int) -> None:  # the clock moving with nothing due
        self.clock_advances += 1

    def next_expiration_ms(self) -> None:
        return None


@pytest.fixture
async def setup() -> tuple[CoordinatorRuntime, FakeLog, FakeCore]:
    log, core = FakeLog(), FakeCore()
    return CoordinatorRuntime(log, core, asyncio.get_running_loop()), log, core


async def drain_as(runtime: CoordinatorRuntime, request: str) -> asyncio.Task[None]:
    def start() -> asyncio.Task[None]:
        REQUEST.set(request)
        return asyncio.get_running_loop().create_task(runtime.appends.drain())

    task = contextvars.copy_context().run(start)
    await asyncio.sleep(0)
    return task


async def test_a_drain_resolves_once_its_appends_and_their_follow_ups_are_durable(setup: Any) -> None:
    runtime, log, core = setup
    core.emit("a", 0)
    core.emit("b", 1)
    core.then["a"] = lambda: core.emit("a-follow-up", 2)
    task = await drain_as(runtime, "req-1")
    assert log.names() == ["a", "b"] and not task.done()
    log.done("a")
    await asyncio.sleep(0)
    assert log.names() == ["a", "b", "a-follow-up"] and not task.done()
    log.done("b")
    await asyncio.sleep(0)
    assert not task.done()  # the follow-up is still on its way to the disk
    log.done("a-follow-up")
    await asyncio.sleep(0)
    assert task.done() and task.exception() is None
    # Each completion ran in the context of the request that caused it, not the writer's.
    assert core.completed == [("a", Errors.NONE, "req-1"), ("b", Errors.NONE, "req-1"),
                              ("a-follow-up", Errors.NONE, "req-1")]
    assert runtime.appends.pending == 0


async def test_write_errors_map_as_before_and_refusals_complete_after_every_submit(setup: Any) -> None:
    runtime, log, core = setup
    log.refuse["too-big"] = RecordTooLargeError("over message.max.bytes")
    log.refuse["poisoned"] = StorageError("partition failed earlier")
    core.emit("too-big")
    core.emit("poisoned")
    core.emit("ok")
    core.emit("fails-later")
    core.then["too-big"] = lambda: core.emit("after-too-big")
    task = await drain_as(runtime, "req")
    # The refusals' follow-ups queue behind everything the core emitted before them.
    assert log.names() == ["ok", "fails-later", "after-too-big"]
    log.done("ok")
    log.done("fails-later", StorageError("fsync failed"))
    log.done("after-too-big")
    await asyncio.sleep(0)
    assert task.done() and task.exception() is None
    assert {n: e for n, e, _ in core.completed} == {
        "too-big": Errors.MESSAGE_TOO_LARGE, "poisoned": Errors.KAFKA_STORAGE_ERROR, "ok": Errors.NONE,
        "fails-later": Errors.KAFKA_STORAGE_ERROR, "after-too-big": Errors.NONE}


async def test_the_clock_advances_once_per_round_not_per_append(setup: Any) -> None:
    runtime, log, core = setup
    for name in "abc":
        core.emit(name)
    task = await drain_as(runtime, "req")
    before = core.clock_advances
    for name in "abc":  # one round's callbacks, back to back
        log.done(name)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert task.done()
    assert core.clock_advances == before + 1


async def test_a_bug_in_a_completion_fails_the_drain_instead_of_hanging_it(setup: Any) -> None:
    runtime, log, core = setup
    core.emit("a")
    core.emit("b")

    def boom() -> None:
        raise RuntimeError("core bug")

    core.then["a"] = boom
    task = await drain_as(runtime, "req")
    log.done("a")
    await asyncio.sleep(0)
    assert not task.done()  # b is not durable yet: the group's lock stays held until it is
    log.done("b")
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="core bug"):
        task.result()
