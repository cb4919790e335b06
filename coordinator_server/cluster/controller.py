"""Who leads what: every broker's view of the cluster (`ClusterView`), and the controller role one broker
holds at a time (`Controller`), both over ZooKeeper in Kafka's layout (zk_layout.py).

Theory of operation. The controller is whoever created the ephemeral /controller; it bumps
/controller_epoch on taking over and every write it makes is a transaction checking that epoch's znode
version, so a controller that was replaced (its session gone, a successor elected) cannot write anything.
It creates `__consumer_offsets` once `offsets.topic.replication.factor` brokers are registered (KIP-115),
elects a new leader from the ISR when a leader's registration disappears (unclean only when allowed),
drops a dead follower from the ISR, elects again when a replica of an offline partition returns, and moves
leadership away from a broker in controlled shutdown. It only writes partition states: brokers learn them
through their own watches (ClusterView), so LeaderAndIsr travels as a ZooKeeper watch (docs/decisions.md).
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from coordinator_server import cluster_metrics
from coordinator_server.cluster import election
from coordinator_server.cluster import zk_layout as zl
from coordinator_server.cluster.partition_state import PartitionState
from coordinator_server.cluster.zk_client import ZkClient

log = structlog.get_logger("coordinator_server.cluster")


class ClusterView:
    """What this broker knows of the cluster, kept current by watches: live brokers, the controller, and
    each partition state of one topic. `on_partition_state` hears every state change, in the order read."""

    def __init__(self, zk: ZkClient, topic: str) -> None:
        self.zk = zk
        self.topic = topic
        self.on_partition_state: Callable[[PartitionState], None] = lambda state: None
        self.on_brokers_changed: Callable[[], None] = lambda: None
        self._brokers: dict[int, zl.BrokerRegistration] = {}
        self._controller = -1
        self._assignment: dict[int, list[int]] | None = None
        self._states: dict[int, PartitionState] = {}
        self._watched: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.zk.ensure_paths()
        # Brokers first: a partition state names its leader by id, and the follower needs its address.
        self._brokers = await self.zk.brokers()
        self.zk.watch_children(zl.BROKER_IDS, self._brokers_changed)
        self.zk.watch_data(zl.CONTROLLER, self._controller_changed)
        self.zk.watch_data(zl.topic_path(self.topic), self._assignment_changed)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()

    # -- questions -----------------------------------------------------------------------------------

    def live_brokers(self) -> list[zl.BrokerRegistration]:
        return [self._brokers[i] for i in sorted(self._brokers)]

    def broker(self, node_id: int) -> zl.BrokerRegistration | None:
        return self._brokers.get(node_id)

    def controller_id(self) -> int:
        return self._controller

    def partition_state(self, partition: int) -> PartitionState | None:
        return self._states.get(partition)

    def partition_states(self) -> list[PartitionState]:
        return [self._states[p] for p in sorted(self._states)]

    async def reread(self) -> list[PartitionState]:
        """Every partition state as ZooKeeper has it now (after a new session), also kept as the view."""
        await self._read_brokers([str(b) for b in (await self.zk.brokers())])
        out = []
        for p in sorted(self._watched):
            got = await self.zk.partition_state(self.topic, p)
            if got is None or self._assignment is None:
                continue
            state, version = got
            view = PartitionState(p, state.leader, state.leader_epoch, state.isr,
                                 tuple(self._assignment.get(p, ())), state.controller_epoch, version)
            self._states[p] = view
            out.append(view)
        return out

    # -- watches (on the loop) -------------------------------------------------------------------------

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _brokers_changed(self, children: list[str]) -> None:
        self._spawn(self._read_brokers(children))

    async def _read_brokers(self, children: list[str]) -> None:
        brokers = {}
        for child in children:
            got = await self.zk.get(zl.broker_path(int(child)))
            if got is not None:
                brokers[int(child)] = zl.BrokerRegistration.decode(int(child), got[0])
        self._brokers = brokers
        self.on_brokers_changed()

    def _controller_changed(self, data: bytes | None, _version: int) -> None:
        self._controller = zl.decode_controller(data) if data else -1

    def _assignment_changed(self, data: bytes | None, _version: int) -> None:
        if not data:
            return
        self._assignment = zl.decode_assignment(data)
        for p in self._assignment:
            if p not in self._watched:
                self._watched.add(p)
                self.zk.watch_data(zl.partition_state_path(self.topic, p),
                                   lambda d, v, p=p: self._state_changed(p, d, v))

    def _state_changed(self, partition: int, data: bytes | None, version: int) -> None:
        if not data or self._assignment is None:
            return
        state = zl.LeaderAndIsr.decode(data)
        view = PartitionState(partition, state.leader, state.leader_epoch, state.isr,
                             tuple(self._assignment.get(partition, ())), state.controller_epoch, version)
        self._states[partition] = view
        self.on_partition_state(view)


class Controller:
    def __init__(self, zk: ZkClient, node_id: int, *, offsets_topic: str, offsets_partitions: int,
                 offsets_replication_factor: int, unclean_leader_election: bool) -> None:
        self.zk = zk
        self.node_id = node_id
        self.topic = offsets_topic
        self.partitions = offsets_partitions
        self.replication_factor = offsets_replication_factor
        self.unclean = unclean_leader_election
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._live: set[int] = set()
        self._shutting_down: set[int] = set()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._missing_logged: int | None = None
        self._closed = False

    async def start(self) -> None:
        self.zk.watch_data(zl.CONTROLLER, self._controller_changed)
        self.zk.watch_children(zl.BROKER_IDS, self._brokers_changed)

    async def close(self) -> None:
        self._closed = True
        self.active = False
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coro: object) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- election --------------------------------------------------------------------------------------

    def _controller_changed(self, data: bytes | None, _version: int) -> None:
        if data is None:
            self.active = False
            self._spawn(self._campaign())
        elif zl.decode_controller(data) != self.node_id and self.active:
            log.warning("controller_resigned", node_id=self.node_id, new_controller=zl.decode_controller(data))
            self.active = False

    async def _campaign(self) -> None:
        if not await self.zk.create_controller(self.node_id):
            return
        async with self._lock:
            self.epoch, self._epoch_version = await self.zk.bump_controller_epoch()
            self.active = True
            self._shutting_down.clear()
            log.info("controller_elected", node_id=self.node_id, controller_epoch=self.epoch)
        await self._reconcile()

    def session_restored(self) -> None:
        """A new ZooKeeper session: the old /controller (if ours) is gone with the old one; campaign again."""
        self.active = False
        self._spawn(self._campaign())

    # -- brokers coming and going ---------------------------------------------------------------------

    def _brokers_changed(self, children: list[str]) -> None:
        live = {int(c) for c in children}
        gone = self._live - live
        self._live = live
        self._shutting_down -= gone  # a broker that finished its controlled shutdown
        if self.active:
            self._spawn(self._reconcile())

    async def _reconcile(self) -> None:
        """Bring every partition state in line with the live brokers (and create the topic when it can)."""
        async with self._lock:
            if not self.active:
                return
            live = set(await self.zk.children(zl.BROKER_IDS))
            live_ids = {int(b) for b in live}
            self._live = live_ids
            assignment_raw = await self.zk.get(zl.topic_path(self.topic))
            if assignment_raw is None:
                await self._maybe_create_topic(live_ids)
                return
            assignment = zl.decode_assignment(assignment_raw[0])
            for p, replicas in sorted(assignment.items()):
                await self._reconcile_partition(p, replicas, live_ids)

    async def _maybe_create_topic(self, live: set[int]) -> None:
        missing = self.replication_factor - len(live)
        if missing > 0:
            if self._missing_logged != missing:
                self._missing_logged = missing
                log.warning("offsets_topic_not_created", topic=self.topic, live_brokers=len(live),
                            replication_factor=self.replication_factor, brokers_missing=missing)
            return
        assignment = election.assign_replicas(sorted(live), self.partitions, self.replication_factor)
        states = {p: zl.LeaderAndIsr(r[0], 0, tuple(r), self.epoch) for p, r in assignment.items()}
        if await self.zk.create_topic(self.topic, assignment, states, self._epoch_version):
            log.info("offsets_topic_created", topic=self.topic, partitions=self.partitions,
                     replication_factor=self.replication_factor, brokers=sorted(live))

    async def _reconcile_partition(self, p: int, replicas: list[int], live: set[int]) -> None:
        for _attempt in range(5):
            got = await self.zk.partition_state(self.topic, p)
            if got is None:
                return
            current, version = got
            # Liveness as of now, not as of the watch that started this: a broker that re-registered
            # meanwhile (a quick restart) may already be back in the ISR, and must not be dropped again.
            live = {int(b) for b in await self.zk.children(zl.BROKER_IDS)}
            new: zl.LeaderAndIsr | None = None
            kind = ""
            if current.leader not in live or current.leader in self._shutting_down:
                candidate, unclean = election.offline_leader(current, replicas, live - self._shutting_down,
                                                             self.unclean, self.epoch)
                if candidate.leader == zl.NO_LEADER and current.leader == zl.NO_LEADER:
                    return  # still nobody to elect: leave the epoch alone
                new, kind = candidate, "unclean" if unclean else "offline"
            else:
                for broker in current.isr:
                    if broker not in live:
                        new = election.without_follower(new or current, broker, self.epoch) or new
                kind = "isr_shrink"
            if new is None or new == current:
                return
            written = await self.zk.write_state_as_controller(self.topic, p, new, version, self._epoch_version)
            if written is not None:
                if kind != "isr_shrink":
                    cluster_metrics.LEADER_ELECTIONS.labels(kind).inc()
                log.info("partition_state_changed", topic=self.topic, partition=p, reason=kind,
                         leader=new.leader, leader_epoch=new.leader_epoch, isr=list(new.isr),
                         previous_leader=current.leader)
                return
            if not self.active:
                return
        log.warning("partition_state_write_gave_up", partition=p)

    # -- controlled shutdown ------------------------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """Move leadership away from `broker_id` and take it out of every ISR; returns the partitions it
        still leads (no other in-sync replica alive). Kafka's KafkaController.doControlledShutdown."""
        async with self._lock:
            if not self.active:
                raise RuntimeError("not the active controller")
            self._shutting_down.add(broker_id)
            live = {int(b) for b in await self.zk.children(zl.BROKER_IDS)}
            assignment_raw = await self.zk.get(zl.topic_path(self.topic))
            if assignment_raw is None:
                return []
            remaining = []
            for p, replicas in sorted(zl.decode_assignment(assignment_raw[0]).items()):
                if not await self._shutdown_partition(p, replicas, live, broker_id):
                    remaining.append((self.topic, p))
            log.info("controlled_shutdown_handled", broker=broker_id, remaining=len(remaining))
            return remaining

    async def _shutdown_partition(self, p: int, replicas: list[int], live: set[int], broker: int) -> bool:
        for _attempt in range(5):
            got = await self.zk.partition_state(self.topic, p)
            if got is None:
                return True
            current, version = got
            if current.leader == broker:
                new = election.controlled_shutdown_leader(current, replicas, live, self._shutting_down, self.epoch)
                if new is None:
                    return False
                kind = "controlled_shutdown"
            else:
                new = election.without_follower(current, broker, self.epoch)
                if new is None:
                    return True
                kind = "isr_shrink"
            if await self.zk.write_state_as_controller(self.topic, p, new, version, self._epoch_version) is not None:
                if kind == "controlled_shutdown":
                    cluster_metrics.LEADER_ELECTIONS.labels(kind).inc()
                log.info("partition_state_changed", topic=self.topic, partition=p, reason=kind, leader=new.leader,
                         leader_epoch=new.leader_epoch, isr=list(new.isr), previous_leader=current.leader)
                return True
            if not self.active:
                return False
        return False
