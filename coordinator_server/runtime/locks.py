"""Per-group locks: requests of one group (join, sync, leave, commit) are serialized by that group's lock,
held across the durable append their call produced, so a response never goes out before the records its
request caused are durable and the next request of that group sees the outcome, while other groups never
wait on it."""
from __future__ import annotations

import collections
from collections.abc import Callable


class KeyedLocks:
    """One FIFO lock per key, created on demand and dropped when nobody holds or waits for it. Held and
    handed over through callbacks, never awaited: the request path has no task of its own."""

    def __init__(self) -> None:
        self._locks: dict[str, _KeyLock] = {}

    def busy(self, key: str) -> bool:
        """Whether anybody holds or waits for `key`."""
        return key in self._locks

    def try_hold(self, key: str) -> bool:
        """Take `key` if nobody holds or waits for it; the caller then calls `release(key)`."""
        if key in self._locks:
            return False
        self._locks[key] = _KeyLock()
        return True

    def queue(self, key: str, on_held: Callable[[], None]) -> QueuedCaller:
        """Wait for `key`, held or waited for by others: `on_held` is called once it is handed over (from the
        release that hands it over, not a later loop turn), and the caller then calls `release(key)`."""
        waiter = QueuedCaller(on_held)
        self._locks[key].waiters.append(waiter)
        return waiter

    def release(self, key: str) -> None:
        """Hand `key` to its first waiter, or drop it when nobody waits."""
        waiters = self._locks[key].waiters
        if waiters:
            waiters.popleft().hand_over()
        else:
            del self._locks[key]

    def last_waiter(self, key: str) -> QueuedCaller | None:
        """The waiter queued last for `key`, if any."""
        lock = self._locks.get(key)
        return lock.waiters[-1] if lock is not None and lock.waiters else None

    def __len__(self) -> int:
        return len(self._locks)


class QueuedCaller:
    """A waiter of `KeyedLocks.queue`: called back when handed the lock."""

    __slots__ = ("on_held",)

    def __init__(self, on_held: Callable[[], None]) -> None:
        self.on_held = on_held

    def hand_over(self) -> None:
        self.on_held()


class _KeyLock:
    """A held lock and its FIFO of waiters; release hands it straight to the first."""

    __slots__ = ("waiters",)

    def __init__(self) -> None:
        self.waiters: collections.deque[QueuedCaller] = collections.deque()
