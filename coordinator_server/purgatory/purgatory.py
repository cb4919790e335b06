"""Kafka's DelayedOperationPurgatory without threads: watch lists by key plus the shared timer.

Theory of operation
-------------------
``try_complete_else_watch`` tries the operation, watches it under its keys, tries again (the condition
may have become true between the first try and the watch in Kafka; here it guards conditions that depend
on being watched), and only then puts it on the timer. ``check_and_complete(key)`` re-tries what is
watched under ``key`` after the state behind that key changed.

Kafka leaves a completed operation in its other watch lists until a reaper thread sweeps them, with a
sweep every ``purge_interval`` completions costing O(all watched entries). Here the operation remembers
its keys and tells its purgatory when it completes (by any path: condition, timeout, or an explicit
``force_complete``), and the purgatory unwatches it at once, in O(number of keys). So watch lists only
ever hold live operations, a key whose last watcher goes is dropped immediately (no leak when millions
of member keys come and go), and there is nothing left for a reaper to do.

Re-entrancy: ``on_complete`` may call back into the purgatory (complete other keys, park new operations).
Iteration is over snapshots, and an operation is unwatched before ``on_complete`` runs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from coordinator_server.purgatory.operation import DelayedOperation
from coordinator_server.purgatory.timing_wheel import Timer

T = TypeVar("T", bound=DelayedOperation)


class DelayedOperationPurgatory(Generic[T]):
    """Operations waiting for a condition on some keys, or for their timeout, whichever comes first."""

    __slots__ = ("_delayed", "_listener", "_watched", "_watchers", "name", "purge_interval", "timer")

    def __init__(self, name: str, timer: Timer, purge_interval: int = 1000) -> None:
        self.name = name
        self.timer = timer
        # Kept for Kafka's signature; completed operations are unwatched eagerly, so no sweep is needed.
        self.purge_interval = purge_interval
        # Keyed by id(op): the dict holds the op itself, so the id cannot be reused while present, and
        # operations need not be hashable by value.
        self._watchers: dict[Hashable, dict[int, T]] = {}
        self._watched = 0
        self._delayed = 0
        # One bound method shared by every operation here, rather than one per operation.
        self._listener = self._on_operation_completed

    def try_complete_else_watch(self, operation: T, watch_keys: Iterable[Hashable], now_ms: int) -> bool:
        """Complete the operation now if it can be, else watch it under every key and put it on the timer.

        Returns True iff the operation got completed during this call: by try_complete, or by the timer
        when its deadline is already due (then on_expiration has run too). An operation completed before
        the call returns False and is not watched.
        """
        if operation.is_completed:
            return False
        if operation._listener is not None:
            raise ValueError(f"{operation!r} is already waiting in a purgatory")
        keys = tuple(dict.fromkeys(watch_keys))
        if not keys:
            raise ValueError("an operation needs at least one watch key")
        if operation.safe_try_complete():
            return True
        operation._watch_keys = keys
        operation._listener = self._listener
        self._delayed += 1
        for key in keys:
            ops = self._watchers.get(key)
            if ops is None:
                ops = self._watchers[key] = {}
            ops[id(operation)] = operation
        if len(keys) == 1:
            operation._watch_list = ops  # type: ignore[assignment]
        self._watched += len(keys)
        # Second try, as Kafka: an operation whose condition only holds once watched completes here, and
        # its completion unwatches it again through the listener.
        if operation.safe_try_complete():
            return True
        self.timer.add(operation, now_ms)
        return operation.is_completed

    def check_and_complete(self, key: Hashable) -> int:
        """Re-try every operation watched under key; returns how many completed."""
        ops = self._watchers.get(key)
        if ops is None:
            return 0
        completed = 0
        # A snapshot: completions unwatch operations from this very dict, and on_complete may re-enter.
        for operation in list(ops.values()):
            if operation.safe_try_complete():
                completed += 1
        return completed

    def is_sole_watcher(self, operation: T) -> bool:
        """Whether operation waits here under one key and is the only live operation watched under it,
        found without looking the key up."""
        ops = operation._watch_list
        return ops is not None and len(ops) == 1 and operation._listener is self._listener

    def reschedule(self, operation: T, delay_ms: int, now_ms: int) -> None:
        """Move a watched, not yet completed operation to a new deadline, keeping its watch keys.

        Observably the same as completing it (when its completion does nothing) and parking an equal
        operation with the new timeout, at a fraction of the cost: no new object, no unwatch and re-watch.
        """
        if operation._completed or operation._listener != self._listener:
            raise ValueError(f"{operation!r} is not waiting in this purgatory")
        operation.delay_ms = delay_ms
        self.timer.extend(operation, now_ms)

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching key; returns its operations. They stay on the timer and under their other keys."""
        ops = self._watchers.pop(key, None)
        if ops is None:
            return []
        self._watched -= len(ops)
        cancelled = list(ops.values())
        for operation in cancelled:
            if operation._watch_list is ops:
                operation._watch_list = None
        return cancelled

    def watched(self) -> int:
        """Total watch-list entries (an operation watched under n keys counts n times)."""
        return self._watched

    def delayed(self) -> int:
        """Operations this purgatory parked that are not completed yet (its share of the timer)."""
        return self._delayed

    def num_keys(self) -> int:
        return len(self._watchers)

    def _on_operation_completed(self, operation: DelayedOperation) -> None:
        self._delayed -= 1
        watchers = self._watchers
        op_id = id(operation)
        for key in operation._watch_keys:
            ops = watchers.get(key)
            # Absent after cancel_for_key(key), which already unwatched it.
            if ops is not None and ops.pop(op_id, None) is not None:
                self._watched -= 1
                if not ops:
                    del watchers[key]
        operation._watch_keys = ()
        operation._watch_list = None
