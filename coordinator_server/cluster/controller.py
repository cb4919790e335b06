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
from dataclasses import dataclass

import structlog

from coordinator_server import cluster_metrics
from coordinator_server.cluster import election
from coordinator_server.cluster import zk_layout as zl
from coordinator_server.cluster.partition_state import PartitionState
from coordinator_server.cluster.zk_client import ZkClient
from coordinator_server.topics.registry import OFFSETS_TOPIC

log = structlog.get_logger("coordinator_server.cluster")



@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic as ZooKeeper has it: its id (Kafka's base64 Uuid string) and each partition's replicas."""

    name: str
    topic_id: str | None
    replicas: dict[int, tuple[int, ...]]


class ClusterView:
    """What this broker knows of the cluster, kept current by watches: live brokers, the controller, every
    topic's assignment and each partition's state. `on_topic` hears a topic appear, grow or go (None), and
    `on_partition_state` every state change, in the order read; a topic is always heard before its states."""

    def __init__(self, zk: ZkClient, on_partition_state: Callable[[PartitionState], None] = lambda state: None,
                 on_topic: Callable[[str, TopicAssignment | None], None] = lambda name, topic: None,
                 on_brokers_changed: Callable[[], None] = lambda: None) -> None:
        self.zk = zk
        self.on_partition_state = on_partition_state
        self.on_topic = on_topic
        self.on_brokers_changed = on_brokers_changed
        self._brokers: dict[int, zl.BrokerRegistration] = {}
        # Each read of the brokers is numbered: a read of an older membership that finishes after a newer
        # one (its ZooKeeper gets were slower) must not put the older list back.
        self._brokers_reads = 0
        self._controller = -1
        self._topics: dict[str, TopicAssignment] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._watched_topics: set[str] = set()
        self._watched: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.zk.ensure_paths()
        # Brokers first: a partition state names its leader by id, and the follower needs its address.
        self._brokers = await self.zk.brokers()
        self.zk.watch_children(zl.BROKER_IDS, self._brokers_changed)
        self.zk.watch_data(zl.CONTROLLER, self._controller_changed)
        self.zk.watch_children(zl.BROKER_TOPICS, self._topics_changed)

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

    def topic(self, name: str) -> TopicAssignment | None:
        return self._topics.get(name)

    def topics(self) -> list[TopicAssignment]:
        return [self._topics[n] for n in sorted(self._topics)]

    def partition_state(self, partition: int, topic: str = OFFSETS_TOPIC) -> PartitionState | None:
        return self._states.get((topic, partition))

    def partition_states(self, topic: str = OFFSETS_TOPIC) -> list[PartitionState]:
        return [self._states[k] for k in sorted(self._states) if k[0] == topic]

    async def reread(self) -> list[PartitionState]:
        """Every partition state as ZooKeeper has it now (after a new session), also kept as the view."""
        self._brokers_reads += 1
        await self._read_brokers([str(b) for b in (await self.zk.brokers())], self._brokers_reads)
        out = []
        for topic, p in sorted(self._watched):
            assignment = self._topics.get(topic)
            got = await self.zk.partition_state(topic, p)
            if got is None or assignment is None:
                continue
            state, version = got
            view = PartitionState(p, state.leader, state.leader_epoch, state.isr, assignment.replicas.get(p, ()),
                                  state.controller_epoch, version, topic)
            self._states[(topic, p)] = view
            out.append(view)
        return out

    # -- watches (on the loop) -------------------------------------------------------------------------

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _brokers_changed(self, children: list[str]) -> None:
        self._brokers_reads += 1
        self._spawn(self._read_brokers(children, self._brokers_reads))

    async def _read_brokers(self, children: list[str], read: int) -> None:
        brokers = {}
        for child in children:
            got = await self.zk.get(zl.broker_path(int(child)))
            if got is not None:
                brokers[int(child)] = zl.BrokerRegistration.decode(int(child), got[0])
        if read != self._brokers_reads:
            return  # a later membership's read applies (or has applied) its own list
        self._brokers = brokers
        self.on_brokers_changed()

    def _controller_changed(self, data: bytes | None, _version: int) -> None:
        self._controller = zl.decode_controller(data) if data else -1

    def _topics_changed(self, children: list[str]) -> None:
        for name in children:
            if name not in self._watched_topics:
                self._watched_topics.add(name)  # the data watch stays, also across a delete and re-create
                self.zk.watch_data(zl.topic_path(name), lambda d, v, name=name: self._assignment_changed(name, d))

    def _assignment_changed(self, name: str, data: bytes | None) -> None:
        if not data:
            if self._topics.pop(name, None) is not None:
                for key in [k for k in self._states if k[0] == name]:
                    del self._states[key]
                self.on_topic(name, None)
            return
        replicas = {p: tuple(r) for p, r in zl.decode_assignment(data).items()}
        topic = TopicAssignment(name, zl.decode_topic_id(data), replicas)
        previous = self._topics.get(name)
        if previous is not None and previous.topic_id != topic.topic_id:
            # Deleted and created again between two reads: the old one is gone first.
            for key in [k for k in self._states if k[0] == name]:
                del self._states[key]
            self.on_topic(name, None)
        self._topics[name] = topic
        self.on_topic(name, topic)
        for p in replicas:
            if (name, p) not in self._watched:
                self._watched.add((name, p))
                self.zk.watch_data(zl.partition_state_path(name, p),
                                   lambda d, v, name=name, p=p: self._state_changed(name, p, d, v))

    def _state_changed(self, topic: str, partition: int, data: bytes | None, version: int) -> None:
        assignment = self._topics.get(topic)
        if not data or assignment is None:
            return
        state = zl.LeaderAndIsr.decode(data)
        view = PartitionState(partition, state.leader, state.leader_epoch, state.isr,
                              assignment.replicas.get(partition, ()), state.controller_epoch, version, topic)
        self._states[(topic, partition)] = view
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
        self._broker_epochs: dict[int, int] = {}  # broker id -> czxid of its registration, as last reconciled
        self._shutting_down: set[int] = set()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._missing_logged: int | None = None
        self._closed = False
        self._watched_topics: set[str] = set()
        self._reconcile_queued = False

    async def start(self) -> None:
        self.zk.watch_data(zl.CONTROLLER, self._controller_changed)
        self.zk.watch_children(zl.BROKER_IDS, self._brokers_changed)
        # Kafka's controller watches topics (new ones, and partitions added to one) and deletion requests.
        self.zk.watch_children(zl.BROKER_TOPICS, self._topics_changed)
        self.zk.watch_children(zl.DELETE_TOPICS, self._deletions_requested)

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
        await self._delete_topics()

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
        self._spawn_reconcile()

    def _topics_changed(self, children: list[str]) -> None:
        for name in children:
            if name not in self._watched_topics:
                self._watched_topics.add(name)
                self.zk.watch_data(zl.topic_path(name), lambda _d, _v: self._spawn_reconcile())
        self._spawn_reconcile()

    def _spawn_reconcile(self) -> None:
        # One queued reconciliation covers every change made before it starts (it reads everything afresh
        # under the lock): a burst of watches (each topic's fires once when set) costs one pass, not one each.
        if self.active and not self._reconcile_queued:
            self._reconcile_queued = True
            self._spawn(self._reconcile())

    def _deletions_requested(self, children: list[str]) -> None:
        if self.active and children:
            self._spawn(self._delete_topics())

    async def _reconcile(self) -> None:
        """Bring every partition state in line with the live brokers: create `__consumer_offsets` when it
        can, bring new partitions (of a new or grown topic) online, elect and shrink where brokers went."""
        async with self._lock:
            self._reconcile_queued = False
            if not self.active:
                return
            live = set(await self.zk.children(zl.BROKER_IDS))
            live_ids = {int(b) for b in live}
            self._live = live_ids
            # KIP-380: a broker whose registration is newer than the one last seen has restarted, even if
            # nobody saw it gone (its old session expired and it registered again between two watches). It
            # is handled as a failure and a return: it leads nothing at its old epoch and leaves the ISRs.
            epochs = await self.zk.broker_epochs()
            bounced = {b for b, e in epochs.items() if self._broker_epochs.get(b, e) != e}
            if bounced:
                log.info("brokers_restarted", brokers=sorted(bounced))
            if await self.zk.get(zl.topic_path(self.topic)) is None:
                await self._maybe_create_topic(live_ids)
            for topic in await self.zk.children(zl.BROKER_TOPICS):
                assignment_raw = await self.zk.get(zl.topic_path(topic))
                if assignment_raw is None:
                    continue
                assignment = zl.decode_assignment(assignment_raw[0])
                await self._new_partitions_online(topic, assignment, live_ids)
                for p, replicas in sorted(assignment.items()):
                    await self._reconcile_partition(p, replicas, live_ids, topic, bounced)
            self._broker_epochs = epochs

    async def _new_partitions_online(self, topic: str, assignment: dict[int, list[int]], live: set[int]) -> None:
        """Kafka's NewPartition -> OnlinePartition: the first live replica leads, the live replicas are the
        ISR, at leader epoch 0. A partition none of whose replicas is alive waits for one."""
        states = {}
        for p, replicas in sorted(assignment.items()):
            if await self.zk.partition_state(topic, p) is not None:
                continue
            alive = [r for r in replicas if r in live]
            if alive:
                states[p] = zl.LeaderAndIsr(alive[0], 0, tuple(alive), self.epoch)
        if states and await self.zk.create_partition_states(topic, states, self._epoch_version):
            for p, state in states.items():
                log.info("partition_state_changed", topic=topic, partition=p, reason="new_partition",
                         leader=state.leader, leader_epoch=0, isr=list(state.isr), previous_leader=-1)

    async def _delete_topics(self) -> None:
        """Carry out /admin/delete_topics: every broker's view sees the topic go and drops its replicas."""
        async with self._lock:
            if not self.active:
                return
            for topic in await self.zk.children(zl.DELETE_TOPICS):
                if topic == self.topic:
                    continue  # brokers refuse to ask; never delete the coordinator's own topic
                if await self.zk.delete_topic(topic, self._epoch_version):
                    log.info("topic_deletion_done", topic=topic)

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

    async def _reconcile_partition(self, p: int, replicas: list[int], live: set[int], topic: str,
                                   bounced: frozenset[int] | set[int] = frozenset()) -> None:
        for _attempt in range(5):
            got = await self.zk.partition_state(topic, p)
            if got is None:
                return
            current, version = got
            # Liveness as of now, not as of the watch that started this: a broker that re-registered
            # meanwhile (a quick restart) may already be back in the ISR, and must not be dropped again.
            live = {int(b) for b in await self.zk.children(zl.BROKER_IDS)}
            new: zl.LeaderAndIsr | None = None
            kind = ""
            if current.leader in bounced and current.leader in live:
                candidate, _ = election.offline_leader(current, replicas, live - self._shutting_down - bounced,
                                                       False, self.epoch)
                if candidate.leader == zl.NO_LEADER:
                    # It was the only in-sync replica: it leads again, at a new epoch.
                    candidate = zl.LeaderAndIsr(current.leader, current.leader_epoch + 1, current.isr, self.epoch)
                new, kind = candidate, "restarted_leader"
            elif current.leader not in live or current.leader in self._shutting_down:
                candidate, unclean = election.offline_leader(current, replicas, live - self._shutting_down,
                                                             self.unclean, self.epoch)
                if candidate.leader == zl.NO_LEADER and current.leader == zl.NO_LEADER:
                    return  # still nobody to elect: leave the epoch alone
                new, kind = candidate, "unclean" if unclean else "offline"
            else:
                for broker in current.isr:
                    if broker not in live or broker in bounced:
                        new = election.without_follower(new or current, broker, self.epoch) or new
                kind = "isr_shrink"
            if new is None or new == current:
                return
            written = await self.zk.write_state_as_controller(topic, p, new, version, self._epoch_version)
            if written is not None:
                if kind != "isr_shrink":
                    cluster_metrics.LEADER_ELECTIONS.labels(kind).inc()
                log.info("partition_state_changed", topic=topic, partition=p, reason=kind,
                         leader=new.leader, leader_epoch=new.leader_epoch, isr=list(new.isr),
                         previous_leader=current.leader)
                return
            if not self.active:
                return
        log.warning("partition_state_write_gave_up", topic=topic, partition=p)

    # -- controlled shutdown ------------------------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """Move leadership away from `broker_id` and take it out of every ISR; returns the partitions it
        still leads (no other in-sync replica alive). Kafka's KafkaController.doControlledShutdown."""
        async with self._lock:
            if not self.active:
                raise RuntimeError("not the active controller")
            self._shutting_down.add(broker_id)
            live = {int(b) for b in await self.zk.children(zl.BROKER_IDS)}
            remaining = []
            for topic in await self.zk.children(zl.BROKER_TOPICS):
                assignment_raw = await self.zk.get(zl.topic_path(topic))
                if assignment_raw is None:
                    continue
                for p, replicas in sorted(zl.decode_assignment(assignment_raw[0]).items()):
                    # As Kafka: a partition with one replica stays where it is (it goes offline with its broker).
                    if broker_id in replicas and len(replicas) > 1 and not await self._shutdown_partition(
                            topic, p, replicas, live, broker_id):
                        remaining.append((topic, p))
            log.info("controlled_shutdown_handled", broker=broker_id, remaining=len(remaining))
            return remaining

    async def _shutdown_partition(self, topic: str, p: int, replicas: list[int], live: set[int],
                                  broker: int) -> bool:
        for _attempt in range(5):
            got = await self.zk.partition_state(topic, p)
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
            if await self.zk.write_state_as_controller(topic, p, new, version, self._epoch_version) is not None:
                if kind == "controlled_shutdown":
                    cluster_metrics.LEADER_ELECTIONS.labels(kind).inc()
                log.info("partition_state_changed", topic=topic, partition=p, reason=kind, leader=new.leader,
                         leader_epoch=new.leader_epoch, isr=list(new.isr), previous_leader=current.leader)
                return True
            if not self.active:
                return False
        return False
