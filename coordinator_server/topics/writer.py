"""Group commit for the topic store: many produces, one fsync per partition per round.

Theory of operation
-------------------
Produce writes its batch to the page cache on the event loop (see `topics.partition`), then awaits
`sync(partition)`. Under the `always` policy the call joins a queue; one writer task takes everything
queued, takes each distinct partition's sync plan *on the loop* (so the plan covers every write made so
far, and the loop may keep appending and even rolling segments while the plan runs), runs the plans in
one I/O thread and resolves all waiters of the round together. While a round is on the disk the next
one queues up, so under load one fsync covers many produces: the same shape as the coordinator log's
writer (`storage.coordinator_log`), for the data plane, whose appends are raw client batches.

`interval:MS` resolves at once and fsyncs the partitions written since the last flush at most every
MS in the background; `never` resolves at once and leaves flushing to the OS and `close()`.

A failed fsync marks the partition failed (the kernel may have dropped its dirty pages, so a retried
fsync could lie): its waiters get StorageError and it takes no appends until the server restarts.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import structlog

from coordinator_server import metrics
from coordinator_server.config import FsyncPolicy
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.log import SyncPlan
from coordinator_server.topics.partition import Partition

log = structlog.get_logger(__name__)


class GroupCommitWriter:
    def __init__(self, fsync: FsyncPolicy) -> None:
        self._fsync = fsync
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="topic-store-sync")
        self._pending: list[tuple[Partition, asyncio.Future[None]]] = []
        self._dirty: dict[int, Partition] = {}  # interval mode, keyed by id()
        self._flush_deadline: float | None = None
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.rounds = 0  # fsync rounds run (for tests and metrics)

    async def sync(self, partition: Partition) -> None:
        """Return once `partition`'s writes so far are durable per the policy; StorageError if not."""
        if partition.failed is not None:
            raise StorageError(partition.failed)
        if self._fsync.mode == "never":
            return
        loop = asyncio.get_running_loop()
        if self._fsync.mode == "interval":
            self._dirty[id(partition)] = partition
            if self._flush_deadline is None:
                self._flush_deadline = loop.time() + self._fsync.interval_ms / 1000
                self._start()
            return
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((partition, future))
        self._start()
        await future

    async def close(self, partitions: Iterable[Partition]) -> None:
        """Drain the queue, fsync every open partition once more, stop the I/O thread."""
        self._closing = True
        if self._task is not None:
            self._start()
            await self._task
        loop = asyncio.get_running_loop()
        plans = [(p, p.log.take_sync_plan()) for p in partitions if p.log.is_open and p.failed is None]
        try:
            await loop.run_in_executor(self._executor, self._run_plans, plans)
        finally:
            self._executor.shutdown(wait=True)

    def _start(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="topic-store-writer")
        self._wakeup.set()

    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                if self._closing:
                    return
                timeout = None if self._flush_deadline is None else max(0.0, self._flush_deadline - loop.time())
                self._wakeup.clear()  # no await between this and the check above: no lost wakeup
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
            round_, self._pending = self._pending, []
            if self._flush_deadline is not None and loop.time() >= self._flush_deadline:
                dirty, self._dirty, self._flush_deadline = self._dirty, {}, None
                parts = {id(p): p for p, _ in round_} | dirty
            else:
                parts = {id(p): p for p, _ in round_}
            if not parts:
                continue
            plans = [(p, p.log.take_sync_plan()) for p in parts.values() if p.log.is_open and p.failed is None]
            try:
                errors = await loop.run_in_executor(self._executor, self._run_plans, plans)
            except Exception as e:  # a bug, not an I/O error: fail the round rather than hang it
                log.exception("topic_store_sync_round_failed")
                errors = {id(p): StorageError(f"internal error in the sync writer: {e!r}") for p, _ in plans}
            self.rounds += 1
            for part, future in round_:
                if future.done():
                    continue
                err = errors.get(id(part))
                if err is None and part.failed is not None:
                    err = StorageError(part.failed)
                if err is None:
                    future.set_result(None)
                else:
                    future.set_exception(err)

    def _run_plans(self, plans: list[tuple[Partition, SyncPlan]]) -> dict[int, StorageError]:
        """In the I/O thread: one fsync (set) per partition."""
        errors: dict[int, StorageError] = {}
        for part, plan in plans:
            started = time.perf_counter()
            try:
                plan.run()
                metrics.LOG_FSYNC_TOPICS.observe(time.perf_counter() - started)
            except OSError as e:
                msg = (f"fsync of {part.topic}-{part.index} failed: {e}; the partition takes no more "
                       "appends until the server restarts")
                log.error("topic_partition_fsync_failed", topic=part.topic, partition=part.index, error=str(e))
                part.failed = msg  # a plain attribute store: read by the loop only after this round
                errors[id(part)] = StorageError(msg, e.errno)
        return errors
