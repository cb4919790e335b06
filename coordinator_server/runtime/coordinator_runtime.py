"""The imperative shell around the coordinator core: the clock, the one loop timer, per-group locks and
the durable appends, each in a module of its own (timer.py, locks.py and scheduler.py, appends.py); this
class composes them and owns the node's lifecycle (open, close, load and unload a partition).

Theory of operation. The core is synchronous; the runtime feeds it the loop's monotonic time, arms exactly
one `loop.call_at` at the timing wheel's next bucket deadline, and makes the core's records durable.
Requests of one group (join, sync, leave, commit) are serialized by that group's lock, held across the
durable append their call produced, so a response never goes out before the records its request caused are
durable, and the next request of that group sees the outcome — while other groups never wait on it.
Heartbeats take no lock: they write nothing and are the hot path.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from coordinator_server import cluster_metrics
from coordinator_server.config import Config
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
    SyncGroupInput,
    SyncGroupResult,
)
from coordinator_server.group.consumer.api import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatResult,
)
from coordinator_server.group.consumer.topics import TopicsImage
from coordinator_server.group.coordinator import GroupCoordinator
from coordinator_server.metrics import ConsumerGroupMetrics, GroupMetrics
from coordinator_server.purgatory import Timer
from coordinator_server.storage import CoordinatorLog
from coordinator_server.storage.coordinator_log import OFFSETS_LOG, open_from_config
from protocol.errors import Errors

from .appends import AppendListener, AppendPipeline, ReplicationGate
from .scheduler import GroupScheduler
from .settings import consumer_group_config, group_config
from .timer import LoopTimer, monotonic_ms, wall_offset_ms

log = structlog.get_logger("coordinator_server.runtime")


class CoordinatorRuntime:
    """`on_append` and `replication` are the two things outside the core that every append meets (see
    `AppendPipeline`); both are given here, at construction, by the composition root (app.build)."""

    def __init__(self, log_: CoordinatorLog, coordinator: GroupCoordinator, loop: asyncio.AbstractEventLoop,
                 on_append: AppendListener | None = None, replication: ReplicationGate | None = None) -> None:
        self.log = log_
        self.coordinator = coordinator
        self.loop = loop
        self._timer = LoopTimer(loop, coordinator, self._write_due)
        self.appends = AppendPipeline(log_, coordinator, loop, self._timer.now_ms, self.rearm_timer,
                                      replication, on_append)
        self._scheduler = GroupScheduler(coordinator, loop, self._timer, self.appends, self.rearm_timer)
        self.locks = self._scheduler.locks
        # Bound once: the commit path is the hottest write, and a bound method per call is an allocation.
        self._handle_offset_commit = coordinator.handle_offset_commit
        self._closed = False
        self._loads: dict[int, asyncio.Task[None]] = {}

    # -- lifecycle -----------------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: Config, log_: CoordinatorLog, timer: Timer, topics: TopicsImage | None = None,
                   on_append: AppendListener | None = None, replication: ReplicationGate | None = None,
                   load_all: bool = True) -> CoordinatorRuntime:
        """The runtime over `log_` (opened by the caller: `open_coordinator_log`, which takes the data
        directory's lock) and `timer`, the one timing wheel (the caller's other purgatories share it):
        replay every partition and start the loop timer. `topics` is what consumer groups subscribe to and
        are assigned from. In a cluster (`load_all=False`) no partition is loaded here: each is loaded when
        this node becomes its leader. On failure the log stays open: it is the caller's to close."""
        loop = asyncio.get_running_loop()
        started_s = time.monotonic()
        coordinator = GroupCoordinator(
            group_config(config), log_.partitions, timer, wall_offset_ms=wall_offset_ms(loop),
            events=GroupMetrics(), consumer_config=consumer_group_config(config), topics=topics,
            consumer_events=ConsumerGroupMetrics(),
        )
        runtime = cls(log_, coordinator, loop, on_append, replication)
        if load_all:
            for partition in range(log_.partitions):
                coordinator.begin_loading(partition)
            groups = 0
            for partition in range(log_.partitions):
                groups += coordinator.load_partition(partition, log_.replay_latest(partition), monotonic_ms(loop))
            # One line for the whole load (recovery and replay); the per-partition lines are debug, so
            # an empty data directory does not log 50 lines before `listening`.
            log.info("coordinator_loaded", partitions=log_.partitions, groups=groups,
                     offsets=sum(len(group.offsets) for group in coordinator.groups.values()),
                     seconds=round(time.monotonic() - started_s, 3))
        await runtime._after_core_call()
        return runtime

    async def close(self) -> None:
        """Answer parked requests with NOT_COORDINATOR, wait for writes in flight, flush and fsync the log."""
        if self._closed:
            return
        self._closed = True
        self.coordinator.shutdown(self._now_ms())
        self._timer.close()
        # Appends emitted by the shutdown (none today) and those in flight still get written.
        await self.appends.drain()
        await self.appends.idle()
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
    # Every request of a group goes through one entry, the scheduler's `write` or `read` (scheduler.py);
    # the callers answer from `on_result`; `on_failure` is a bug met in the core or while writing, which
    # closes the request's connection.

    def join_group(self, inp: JoinGroupInput, on_result: Callable[[JoinGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None:
        self._scheduler.write(inp.group_id, self.coordinator.handle_join_group, inp, on_result, on_failure)

    def sync_group(self, inp: SyncGroupInput, on_result: Callable[[SyncGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None:
        self._scheduler.write(inp.group_id, self.coordinator.handle_sync_group, inp, on_result, on_failure)

    def leave_group(self, inp: LeaveGroupInput, on_result: Callable[[LeaveGroupResult], None],
                    on_failure: Callable[[BaseException], None]) -> None:
        self._scheduler.write_answered(inp.group_id, self.coordinator.handle_leave_group, inp, on_result,
                                       on_failure)

    def heartbeat(self, inp: HeartbeatInput) -> Errors:
        """Synchronous, the hot path: a heartbeat takes no lock and writes nothing. Timers it finds due
        run after it, as after any call; what they write is theirs to wait for (their own responses wait
        for it), not the heartbeat's, as in Kafka where expirations run on the timer's own thread."""
        now_ms = self._now_ms()
        error = self.coordinator.handle_heartbeat(inp, now_ms)
        deadline = self.coordinator.next_expiration_ms()
        if (deadline is not None and deadline <= now_ms) or self.coordinator.has_appends():
            self.rearm_timer()
        elif not self._timer.armed_for(deadline):
            self._timer.arm()
        return error

    def consumer_group_heartbeat(self, inp: ConsumerGroupHeartbeatInput,
                                 on_result: Callable[[ConsumerGroupHeartbeatResult], None],
                                 on_failure: Callable[[BaseException], None]) -> None:
        """KIP-848: under the group's lock, answered once the records it caused are durable. The member's
        session is restarted at arrival, before the lock: a heartbeat on time is never expired while it waits."""
        self.coordinator.note_consumer_heartbeat_arrival(inp, self._now_ms())
        self._scheduler.write(inp.group_id, self.coordinator.handle_consumer_group_heartbeat, inp, on_result,
                             on_failure)

    def offset_commit(self, inp: OffsetCommitInput, on_result: Callable[[OffsetCommitResult], None],
                      on_failure: Callable[[BaseException], None]) -> None:
        self._scheduler.write(inp.group_id or "", self._handle_offset_commit, inp, on_result, on_failure)

    def offset_fetch(self, inp: OffsetFetchInput, on_result: Callable[[OffsetFetchResult], None],
                     on_failure: Callable[[BaseException], None]) -> None:
        """A read: it waits only behind requests of its group whose records are still being written (a
        fetch must see the outcome of a commit answered before it)."""
        self._scheduler.read(inp.group_id or "", self.coordinator.handle_offset_fetch, inp, on_result, on_failure)

    def offset_delete(self, inp: OffsetDeleteInput, on_result: Callable[[OffsetDeleteResult], None],
                      on_failure: Callable[[BaseException], None]) -> None:
        self._scheduler.write(inp.group_id or "", self.coordinator.handle_offset_delete, inp, on_result,
                             on_failure)

    async def consumer_group_describe(self, group_ids: list[str]) -> list[ConsumerGroupDescription]:
        return self.coordinator.handle_consumer_group_describe(group_ids, self._now_ms())

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

    # -- the clock and the one timer -----------------------------------------------------------------

    @property
    def timer(self) -> Timer:
        """The one timing wheel: other purgatories (e.g. delayed fetches) share it."""
        return self.coordinator.timer

    def now_ms(self) -> int:
        return monotonic_ms(self.loop)

    def rearm_timer(self) -> None:
        """Call after adding to the shared timer from outside the core, so the loop timer covers it; the
        timers due now run, and what they emit is written."""
        self._timer.advance(self._now_ms())
        self._timer.arm()
        self._write_due()

    def _write_due(self) -> None:
        appends = self.coordinator.take_appends()
        if appends:
            self.appends.spawn(appends)

    def _now_ms(self) -> int:
        return monotonic_ms(self.loop)

    async def _after_core_call(self) -> None:
        # Due timers of this very moment run after the request that made them due, as Kafka's
        # executor does, never in the middle of it.
        self._timer.advance(self._now_ms())
        self._timer.arm()
        await self.appends.drain()


def open_coordinator_log(config: Config) -> CoordinatorLog:
    """Open (recovering) the `__consumer_offsets` log: the first thing a node opens, since it takes the
    data directory's lock."""
    return open_from_config(config, OFFSETS_LOG, config.offsets_partitions)


def shared_timer(loop: asyncio.AbstractEventLoop) -> Timer:
    """The one timing wheel of a node, started at the loop's clock: the core's delayed operations and the
    shell's purgatories (Fetch, Produce) share it, and the runtime's one loop timer drives it."""
    return Timer(monotonic_ms(loop))
