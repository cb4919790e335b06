"""The durable appends: the records the core emits, written to the `__consumer_offsets` log (and, in a
cluster, committed by its replicas) before what caused them is answered.

Theory of operation. No task per append: each drain hands its appends to the log at once
(`CoordinatorLog.submit`, in the order the core emitted them, so each partition's records reach the log in that
order) and learns once all of them, and every append their completions emit in turn, are complete (a future
from `spawn`, a callback from `write_group`). The log's writer completes them from its round callback, each in
the context of the request that caused it (its log lines keep that connection's peer and client id); the
clock advance and timer re-arm that follow completions run once per round (`after_round`, scheduled right
after the round's completions), not once per completion.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

import structlog

from coordinator_server.group.api import PendingAppend
from coordinator_server.group.coordinator import GroupCoordinator
from coordinator_server.storage import CoordinatorLog, RecordTooLargeError, StorageError
from protocol.errors import Errors

log = structlog.get_logger("coordinator_server.runtime")

# Read once: each `Errors.NONE` in compiled code is a lookup through the enum's metaclass (its
# `__getattr__` hook), and a durable commit's callbacks test it on every append.
_NONE: Final = Errors.NONE


class ReplicationGate(Protocol):
    """What the runtime needs of replication (coordinator_server.replication) in a cluster: whether this
    node may append to a partition now, and a callback once what it appended is committed (below the
    high watermark: acks=all, as Kafka's group coordinator writes `__consumer_offsets`)."""

    def append_error(self, partition: int) -> Errors | None:
        """NOT_LEADER_OR_FOLLOWER or NOT_ENOUGH_REPLICAS when an append must be refused before writing."""
        ...

    def leader_epoch(self, partition: int) -> int:
        """The leader epoch to stamp into the batches this leader writes to `partition`."""
        ...

    def await_committed(self, partition: int, on_done: Callable[[Errors], None]) -> None:
        """Call `on_done(NONE)` once the high watermark covers everything appended to `partition` so far,
        or with NOT_ENOUGH_REPLICAS_AFTER_APPEND / REQUEST_TIMED_OUT / NOT_LEADER_OR_FOLLOWER."""
        ...


# Told the partition of each append handed to the log (written, not yet durable): consumers of the
# `__consumer_offsets` topic long-poll on it. True when that completed parked operations on the shared
# timing wheel, which the loop timer must then be re-armed for.
AppendListener = Callable[[int], bool]


class AppendPipeline:
    """`after_round` runs once after each round of completions, in an empty context (the clock advance
    and the timer re-arm: what comes due then belongs to no one request). `replication` is given in a
    cluster: appends then complete once replicated, not once locally durable."""

    def __init__(self, log_: CoordinatorLog, coordinator: GroupCoordinator, loop: asyncio.AbstractEventLoop,
                 now_ms: Callable[[], int], after_round: Callable[[], None],
                 replication: ReplicationGate | None = None, on_append: AppendListener | None = None) -> None:
        self.log = log_
        self.coordinator = coordinator
        self.loop = loop
        self._now_ms = now_ms
        self._after_round = after_round
        self.replication = replication
        self._on_append = on_append
        # Write groups (`_Writes`) not yet complete; `idle` waits for them.
        self._writes: set[_Writes] = set()
        self._writes_idle: asyncio.Future[None] | None = None
        self._after_writes_scheduled = False

    @property
    def pending(self) -> int:
        """Write groups not yet complete."""
        return len(self._writes)

    async def drain(self) -> None:
        """Write what the core has emitted, and wait until it is complete."""
        appends = self.coordinator.take_appends()
        if appends:
            await self.spawn(appends)

    async def idle(self) -> None:
        """Wait until every write group in flight is complete."""
        if self._writes:
            self._writes_idle = self.loop.create_future()
            await self._writes_idle

    def spawn(self, appends: list[PendingAppend]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        self.write_group(appends, functools.partial(_settle, future))
        return future

    def write_group(self, appends: list[PendingAppend], on_resolved: Callable[[BaseException | None], None]) -> None:
        """Write `appends` as one group: `on_resolved(None)` once they, and every append their completions
        emit in turn, are complete, or `on_resolved(bug)` with the first bug met on the way. No future of
        its own: the fast paths complete from the round's callback."""
        writes = _Writes(on_resolved, self._write_group_resolved)
        self._writes.add(writes)
        self._write(appends, writes)

    def _write_group_resolved(self, writes: _Writes) -> None:
        self._writes.discard(writes)
        if not self._writes and self._writes_idle is not None and not self._writes_idle.done():
            self._writes_idle.set_result(None)

    def _write(self, appends: list[PendingAppend], writes: _Writes) -> None:
        wall_ms = self._now_ms() + self.coordinator.wall_offset_ms
        context = contextvars.copy_context()
        writes.outstanding += len(appends)
        refused: list[tuple[PendingAppend, Errors]] = []
        replication = self.replication
        for append in appends:
            if replication is not None:
                refusal = replication.append_error(append.partition)
                if refusal is not None:
                    refused.append((append, refusal))
                    continue
            try:
                # cast: mypy cannot type a partial of Context.run (a ParamSpec), and the build is type-checked.
                queued = self.log.submit(append.partition, append.records, wall_ms,
                                         functools.partial(cast(Any, context.run), self._written, append, writes),
                                         replication.leader_epoch(append.partition) if replication else 0)
            except RecordTooLargeError as e:
                # Nothing was written; the core maps it per API as Kafka does (SyncGroup:
                # UNKNOWN_SERVER_ERROR, OffsetCommit: INVALID_COMMIT_OFFSET_SIZE).
                log.warning("coordinator_record_too_large", group_id=append.group_id, partition=append.partition,
                            error=str(e))
                refused.append((append, Errors.MESSAGE_TOO_LARGE))
            except StorageError as e:
                refused.append((append, self._storage_error(append, e)))
            except Exception as e:  # a record that does not encode: a bug; the append never completes
                log.exception("coordinator_append_refused", group_id=append.group_id, partition=append.partition)
                writes.fail(e)
                writes.outstanding -= 1
            else:
                if not queued:  # no records: nothing to make durable
                    refused.append((append, Errors.NONE))
                elif self._on_append is not None and self._on_append(append.partition):
                    self._after_round()  # the long polls it completed left the wheel: the loop timer follows
        # Completed only now, so that what their completions emit queues behind every append above.
        for append, error in refused:
            self._complete(append, writes, error)
        writes.resolve_if_done()

    def _written(self, append: PendingAppend, writes: _Writes, error: StorageError | None) -> None:
        """The log's callback for one append: its batch is durable per policy, or failed. In a cluster a
        written batch is acknowledged only once committed (the high watermark covers it)."""
        if error is None and self.replication is not None:
            context = contextvars.copy_context()
            self.replication.await_committed(
                append.partition, functools.partial(cast(Any, context.run), self._replicated, append, writes))
            # Its wait (a DelayedProduce) joined the shared wheel: the loop timer must cover its timeout.
            self._after_round()
            return
        self._complete(append, writes, _NONE if error is None else self._storage_error(append, error))
        self._after_completion(writes)

    def _replicated(self, append: PendingAppend, writes: _Writes, error: Errors) -> None:
        if error != Errors.NONE:
            log.warning("coordinator_append_not_replicated", group_id=append.group_id, partition=append.partition,
                        error=error.name)
        self._complete(append, writes, error)
        self._after_completion(writes)

    def _after_completion(self, writes: _Writes) -> None:
        writes.resolve_if_done()
        if not self._after_writes_scheduled:
            self._after_writes_scheduled = True
            # In an empty context: the timers it runs belong to no one request (see _advance_clock).
            self.loop.call_soon(self._after_writes, context=contextvars.Context())

    def _complete(self, append: PendingAppend, writes: _Writes, error: Errors) -> None:
        try:
            append.complete(error, self._now_ms())
            # What the completion emitted belongs to the same request: its answer waits for that too.
            followups = self.coordinator.take_appends()
            if followups:
                self._write(followups, writes)
        except Exception as e:  # a bug in the core: fail the request rather than hang it
            log.exception("coordinator_append_completion_failed", group_id=append.group_id,
                          partition=append.partition)
            writes.fail(e)
        writes.outstanding -= 1

    def _after_writes(self) -> None:
        self._after_writes_scheduled = False
        self._after_round()

    @staticmethod
    def _storage_error(append: PendingAppend, e: StorageError) -> Errors:
        if isinstance(e, RecordTooLargeError):
            return Errors.MESSAGE_TOO_LARGE
        log.error("coordinator_log_append_failed", group_id=append.group_id, partition=append.partition,
                  error=str(e))
        return Errors.KAFKA_STORAGE_ERROR



class _Writes:
    """The appends of one write group and of what their completions emitted: `on_resolved(error)` runs
    once `outstanding` is back to zero, with the first bug met, or None."""

    __slots__ = ("error", "on_resolved", "outstanding", "resolved", "unregister")

    def __init__(self, on_resolved: Callable[[BaseException | None], None],
                 unregister: Callable[[_Writes], None]) -> None:
        self.on_resolved = on_resolved
        self.unregister = unregister
        self.outstanding = 0
        self.error: BaseException | None = None
        self.resolved = False

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error

    def resolve_if_done(self) -> None:
        if self.outstanding == 0 and not self.resolved:
            self.resolved = True
            self.unregister(self)
            self.on_resolved(self.error)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
        future.exception()  # retrieved (and logged where it was caught) even when nobody awaits
