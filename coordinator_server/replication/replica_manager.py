"""The replica manager of one broker for one topic (Kafka's ReplicaManager and Partition): which of the
topic's partitions this node leads or follows, at which leader epoch, and what follows from it. The broker
runs one per topic: `__consumer_offsets`, whose leadership loads and unloads groups, and each topic of the
topic store (docs/cluster.md); what differs between them is behind `LocalReplicas` and `Roles`.

Theory of operation. ZooKeeper's partition states are the controller's word (docs/cluster.md): for each
partition, its leader, leader epoch and ISR. `on_partition_state` applies one such state:
- leader here at a newer epoch: stop fetching it, start the epoch in the leader-epoch cache at the log end,
  take the ISR as committed in ZooKeeper (with its znode version), and tell `Roles` (the coordinator loads
  the partition's groups);
- another leader: tell `Roles` (groups unload), and fetch from that leader (truncating first: fetcher.py);
- not a replica: neither.
As leader it serves its followers' fetches (advancing their log end offsets, the ISR and the high
watermark), answers OffsetForLeaderEpoch from its epoch cache, and completes appends (the coordinator's,
and a producer's with acks=all) once the high watermark covers them. ISR changes are written to ZooKeeper with the version
the leader last read: a leader that has been replaced meanwhile (a paused process) fails that write and
cannot shrink the ISR to itself; the high watermark counts only the ISR as committed in ZooKeeper, so a
stale leader never acknowledges anything its successor might not have. Losing the ZooKeeper session
resigns every partition at once.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from coordinator_server import cluster_metrics
from coordinator_server.cluster.partition_state import PartitionState
from coordinator_server.purgatory import DelayedOperationPurgatory, Timer
from coordinator_server.replication.delayed_produce import DelayedProduce, fail_partition, produce_key
from coordinator_server.replication.fetcher import ReplicaFetcher
from coordinator_server.replication.leader import IsrChange, PartitionLeader
from coordinator_server.replication.leader_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from coordinator_server.storage.log import PartitionLog
from protocol.errors import Errors

log = structlog.get_logger("coordinator_server.replication")

# offsets.commit.timeout.ms: how long a coordinator write may wait for the ISR before REQUEST_TIMED_OUT.
DEFAULT_COMMIT_TIMEOUT_MS = 5000
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class OffsetsView:
    """A led partition's offsets, for ListOffsets: [log_start_offset, log_end_offset) is on disk here, and
    below high_watermark is committed (on every ISR member)."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    leader_epoch: int


class IsrWriter(Protocol):
    """Writes a partition's ISR to ZooKeeper only if its state is still at `zk_version` (the cluster room)."""

    async def write_isr(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: tuple[int, ...],
                        controller_epoch: int, zk_version: int) -> int | None:
        """The new znode version, or None when the state moved on (this leader may be stale)."""
        ...

    async def read_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's state as ZooKeeper has it now."""
        ...


class LocalReplicas(Protocol):
    """This broker's copies of one topic's partitions: the coordinator log's for `__consumer_offsets`
    (storage.coordinator_log), the topic store's for the others (replication.local_replicas)."""

    def log(self, partition: int) -> PartitionLog: ...
    def directory(self, partition: int) -> Path: ...
    async def truncate(self, partition: int, offset: int) -> None: ...
    async def append_as_follower(self, partition: int, batches: list[bytes]) -> list[tuple[int, int]]: ...


class Roles(Protocol):
    """What else changes with leadership: for `__consumer_offsets` the group coordinator loads a partition
    it now leads and unloads one it stopped leading (told by the cluster node once the manager has applied
    the change: local_replicas.CoordinatorElections); for a data topic, parked consumer fetches answer when
    the high watermark moves or the leader goes."""

    def load_partition(self, partition: int, leader_epoch: int) -> object: ...
    def unload_partition(self, partition: int, leader_epoch: int | None, reason: str) -> object: ...
    def high_watermark_moved(self, partition: int) -> None: ...


@dataclass(slots=True)
class _Leading:
    leader_epoch: int
    state: PartitionLeader
    controller_epoch: int
    data: asyncio.Event = field(default_factory=asyncio.Event)  # set on every append: wakes parked fetches
    isr_update: asyncio.Task[None] | None = None


class ReplicaManager:
    """`timer` is the node's one timing wheel, which its "Produce" purgatory shares; the loop timer that
    drives it is the runtime's, built after this manager (whose appends it replicates), so whoever adds a
    DelayedProduce (`await_committed`) re-arms it. Completions need no re-arm here: a completed operation
    only leaves the wheel, and whoever it answers re-arms as it goes on."""

    def __init__(self, node_id: int, topic: str, local: LocalReplicas, roles: Roles, timer: Timer,
                 isr_writer: IsrWriter, endpoint_of: Callable[[int], tuple[str, int] | None],
                 min_insync_replicas: int, replica_lag_time_max_ms: int,
                 commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS) -> None:
        self.node_id = node_id
        self.topic = topic
        self.local = local
        self.roles = roles
        self.isr_writer = isr_writer
        self.endpoint_of = endpoint_of
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.commit_timeout_ms = commit_timeout_ms
        self._loop = asyncio.get_running_loop()
        self._leading: dict[int, _Leading] = {}
        self._following: dict[int, tuple[int, int]] = {}  # partition -> (leader id, leader epoch)
        self._fetchers: dict[int, ReplicaFetcher] = {}  # leader id -> its fetcher
        self._epochs: dict[int, LeaderEpochCache] = {}
        self._high_watermarks: dict[int, int] = {}
        self._known_epoch: dict[int, int] = {}  # the newest leader epoch applied per partition
        # Kafka's "Produce" purgatory: acks=all appends wait here for the high watermark.
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = DelayedOperationPurgatory(
            "Produce", timer)
        self._isr_task = self._loop.create_task(self._isr_maintenance(), name=f"isr-maintenance-{topic}")
        self._transitions: dict[int, asyncio.Lock] = {}
        self._unreachable: set[int] = set()  # followed partitions whose leader's address is not known yet

    # -- the controller's word ---------------------------------------------------------------------

    async def on_partition_state(self, state: PartitionState) -> None:
        """Apply one partition state read from ZooKeeper (a watch fired, or a re-read)."""
        p = state.partition
        lock = self._transitions.setdefault(p, asyncio.Lock())
        async with lock:  # transitions of one partition in order; other partitions never wait
            known = self._known_epoch.get(p, -1)
            leading = self._leading.get(p)
            if state.leader_epoch < known:
                return
            if state.leader_epoch == known:
                # Same epoch: only the ISR (and the znode version) changed: our own write coming back, or
                # the controller dropping a dead follower. Take it as committed.
                if leading is not None and state.leader == self.node_id \
                        and state.zk_version > leading.state.zk_version:
                    leading.controller_epoch = state.controller_epoch
                    leading.state.on_leader_and_isr(state.leader_epoch, state.isr, state.zk_version,
                                                    self._now_ms())
                    self._hw_maybe_moved(p)
                    self._refresh_gauges()
                return
            self._known_epoch[p] = state.leader_epoch
            if state.leader == self.node_id:
                await self._become_leader(state)
            elif self.node_id in state.replicas and state.leader >= 0:
                await self._become_follower(p, state.leader, state.leader_epoch)
            else:
                await self._stop_replica(p, state.leader_epoch, "no longer a replica" if state.leader >= 0
                                         else "partition offline")
            self._refresh_gauges()

    async def resign_all(self, reason: str) -> None:
        """The ZooKeeper session is gone: another node may be elected for anything this one leads, so stop
        acknowledging at once, and stop fetching (the states will be re-read on a new session)."""
        for p in list(self._leading):
            self._resign_leader(p, None, reason)
        for p in list(self._following):
            await self._stop_following(p)
        self._known_epoch.clear()
        self._refresh_gauges()

    async def close(self) -> None:
        self._isr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._isr_task
        for p in list(self._leading):
            self._resign_leader(p, None, "shutdown")
        for fetcher in list(self._fetchers.values()):
            await fetcher.close()
        self._fetchers.clear()
        self._following.clear()

    # -- transitions -------------------------------------------------------------------------------

    async def _become_leader(self, state: PartitionState) -> None:
        p = state.partition
        await self._stop_following(p)
        plog = self._plog(p)
        leo = plog.next_offset
        cache = self._epoch_cache(p)
        cache.assign(state.leader_epoch, leo)  # flushes the checkpoint (a small fsync, once per election)
        hw = min(self._high_watermarks.get(p, 0), leo)
        leader = PartitionLeader.make_leader(self.node_id, state.leader_epoch, state.replicas, state.isr,
                                             state.zk_version, leo, hw, self._now_ms(),
                                             self.replica_lag_time_max_ms)
        self._leading[p] = _Leading(state.leader_epoch, leader, state.controller_epoch)
        log.info("became_leader", topic=self.topic, partition=p, leader_epoch=state.leader_epoch, isr=sorted(state.isr),
                 log_end_offset=leo, high_watermark=leader.high_watermark)
        self.roles.load_partition(p, state.leader_epoch)

    async def _become_follower(self, p: int, leader: int, leader_epoch: int) -> None:
        if p in self._leading:
            self._resign_leader(p, leader_epoch, f"broker {leader} leads at epoch {leader_epoch}")
        else:
            self.roles.unload_partition(p, leader_epoch, f"broker {leader} leads at epoch {leader_epoch}")
        await self._stop_following(p)
        self._following[p] = (leader, leader_epoch)
        endpoint = self.endpoint_of(leader)
        if endpoint is None:
            # Its registration is not known here yet (watches race); brokers_changed starts the fetch.
            log.info("leader_endpoint_unknown", partition=p, leader=leader)
            self._unreachable.add(p)
            return
        self._start_fetching(p, leader, leader_epoch, endpoint)

    def _start_fetching(self, p: int, leader: int, leader_epoch: int, endpoint: tuple[str, int]) -> None:
        self._unreachable.discard(p)
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = ReplicaFetcher(self.node_id, leader, endpoint[0], endpoint[1], self.topic, _FollowerLog(self))
            self._fetchers[leader] = fetcher
        elif fetcher.address != endpoint:
            fetcher.retarget(*endpoint)  # the leader came back at another address
        fetcher.add_partition(p, leader_epoch)
        log.info("became_follower", topic=self.topic, partition=p, leader=leader, leader_epoch=leader_epoch,
                 log_end_offset=self._plog(p).next_offset)

    async def _stop_replica(self, p: int, leader_epoch: int, reason: str) -> None:
        if p in self._leading:
            self._resign_leader(p, leader_epoch, reason)
        else:
            self.roles.unload_partition(p, leader_epoch, reason)
        await self._stop_following(p)

    def _resign_leader(self, p: int, leader_epoch: int | None, reason: str) -> None:
        leading = self._leading.pop(p, None)
        if leading is None:
            return
        if leading.isr_update is not None:
            leading.isr_update.cancel()
        leading.state.resign()
        # Every write still waiting for the ISR is answered NOT_LEADER_OR_FOLLOWER now (the coordinator
        # maps it to NOT_COORDINATOR): the next leader decides what of it survived.
        fail_partition(self.produce_purgatory, self.topic, p)
        leading.data.set()  # parked fetches answer now (they will find no leader)
        self._high_watermarks[p] = leading.state.high_watermark
        self.roles.unload_partition(p, leader_epoch, reason)
        log.info("resigned_leader", topic=self.topic, partition=p, leader_epoch=leading.leader_epoch, reason=reason)

    def brokers_changed(self) -> None:
        """Start fetching partitions whose leader's address was not known when they were assigned to us."""
        for p in sorted(self._unreachable):
            leader, epoch = self._following[p]
            endpoint = self.endpoint_of(leader)
            if endpoint is not None:
                self._start_fetching(p, leader, epoch, endpoint)

    async def _stop_following(self, p: int) -> None:
        self._unreachable.discard(p)
        following = self._following.pop(p, None)
        if following is None:
            return
        fetcher = self._fetchers.get(following[0])
        if fetcher is not None:
            await fetcher.remove_partition(p)
            if not fetcher.partitions:
                del self._fetchers[following[0]]
                await fetcher.close()

    # -- appends: the coordinator's (runtime.ReplicationGate, acks=all) and producers' ----------------

    def append_error(self, partition: int, acks: int = -1) -> Errors | None:
        """Why an append with `acks` may not be written here now (not the leader; acks=all with the ISR
        below min.insync.replicas), or None."""
        leading = self._leading.get(partition)
        if leading is None:
            return Errors.NOT_LEADER_OR_FOLLOWER
        error = leading.state.check_append(acks, self.min_insync_replicas)
        return None if error == Errors.NONE else error

    def leader_epoch(self, partition: int) -> int:
        leading = self._leading.get(partition)
        return leading.leader_epoch if leading is not None else -1

    def appended(self, partition: int) -> None:
        """Records were written here as leader: wake followers' parked fetches."""
        leading = self._leading.get(partition)
        if leading is not None:
            leading.state.on_leader_append(self._plog(partition).next_offset)
            leading.data.set()
            leading.data = asyncio.Event()

    def await_committed(self, partition: int, on_done: Callable[[Errors], None], required: int | None = None,
                        timeout_ms: int | None = None) -> None:
        """Call `on_done` once the high watermark reaches `required` (by default the log end: everything
        written so far), with NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT
        as Kafka's DelayedProduce answers."""
        leading = self._leading.get(partition)
        if leading is None:
            on_done(Errors.NOT_LEADER_OR_FOLLOWER)
            return
        leo = self._plog(partition).next_offset
        required = leo if required is None else required
        leading.state.on_leader_append(leo)  # with the ISR down to this leader, that alone commits
        leading.data.set()
        leading.data = asyncio.Event()
        operation = DelayedProduce(self.commit_timeout_ms if timeout_ms is None else timeout_ms,
                                   {(self.topic, partition): (leading.state, required)},
                                   self.min_insync_replicas, lambda errors: on_done(next(iter(errors.values()))))
        # On the shared wheel: the caller re-arms the loop timer for the operation's timeout.
        self.produce_purgatory.try_complete_else_watch(operation, operation.watch_keys(), self._wheel_now_ms())

    def _hw_maybe_moved(self, p: int) -> None:
        self.produce_purgatory.check_and_complete(produce_key(self.topic, p))
        self.roles.high_watermark_moved(p)

    # -- serving followers ---------------------------------------------------------------------------

    def leader_check(self, partition: int, current_leader_epoch: int) -> Errors:
        leading = self._leading.get(partition)
        if leading is None:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch >= 0:
            if current_leader_epoch < leading.leader_epoch:
                return Errors.FENCED_LEADER_EPOCH
            if current_leader_epoch > leading.leader_epoch:
                return Errors.UNKNOWN_LEADER_EPOCH
        return Errors.NONE

    def high_watermark(self, partition: int) -> int:
        leading = self._leading.get(partition)
        if leading is not None:
            return leading.state.high_watermark
        return self._high_watermarks.get(partition, 0)

    def offsets_view(self, partition: int, current_leader_epoch: int) -> tuple[Errors, OffsetsView | None]:
        """What ListOffsets and a consumer's Fetch read: only the partition's leader answers (Kafka's
        fetchOnlyFromLeader), fenced by the caller's leader epoch as a follower's fetch is."""
        error = self.leader_check(partition, current_leader_epoch)
        if error != Errors.NONE:
            return error, None
        plog = self._plog(partition)
        leading = self._leading[partition]
        return Errors.NONE, OffsetsView(plog.log_start_offset, leading.state.high_watermark, plog.next_offset,
                                        leading.leader_epoch)

    def replica_read(self, replica_id: int, partition: int, fetch_offset: int, current_leader_epoch: int,
                     max_bytes: int) -> tuple[Errors, bytes, int, int]:
        """One partition of a follower's fetch: (error, records, high watermark, log start offset). The
        follower's log end offset is `fetch_offset` (Kafka's updateFollowerFetchState): it may join the ISR
        and move the high watermark, completing the coordinator's waiting appends."""
        error = self.leader_check(partition, current_leader_epoch)
        if error != Errors.NONE:
            return error, b"", -1, -1
        plog = self._plog(partition)
        leading = self._leading[partition]
        if replica_id not in leading.state.followers:
            return Errors.NOT_LEADER_OR_FOLLOWER, b"", -1, -1
        if not plog.log_start_offset <= fetch_offset <= plog.next_offset:
            return Errors.OFFSET_OUT_OF_RANGE, b"", leading.state.high_watermark, plog.log_start_offset
        self._follower_fetched(partition, leading, replica_id, fetch_offset)
        records = plog.read_batches(fetch_offset, max_bytes) if fetch_offset < plog.next_offset else b""
        return Errors.NONE, records, leading.state.high_watermark, plog.log_start_offset

    async def wait_for_append(self, partitions: list[int], max_wait_ms: int) -> None:
        """A follower's fetch found nothing new: park it (a DelayedFetch) until one of `partitions` gets an
        append or stops being led here, or max_wait_ms passes."""
        events = [self._leading[p].data for p in partitions if p in self._leading]
        if not events or max_wait_ms <= 0:
            return
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=max_wait_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _follower_fetched(self, p: int, leading: _Leading, replica_id: int, fetch_offset: int) -> None:
        leading.state.on_leader_append(self._plog(p).next_offset)
        update = leading.state.update_follower_fetch_state(replica_id, fetch_offset, self._now_ms())
        if update.isr_change is not None:
            self._write_isr_change(p, leading, update.isr_change, "expand")
        if update.high_watermark_advanced:
            self._hw_maybe_moved(p)

    def offset_for_leader_epoch(self, partition: int, current_leader_epoch: int,
                                epoch: int) -> tuple[Errors, int, int]:
        """(error, epoch, end offset) as Kafka's leader answers OffsetForLeaderEpoch from its epoch cache."""
        error = self.leader_check(partition, current_leader_epoch)
        if error != Errors.NONE:
            return error, -1, -1
        found_epoch, end = self._epoch_cache(partition).end_offset_for(epoch, self._plog(partition).next_offset)
        return Errors.NONE, found_epoch, end

    # -- the ISR ------------------------------------------------------------------------------------

    async def _isr_maintenance(self) -> None:
        """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2, drop followers out of sync."""
        interval = max(self.replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = self._now_ms()
            for p, leading in list(self._leading.items()):
                leading.state.on_leader_append(self._plog(p).next_offset)
                change = leading.state.maybe_shrink_isr(now)
                if change is not None:
                    log.info("isr_shrink_proposed", topic=self.topic, partition=p, isr=sorted(change.isr),
                             out_of_sync=sorted(leading.state.isr - change.isr))
                    self._write_isr_change(p, leading, change, "shrink")

    def _write_isr_change(self, p: int, leading: _Leading, change: IsrChange, kind: str) -> None:
        # In an empty context: the follower's fetch that triggered it is not what the change belongs to.
        leading.isr_update = self._loop.create_task(self._write_isr(p, leading, change, kind),
                                                    context=contextvars.Context())

    async def _write_isr(self, p: int, leading: _Leading, change: IsrChange, kind: str) -> None:
        isr = tuple(sorted(change.isr))
        try:
            version = await self.isr_writer.write_isr(self.topic, p, self.node_id, change.leader_epoch, isr,
                                                      leading.controller_epoch, change.expected_zk_version)
        except Exception as e:
            log.warning("isr_update_failed", partition=p, isr=list(isr), error=repr(e))
            version = None
        leading.isr_update = None
        if self._leading.get(p) is not leading:
            return
        if version is None:
            # The state moved on (the controller or a newer leader wrote it), or the write itself failed.
            # The change stays in flight (PartitionLeader.on_isr_write_failed) until the state that is true
            # is known: read it now rather than wait for a watch, which never fires if nothing changed.
            leading.state.on_isr_write_failed()
            log.warning("isr_update_rejected", partition=p, isr=list(isr), zk_version=change.expected_zk_version)
            try:
                current = await self.isr_writer.read_state(self.topic, p)
            except Exception as e:
                log.warning("partition_state_read_failed", partition=p, error=repr(e))
                current = None
            if (current is not None and self._leading.get(p) is leading and current.leader == self.node_id
                    and current.leader_epoch == leading.leader_epoch and current.zk_version >= leading.state.zk_version):
                leading.controller_epoch = current.controller_epoch
                leading.state.on_leader_and_isr(current.leader_epoch, current.isr, current.zk_version, self._now_ms())
                self._hw_maybe_moved(p)
            return
        if version <= leading.state.zk_version:
            # The watch already brought a newer state (e.g. the controller's shrink right after our
            # expansion): that one is the truth, not what we wrote before it.
            log.info("isr_update_superseded", partition=p, isr=list(isr), zk_version=version,
                     current_zk_version=leading.state.zk_version)
            return
        advanced = leading.state.on_isr_write_succeeded(change, version)
        (cluster_metrics.ISR_SHRINKS if kind == "shrink" else cluster_metrics.ISR_EXPANDS).inc()
        log.info("isr_updated", topic=self.topic, partition=p, isr=list(isr), kind=kind, zk_version=version)
        if advanced:
            self._hw_maybe_moved(p)
        self._refresh_gauges()

    # -- views for handlers and tools ---------------------------------------------------------------

    def role(self, partition: int) -> str:
        if partition in self._leading:
            return "leader"
        if partition in self._following:
            return "follower"
        return "none"

    def leading_partitions(self) -> list[int]:
        return sorted(self._leading)

    def under_replicated(self) -> int:
        return sum(1 for lead in self._leading.values() if len(lead.state.isr) < len(lead.state.replicas))

    def _refresh_gauges(self) -> None:
        cluster_metrics.LEADER_PARTITIONS.labels(self.topic).set(len(self._leading))
        cluster_metrics.UNDER_REPLICATED.labels(self.topic).set(self.under_replicated())

    # -- local replicas -----------------------------------------------------------------------------

    def _plog(self, p: int) -> PartitionLog:
        return self.local.log(p)

    def _epoch_cache(self, p: int) -> LeaderEpochCache:
        cache = self._epochs.get(p)
        if cache is None:
            path = self.local.directory(p) / EPOCH_CHECKPOINT
            cache = LeaderEpochCache.load(path)
            # Whatever the checkpoint says past the log end is gone (truncated, or never written).
            cache.truncate_from_end(self._plog(p).next_offset)
            self._epochs[p] = cache
        return cache

    def _now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def _wheel_now_ms(self) -> int:
        # The shared wheel's clock is the loop's (runtime.timer.monotonic_ms).
        return int(self._loop.time() * 1000)


class _FollowerLog:
    """fetcher.FollowerLog over this node's local replicas; writes go through the log's I/O thread, so they
    never interleave with the writer's rounds or a compaction swap."""

    def __init__(self, manager: ReplicaManager) -> None:
        self._m = manager

    def log_end_offset(self, partition: int) -> int:
        return self._m._plog(partition).next_offset

    def high_watermark(self, partition: int) -> int:
        return self._m._high_watermarks.get(partition, 0)

    def latest_epoch(self, partition: int) -> int:
        latest = self._m._epoch_cache(partition).latest_epoch()
        return UNDEFINED_EPOCH if latest is None else latest

    def epoch_cache(self, partition: int) -> LeaderEpochCache:
        return self._m._epoch_cache(partition)

    def end_offset_for_epoch(self, partition: int, epoch: int) -> tuple[int, int]:
        return self._m._epoch_cache(partition).end_offset_for(epoch, self.log_end_offset(partition))

    async def truncate_to(self, partition: int, offset: int) -> None:
        await self._m.local.truncate(partition, offset)
        self._m._epoch_cache(partition).truncate_from_end(offset)  # flushes the checkpoint when it changed
        self._m._high_watermarks[partition] = min(self._m._high_watermarks.get(partition, 0), offset)

    async def append(self, partition: int, batches: list[bytes]) -> None:
        # Durable (per --fsync) before the next fetch tells the leader this offset: the copy counts for acks.
        appended = await self._m.local.append_as_follower(partition, batches)
        cache = self._m._epoch_cache(partition)
        for epoch, base in appended:
            if epoch >= 0:
                cache.assign(epoch, base)  # flushes the checkpoint when the epoch is new

    def update_high_watermark(self, partition: int, high_watermark: int) -> None:
        self._m._high_watermarks[partition] = min(high_watermark, self.log_end_offset(partition))
