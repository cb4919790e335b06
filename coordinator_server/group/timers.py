"""One keyed-timer service for every group manager (Kafka's CoordinatorTimer).

A key names at most one timer task on the shard's timing wheel: scheduling under a key replaces the task
already there, and a key is cancelled by name. The operation is a plain callable; it must re-check the group
when it runs (is the member still there, at the epoch or generation the timer was set for?), because a
cancelled task may already have been taken off the wheel in the same tick, and because the world it was
scheduled in may have moved on. Keys are tuples whose first element names the group type that owns them
(`"consumer"`, `"classic"`), so one manager's keys never collide with another's.
"""
from __future__ import annotations

from collections.abc import Callable

from coordinator_server.purgatory import Timer, TimerTask

TimerKey = tuple[str, ...]


class KeyedTimer:
    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self._tasks: dict[TimerKey, _KeyedTask] = {}

    def schedule(self, key: TimerKey, delay_ms: int, now_ms: int, operation: Callable[[], None]) -> None:
        """Run `operation` after `delay_ms`, replacing whatever was scheduled under `key`."""
        old = self._tasks.get(key)
        if old is not None:
            old.cancel()
        task = _KeyedTask(self, key, delay_ms, operation)
        self._tasks[key] = task
        self.timer.add(task, now_ms)

    def schedule_if_absent(self, key: TimerKey, delay_ms: int, now_ms: int, operation: Callable[[], None]) -> None:
        """As `schedule`, unless a timer is already scheduled under `key` (it is left alone)."""
        if key not in self._tasks:
            self.schedule(key, delay_ms, now_ms, operation)

    def cancel(self, key: TimerKey) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def is_scheduled(self, key: TimerKey) -> bool:
        return key in self._tasks

    def scheduled(self, owner: str) -> dict[TimerKey, int]:
        """The keys of one owner (their first element) and their deadlines, for tests and metrics."""
        return {key: task.deadline_ms for key, task in self._tasks.items() if key[0] == owner and task.scheduled}

    def _fired(self, task: _KeyedTask) -> None:
        # Only the task still registered under its key forgets the key: a replaced task never runs (it was
        # cancelled), but the check keeps the table right if one does.
        if self._tasks.get(task.key) is task:
            del self._tasks[task.key]
        task.operation()


class _KeyedTask(TimerTask):
    __slots__ = ("key", "operation", "owner")

    def __init__(self, owner: KeyedTimer, key: TimerKey, delay_ms: int, operation: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.owner = owner
        self.key = key
        self.operation = operation

    def run(self) -> None:
        self.owner._fired(self)
