"""The imperative shell around the coordinator core: the clock, the one loop timer, per-group locks and
the durable appends.

Theory of operation. The core is synchronous; this class feeds it the loop's monotonic time, arms exactly
one `loop.call_at` at the timing wheel's next bucket deadline, and makes the core's records durable.
Requests of one group (join, sync, leave) are serialized by that group's lock, held across the durable
append their call produced, so a response never goes out before the records its request caused are
durable, and the next request of that group sees the outcome — while other groups never wait on it.
Heartbeats take no lock: they write nothing and are the hot path.
"""
from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import time
from collections.abc import Callable
from typing import Any, Final, Generic, NamedTuple, Protocol, TypeVar, cast

import structlog

from coordinator_server import cluster_metrics
from coordinator_server.config import Config, consumer_group_assignors
from coordinator_server.group.api import (
    DeletedGroup,
    GroupDescription,
    HeartbeatInput,
    JoinGroupInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    ListedGroup,
    OffsetCommitInput,
    OffsetCommitResult,
    OffsetDeleteInput,
    OffsetDeleteResult,
    OffsetFetchInput,
    OffsetFetchResult,
    PendingAppend,
    SyncGroupInput,
    SyncGroupResult,
)
from coordinator_server.group.consumer.api import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatResult,
)
from coordinator_server.group.consumer.settings import ConsumerGroupConfig
from coordinator_server.group.consumer.topics import TopicsImage
from coordinator_server.group.coordinator import GroupConfig, GroupCoordinator
from coordinator_server.metrics import ConsumerGroupMetrics, GroupMetrics
from coordinator_server.purgatory import Timer
from coordinator_server.storage import CoordinatorLog, RecordTooLargeError, StorageError
from coordinator_server.storage.coordinator_log import CleanerConfig
from protocol.errors import Errors

log = structlog.get_logger("coordinator_server.runtime")

# Read once: each `Errors.NONE` in compiled code is a lookup through the enum's metaclass (its
# `__getattr__` hook), and a durable commit's callbacks test it on every append.
_NONE: Final = Errors.NONE

T = TypeVar("T")
R = TypeVar("R")


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


class KeyedLocks:
    """One FIFO lock per key, created on demand and dropped when nobody holds or waits for it. Held and
    handed over through callbacks, never awaited: the request path has no task of its own."""

    def __init__(self) -> None:
        self._locks: dict[str, _KeyLock] = {}

    def busy(self, key: str) -> bool:
        """Whether anybody holds or waits for `key`."""
        return key in self._locks

    def hold_or_queue(self, key: str, on_held: Callable[[], None]) -> _QueuedCaller | None:
        """Take `key` now if nobody holds or waits for it (None); else queue for it, and `on_held` is called
        once it is handed over (from the release that hands it over, not a later loop turn). Either way the
        caller then calls `release(key)`."""
        lock = self._locks.get(key)
        if lock is None:
            self._locks[key] = _KeyLock()
            return None
        waiter = _QueuedCaller(on_held)
        lock.waiters.append(waiter)
        return waiter

    def release(self, key: str) -> None:
        """Hand `key` to its first waiter, or drop it when nobody waits."""
        waiters = self._locks[key].waiters
        if waiters:
            waiters.popleft().hand_over()
        else:
            del self._locks[key]

    def last_waiter(self, key: str) -> _QueuedCaller | None:
        """The waiter queued last for `key`, if any."""
        lock = self._locks.get(key)
        return lock.waiters[-1] if lock is not None and lock.waiters else None

    def __len__(self) -> int:
        return len(self._locks)


class _QueuedCaller:
    """A waiter of `KeyedLocks.hold_or_queue`: called back when handed the lock."""

    __slots__ = ("on_held",)

    def __init__(self, on_held: Callable[[], None]) -> None:
        self.on_held = on_held

    def hand_over(self) -> None:
        self.on_held()


class _KeyLock:
    """A held lock and its FIFO of waiters; release hands it straight to the first."""

    __slots__ = ("waiters",)

    def __init__(self) -> None:
        self.waiters: collections.deque[_QueuedCaller] = collections.deque()


def consumer_group_config(config: Config) -> ConsumerGroupConfig:
    return ConsumerGroupConfig(
        heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        session_timeout_ms=config.group_consumer_session_timeout_ms,
        max_size=config.group_consumer_max_size,
        assignors=consumer_group_assignors(config),
        migration_policy=config.group_consumer_migration_policy,
    )


def group_config(config: Config) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=config.min_session_timeout_ms,
        max_session_timeout_ms=config.max_session_timeout_ms,
        initial_rebalance_delay_ms=config.initial_rebalance_delay_ms,
        group_max_size=config.group_max_size,
        group_max_pending_members=config.group_max_pending_members,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
    )


class CoordinatorRuntime:
    def __init__(self, log_: CoordinatorLog, coordinator: GroupCoordinator, loop: asyncio.AbstractEventLoop) -> None:
        self.log = log_
        self.coordinator = coordinator
        self.loop = loop
        self.locks = KeyedLocks()
        self._timer_handle: asyncio.TimerHandle | None = None
        self._timer_deadline_ms: int | None = None
        # Write groups (`_Writes`) not yet complete; close() waits for them.
        self._writes: set[_Writes] = set()
        self._writes_idle: asyncio.Future[None] | None = None
        self._after_writes_scheduled = False
        self._closed = False
        # Set in a cluster (app.py): appends then complete once replicated, not once locally durable.
        self.replication: ReplicationGate | None = None
        self._loads: dict[int, asyncio.Task[None]] = {}
        # Per group, the calls queued behind the last waiter for its lock (_schedule_write).
        self._batches: dict[str, _HeldBatch] = {}

    # -- lifecycle -----------------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: Config, load_all: bool = True) -> CoordinatorRuntime:
        """Open the log (recovering it), replay every partition, and start the timer. In a cluster
        (`load_all=False`) no partition is loaded here: each is loaded when this node becomes its leader."""
        loop = asyncio.get_running_loop()
        started_s = time.monotonic()
        log_ = CoordinatorLog.open(
            config.data_dir, config.offsets_partitions, config.fsync, segment_ms=config.log_roll_ms,
            syncfs=config.fsync_method == "auto",
            cleaner=CleanerConfig(
                enabled=config.log_cleaner_enable,
                min_cleanable_dirty_ratio=config.log_cleaner_min_cleanable_ratio,
                delete_retention_ms=config.delete_retention_ms,
                backoff_ms=config.log_cleaner_backoff_ms,
            ),
        )
        try:
            now_ms = _monotonic_ms(loop)
            coordinator = GroupCoordinator(
                group_config(config), log_.partitions, Timer(now_ms), wall_offset_ms=_wall_offset_ms(loop),
                events=GroupMetrics(), consumer_config=consumer_group_config(config),
                consumer_events=ConsumerGroupMetrics(),
            )
            runtime = cls(log_, coordinator, loop)
            if load_all:
                for partition in range(log_.partitions):
                    coordinator.begin_loading(partition)
                groups = 0
                for partition in range(log_.partitions):
                    groups += coordinator.load_partition(partition, log_.replay_latest(partition),
                                                         _monotonic_ms(loop))
                # One line for the whole load (recovery and replay); the per-partition lines are debug, so
                # an empty data directory does not log 50 lines before `listening`.
                log.info("coordinator_loaded", partitions=log_.partitions, groups=groups,
                         offsets=sum(len(group.offsets) for group in coordinator.groups.values()),
                         seconds=round(time.monotonic() - started_s, 3))
            await runtime._after_core_call()
        except BaseException:
            await log_.close()
            raise
        return runtime

    async def close(self) -> None:
        """Answer parked requests with NOT_COORDINATOR, wait for writes in flight, flush and fsync the log."""
        if self._closed:
            return
        self._closed = True
        self.coordinator.shutdown(self._now_ms())
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        # Appends emitted by the shutdown (none today) and those in flight still get written.
        await self._drain_appends()
        if self._writes:
            self._writes_idle = self.loop.create_future()
            await self._writes_idle
        await self.log.close()

    def partition_for(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id)

    # -- leadership: load and unload one partition ----------------------------------------

    def load_partition(self, partition: int, leader_epoch: int) -> bool:
        """This node became leader of `partition` at `leader_epoch`: its groups answer
        COORDINATOR_LOAD_IN_PROGRESS while the partition's log is read (off the loop, in a thread), then
        come back as the log says. Ignored (False) unless the epoch is newer than the one held."""
        if self._closed or not self.coordinator.begin_loading(partition, leader_epoch):
            return False
        self._loads[partition] = self.loop.create_task(self._load(partition, leader_epoch),
                                                       name=f"load-{partition}")
        return True

    async def _load(self, partition: int, leader_epoch: int) -> None:
        started = time.monotonic()
        try:
            # The whole partition is read in the thread (decoding included); only building groups from
            # the latest records runs on the loop, where the core lives.
            records = await self.loop.run_in_executor(None, lambda: list(self.log.replay_latest(partition)))
            groups = self.coordinator.load_partition(partition, records, self._now_ms(), leader_epoch)
            if groups >= 0:
                log.info("coordinator_partition_loaded", partition=partition, leader_epoch=leader_epoch,
                         groups=groups, seconds=round(time.monotonic() - started, 3))
                cluster_metrics.PARTITION_LOADS.observe(time.monotonic() - started)
            await self._after_core_call()
        except Exception:
            log.exception("coordinator_partition_load_failed", partition=partition, leader_epoch=leader_epoch)
            self.coordinator.unload_partition(partition, None, self._now_ms(), reason="load failed")
        finally:
            if self._loads.get(partition) is asyncio.current_task():
                del self._loads[partition]

    def unload_partition(self, partition: int, leader_epoch: int | None, reason: str) -> int:
        """This node stopped leading `partition` (a newer `leader_epoch` elsewhere, or None when it lost
        its ZooKeeper session): its groups are dropped and their parked requests answered NOT_COORDINATOR."""
        if self._closed:
            return -1
        unloaded = self.coordinator.unload_partition(partition, leader_epoch, self._now_ms(), reason)
        if unloaded >= 0:
            cluster_metrics.PARTITION_UNLOADS.inc()
        self.rearm_timer()
        return unloaded

    # -- requests ------------------------------------------------------------------------------------
    #
    # Every request of a group goes through one entry: `_schedule_write` (the group's lock, the core call,
    # the answer once the call's records are durable), or `_schedule_read` (answered at once while no
    # request of the group holds its lock, else queued as a write so it sees their outcome). The callers
    # are the API modules (coordinator_server/net/apis/), which answer from `on_result`; `on_failure` is a
    # bug met in the core or while writing, which closes the request's connection.

    def join_group(self, inp: JoinGroupInput, on_result: Callable[[JoinGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None:
        self._schedule_write(inp.group_id, self.coordinator.handle_join_group, inp, on_result, on_failure)

    def sync_group(self, inp: SyncGroupInput, on_result: Callable[[SyncGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None:
        self._schedule_write(inp.group_id, self.coordinator.handle_sync_group, inp, on_result, on_failure)

    def leave_group(self, inp: LeaveGroupInput, on_result: Callable[[LeaveGroupResult], None],
                    on_failure: Callable[[BaseException], None]) -> None:
        self._schedule_write(inp.group_id, _Immediate(self.coordinator.handle_leave_group).handle, inp,
                             on_result, on_failure)

    def heartbeat(self, inp: HeartbeatInput) -> Errors:
        """Synchronous, the hot path: a heartbeat takes no lock and writes nothing. Timers it finds due
        run after it, as after any call; what they write is theirs to wait for (their own responses wait
        for it), not the heartbeat's, as in Kafka where expirations run on the timer's own thread."""
        now_ms = self._now_ms()
        error = self.coordinator.handle_heartbeat(inp, now_ms)
        deadline = self.coordinator.next_expiration_ms()
        if (deadline is not None and deadline <= now_ms) or self.coordinator.has_appends():
            self.rearm_timer()
        elif deadline != self._timer_deadline_ms or self._timer_handle is None:
            self._arm_timer()
        return error

    def consumer_group_heartbeat(self, inp: ConsumerGroupHeartbeatInput,
                                 on_result: Callable[[ConsumerGroupHeartbeatResult], None],
                                 on_failure: Callable[[BaseException], None]) -> None:
        """KIP-848: under the group's lock, answered once the records it caused are durable."""
        self._schedule_write(inp.group_id, self.coordinator.handle_consumer_group_heartbeat, inp, on_result,
                             on_failure)

    def offset_commit(self, inp: OffsetCommitInput, on_result: Callable[[OffsetCommitResult], None],
                      on_failure: Callable[[BaseException], None]) -> None:
        self._schedule_write(inp.group_id or "", self.coordinator.handle_offset_commit, inp, on_result,
                             on_failure)

    def offset_fetch(self, inp: OffsetFetchInput, on_result: Callable[[OffsetFetchResult], None],
                     on_failure: Callable[[BaseException], None]) -> None:
        """A read: it waits only behind requests of its group whose records are still being written (a
        fetch must see the outcome of a commit answered before it)."""
        self._schedule_read(inp.group_id or "", self.coordinator.handle_offset_fetch, inp, on_result, on_failure)

    def offset_delete(self, inp: OffsetDeleteInput, on_result: Callable[[OffsetDeleteResult], None],
                      on_failure: Callable[[BaseException], None]) -> None:
        self._schedule_write(inp.group_id or "", self.coordinator.handle_offset_delete, inp, on_result,
                             on_failure)

    async def consumer_group_describe(self, group_ids: list[str]) -> list[ConsumerGroupDescription]:
        return self.coordinator.handle_consumer_group_describe(group_ids, self._now_ms())

    def attach_topics(self, topics: TopicsImage) -> None:
        """The topic store, once open: what consumer groups subscribe to and are assigned from."""
        self.coordinator.consumer.topics = topics

    async def describe_groups(self, group_ids: list[str | None], api_version: int) -> list[GroupDescription]:
        return self.coordinator.handle_describe_groups(group_ids, api_version, self._now_ms())

    async def list_groups(self, states: list[str], types: list[str]) -> tuple[Errors, list[ListedGroup]]:
        return self.coordinator.handle_list_groups(states, types, self._now_ms())

    async def delete_groups(self, group_ids: list[str | None]) -> list[DeletedGroup]:
        # Many groups in one call, under none of their locks (as before KIP-848 in Kafka): each group's
        # deletion is decided and its tombstones emitted in this one synchronous call.
        future: asyncio.Future[list[DeletedGroup]] = self.loop.create_future()
        self.coordinator.handle_delete_groups(group_ids, self._now_ms(), future.set_result)
        await self._after_core_call()
        return await future

    def _schedule_read(self, group_id: str, read: Callable[[T, int], R], inp: T, on_result: Callable[[R], None],
                       on_failure: Callable[[BaseException], None]) -> None:
        if self.locks.busy(group_id):
            self._schedule_write(group_id, _Immediate(read).handle, inp, on_result, on_failure)
            return
        try:
            result = read(inp, self._now_ms())
            self.rearm_timer()  # timers due now run after it, as after any call; their writes are theirs
        except Exception as e:
            on_failure(e)
            return
        on_result(result)

    def _schedule_write(self, group_id: str, handle: Callable[[T, int, Callable[[R], None]], None], inp: T,
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
        batch = self._batches.get(group_id)
        if batch is not None and self.locks.last_waiter(group_id) is batch.waiter:
            batch.calls.append(_HeldCall(handle, inp, on_result, on_failure, contextvars.copy_context()))
            return
        calls: list[_HeldCall] = []
        waiter = self.locks.hold_or_queue(group_id, lambda: self._start_batch(group_id, calls))
        if waiter is None:
            self._run_held(group_id, [_HeldCall(handle, inp, on_result, on_failure, None)], 0)
            return
        calls.append(_HeldCall(handle, inp, on_result, on_failure, contextvars.copy_context()))
        self._batches[group_id] = _HeldBatch(waiter, calls)

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
                pending = self._call_held(call) if call.context is None else call.context.run(self._call_held, call)
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

    def _call_held(self, call: _HeldCall) -> _HeldWrites | None:
        """Call the core for one request; what waits for its appends when it made any."""
        parked = _ParkedReply(call.on_result)
        try:
            call.handle(call.inp, self._now_ms(), parked.reply)
            self._advance_clock(self._now_ms())
            self._arm_timer()
            appends = self.coordinator.take_appends()
        except Exception as e:
            call.on_failure(e)
            return None
        if not appends:
            parked.written()
            return None
        pending = _HeldWrites(parked, call.on_failure)
        self._write_group(appends, pending.resolved)
        return pending

    # -- the clock and the one timer -----------------------------------------------------------------

    @property
    def timer(self) -> Timer:
        """The one timing wheel: other purgatories (e.g. delayed fetches) share it."""
        return self.coordinator.timer

    def now_ms(self) -> int:
        return _monotonic_ms(self.loop)

    def rearm_timer(self) -> None:
        """Call after adding to the shared timer from outside the core, so the loop timer covers it."""
        self._advance_clock(self._now_ms())
        self._arm_timer()
        appends = self.coordinator.take_appends()
        if appends:
            self._spawn_writes(appends)

    def _now_ms(self) -> int:
        return _monotonic_ms(self.loop)

    async def _after_core_call(self) -> None:
        # Due timers of this very moment run after the request that made them due, as Kafka's
        # executor does, never in the middle of it.
        self._advance_clock(self._now_ms())
        self._arm_timer()
        await self._drain_appends()

    def _advance_clock(self, now_ms: int) -> None:
        deadline = self.coordinator.next_expiration_ms()
        if deadline is None or deadline > now_ms:
            # Nothing due (after most requests): only the core's clock moves. The wheels' own clocks catch
            # up at the next expiration; a task added meanwhile lands in a coarser wheel and cascades.
            self.coordinator.tick(now_ms)
            return
        # Timers that come due here belong to whichever groups set them, not to the request whose call
        # happens to run them: their log lines must not carry this connection's peer and client id.
        contextvars.Context().run(self.coordinator.advance_clock, now_ms)

    def _arm_timer(self) -> None:
        if self._closed:
            return
        deadline = self.coordinator.next_expiration_ms()
        if deadline == self._timer_deadline_ms and self._timer_handle is not None:
            return
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        self._timer_deadline_ms = deadline
        if deadline is not None:
            # In an empty context: call_at would otherwise copy the context of whichever request armed
            # it, and label other groups' expiries with that connection's peer and client id.
            self._timer_handle = self.loop.call_at(deadline / 1000.0, self._on_timer, deadline,
                                                   context=contextvars.Context())

    def _on_timer(self, deadline_ms: int) -> None:
        self._timer_handle = None
        self._timer_deadline_ms = None
        if self._closed:
            return
        self.coordinator.wall_offset_ms = _wall_offset_ms(self.loop)
        # The loop may wake a hair early in float seconds; it fired for this deadline, so it is due.
        self._advance_clock(max(self._now_ms(), deadline_ms))
        self._arm_timer()
        appends = self.coordinator.take_appends()
        if appends:
            self._spawn_writes(appends)

    # -- durable appends -----------------------------------------------------------------------------
    #
    # No task per append: each drain hands its appends to the log at once (`CoordinatorLog.submit`, in
    # the order the core emitted them, so each partition's records reach the log in that order) and gets
    # one future back, which resolves once all of them, and every append their completions emit in turn,
    # are complete. The log's writer completes them from its round callback, each in the context of the
    # request that caused it (its log lines keep that connection's peer and client id); the clock
    # advance and timer re-arm that used to follow every completion run once per round instead
    # (`_after_writes`, scheduled right after the round's completions).

    async def _drain_appends(self) -> None:
        appends = self.coordinator.take_appends()
        if appends:
            await self._spawn_writes(appends)

    def _spawn_writes(self, appends: list[PendingAppend]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        self._write_group(appends, functools.partial(_settle, future))
        return future

    def _write_group(self, appends: list[PendingAppend], on_resolved: Callable[[BaseException | None], None]) -> None:
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
        wall_ms = self._wall_ms()
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
        self._advance_clock(self._now_ms())
        self._arm_timer()
        appends = self.coordinator.take_appends()
        if appends:
            self._spawn_writes(appends)

    @staticmethod
    def _storage_error(append: PendingAppend, e: StorageError) -> Errors:
        if isinstance(e, RecordTooLargeError):
            return Errors.MESSAGE_TOO_LARGE
        log.error("coordinator_log_append_failed", group_id=append.group_id, partition=append.partition,
                  error=str(e))
        return Errors.KAFKA_STORAGE_ERROR

    def _wall_ms(self) -> int:
        return self._now_ms() + self.coordinator.wall_offset_ms


# Queued fast-path calls of one group made per loop callback once its lock is handed over.
_BATCH_PER_CALLBACK: Final = 64


class _HeldCall(NamedTuple):
    handle: Callable[[Any, int, Callable[[Any], None]], None]
    inp: Any
    on_result: Callable[[Any], None]
    on_failure: Callable[[BaseException], None]
    context: contextvars.Context | None  # the request's, when it runs from a queue


class _HeldBatch:
    """Calls queued, in order, behind one waiter for their group's lock."""

    __slots__ = ("calls", "waiter")

    def __init__(self, waiter: _QueuedCaller, calls: list[_HeldCall]) -> None:
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


class _HeldWrites:
    """The appends of one held call: once complete its reply goes out (or its failure), then the calls
    queued behind it run (`then`, set when they were not complete by the time the call returned)."""

    __slots__ = ("done", "on_failure", "parked", "then")

    def __init__(self, parked: _ParkedReply[Any], on_failure: Callable[[BaseException], None]) -> None:
        self.parked = parked
        self.on_failure = on_failure
        self.done = False
        self.then: Callable[[], None] | None = None

    def resolved(self, error: BaseException | None) -> None:
        self.done = True
        if error is not None:
            self.on_failure(error)
        else:
            self.parked.written()
        then = self.then
        if then is not None:
            self.then = None
            then()


class _ParkedReply(Generic[R]):
    """The core's reply to a request taken by `_schedule_write`, passed on once the call's appends are
    complete too (only the first reply counts)."""

    __slots__ = ("durable", "has_result", "on_result", "result")

    def __init__(self, on_result: Callable[[R], None]) -> None:
        self.on_result = on_result
        self.durable = False
        self.has_result = False
        self.result: R | None = None

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


def _monotonic_ms(loop: asyncio.AbstractEventLoop) -> int:
    return int(loop.time() * 1000)


def _wall_offset_ms(loop: asyncio.AbstractEventLoop) -> int:
    return int(time.time() * 1000) - _monotonic_ms(loop)


