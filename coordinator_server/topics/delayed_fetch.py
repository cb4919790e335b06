"""DelayedFetch: a fetch that waits for min_bytes of new data or for max_wait_ms.

Watched under (topic, partition) of every partition it reads; a produce to one of them calls
`check_and_complete` on that key. The operation only decides *when* to answer: `on_complete` resolves
the handler's future, and the handler then reads the log afresh, as Kafka's DelayedFetch.onComplete
re-reads the log rather than carrying data from the first attempt.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator_server.purgatory import DelayedOperation


class DelayedFetch(DelayedOperation):
    __slots__ = ("_available", "_future", "min_bytes")

    def __init__(self, delay_ms: int, min_bytes: int, available: Callable[[], int | None],
                 future: asyncio.Future[None]) -> None:
        super().__init__(delay_ms)
        self.min_bytes = min_bytes
        # Bytes the fetch could return now, or None when a partition changed under it (deleted,
        # truncated by retention): either way Kafka answers at once.
        self._available = available
        self._future = future

    def try_complete(self) -> bool:
        available = self._available()
        if available is None or available >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self._future.done():  # the client may have gone, cancelling the handler
            self._future.set_result(None)

    def on_expiration(self) -> None:
        pass  # the answer is whatever is there by now: on_complete already released the handler
