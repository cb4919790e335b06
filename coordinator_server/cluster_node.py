"""This server as one broker of a cluster (docs/cluster.md): its ZooKeeper session, its registration, the
controller role it may win, its view of who leads what, and its replica managers (one per topic).

Theory of operation. Everything a broker knows about topics and leadership comes from ZooKeeper (the
assignments brokers write, the partition states the controller writes) through watches that `ClusterView`
turns into events on the loop, applied in order by one task: a topic that appears gets its partitions in the
topic store and a replica manager; one that goes is dropped; each partition state goes to its topic's
manager (leader: load the groups, for `__consumer_offsets`; follower: unload and fetch). The group runtime
sees only the offsets topic's manager (as its ReplicationGate: appends complete once committed), the data
handlers a `Leadership` and a `ClusterTopicAdmin`, and the request handlers `ClusterMetadata`.

Built in three steps (app.build), so that nothing is bound after construction: the `ClusterSession`
(ZooKeeper client and view, not yet connected) and the offsets replica manager before the runtime, which is
built on that manager; the `ClusterNode` last, on both. The manager therefore never calls the group
coordinator: it records its leadership changes (`CoordinatorElections`), and the cluster node, which hands
it each partition state, hands them on to the runtime once applied. Losing the ZooKeeper session resigns every partition at once; a new
session re-registers and re-reads every state. SIGTERM with controlled shutdown asks the controller to move
this broker's leadership away first (Kafka's ControlledShutdown), so clients move once.
"""
from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from pathlib import Path

import structlog

from coordinator_server import cluster_metrics
from coordinator_server.cluster.controller import ClusterView, Controller, TopicAssignment
from coordinator_server.cluster.partition_state import PartitionState
from coordinator_server.cluster.topic_admin import TopicAdmin, topic_uuid
from coordinator_server.cluster.zk_client import ZkClient
from coordinator_server.cluster.zk_layout import BROKER_TOPICS, BrokerRegistration
from coordinator_server.config import Config
from coordinator_server.net.cluster_metadata import BrokerAddress
from coordinator_server.purgatory import DelayedOperationPurgatory, Timer
from coordinator_server.replication.broker_client import BrokerClient, BrokerUnreachable
from coordinator_server.replication.local_replicas import (
    CoordinatorElections,
    FetchWakeups,
    OffsetsReplicas,
    TopicReplicas,
)
from coordinator_server.replication.replica_manager import LocalReplicas, ReplicaManager, Roles
from coordinator_server.replication.topic_leadership import ReplicatedLeadership
from coordinator_server.runtime import CoordinatorRuntime
from coordinator_server.storage.coordinator_log import CoordinatorLog
from coordinator_server.storage.group_commit import GroupCommitWriter
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.registry import OFFSETS_TOPIC
from coordinator_server.topics.store import TopicStore
from protocol.broker_messages import (
    CONTROLLED_SHUTDOWN_VERSION,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from protocol.errors import Errors, KafkaError

log = structlog.get_logger("coordinator_server.cluster")

# controlled.shutdown.max.retries and controlled.shutdown.retry.backoff.ms (Kafka: 3 and 5000).
CONTROLLED_SHUTDOWN_RETRIES = 3
CONTROLLED_SHUTDOWN_BACKOFF_S = 1.0
# The whole controlled shutdown: past it the node stops anyway (its session's end moves what it still leads).
CONTROLLED_SHUTDOWN_DEADLINE_S = 15.0
CLOSE_STEP_TIMEOUT_S = 5.0


_TopicEvent = tuple[str, TopicAssignment | None]
# The view saw the registered brokers change: followers whose leader's address was unknown may fetch now.
_BROKERS_CHANGED = "brokers changed"
_Event = PartitionState | _TopicEvent | str | None


class ClusterSession:
    """This broker's ZooKeeper client and its view of the cluster, built first: the replica managers write
    ISRs through it (`IsrWriter`) and find their leaders in its view; the cluster node, built last, starts
    it and applies what the view hears (`events`, in order, by one task). Nothing connects until then."""

    def __init__(self, config: Config) -> None:
        assert config.zookeeper_connect is not None
        self.zk = ZkClient(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        self.events: asyncio.Queue[_Event] = asyncio.Queue()
        self.view = ClusterView(self.zk, on_partition_state=self.events.put_nowait,
                                on_topic=lambda name, topic: self.events.put_nowait((name, topic)),
                                on_brokers_changed=lambda: self.events.put_nowait(_BROKERS_CHANGED))

    async def write_isr(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: tuple[int, ...],
                        controller_epoch: int, zk_version: int) -> int | None:
        return await self.zk.update_isr(topic, partition, leader, leader_epoch, list(isr), controller_epoch,
                                        zk_version)

    async def read_state(self, topic: str, partition: int) -> PartitionState | None:
        got = await self.zk.partition_state(topic, partition)
        view = self.view.partition_state(partition, topic)
        if got is None or view is None:
            return None
        state, version = got
        return PartitionState(partition, state.leader, state.leader_epoch, state.isr, view.replicas,
                              state.controller_epoch, version, topic)

    def endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        broker = self.view.broker(node_id)
        return (broker.host, broker.port) if broker is not None else None


def replica_manager(config: Config, session: ClusterSession, topic: str, local: LocalReplicas, roles: Roles,
                    timer: Timer) -> ReplicaManager:
    """One topic's replica manager on this broker, on the node's one timing wheel."""
    return ReplicaManager(config.node_id, topic, local, roles, timer, session, session.endpoint_of,
                          config.min_insync_replicas, config.replica_lag_time_max_ms)


def offsets_replicas(config: Config, session: ClusterSession, log_: CoordinatorLog, elections: CoordinatorElections,
                     timer: Timer) -> ReplicaManager:
    """`__consumer_offsets`'s replica manager: built before the runtime, whose ReplicationGate it is (an
    append completes once replicated); its leadership changes reach the group coordinator through
    `elections`, delivered by the cluster node."""
    return replica_manager(config, session, OFFSETS_TOPIC, OffsetsReplicas(log_), elections, timer)


class ClusterNode:
    """Built last, on the session, the offsets replica manager and the runtime: it joins the cluster,
    applies what the view hears to the replica managers and, for `__consumer_offsets`, hands the
    leadership changes they made on to the runtime (`elections`)."""

    def __init__(self, config: Config, session: ClusterSession, replicas: ReplicaManager,
                 elections: CoordinatorElections, runtime: CoordinatorRuntime, store: TopicStore,
                 writer: GroupCommitWriter, fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], host: str,
                 port: int) -> None:
        self.config = config
        self.session = session
        self.runtime = runtime
        self.store = store
        self.writer = writer
        self.fetch_purgatory = fetch_purgatory
        self.node_id = config.node_id
        self.host = host
        self.port = port
        self.zk = session.zk
        self.view = session.view
        self._events = session.events
        self.controller = Controller(
            self.zk, self.node_id, offsets_topic=OFFSETS_TOPIC, offsets_partitions=runtime.log.partitions,
            offsets_replication_factor=config.offsets_replication_factor,
            unclean_leader_election=config.unclean_leader_election_enable)
        # `__consumer_offsets`'s, the runtime's ReplicationGate; its leadership changes are `_elections`.
        self.replicas = replicas
        self._elections = elections
        # Every topic's replica manager, `__consumer_offsets`'s first; shared with `leadership`.
        self.managers: dict[str, ReplicaManager] = {OFFSETS_TOPIC: self.replicas}
        self.leadership = ReplicatedLeadership(self.managers)
        self.admin = TopicAdmin(self.zk, self.view, self.node_id, config.default_partitions,
                                config.default_replication_factor, self._local_has)
        self._applier: asyncio.Task[None] | None = None
        self._resign: asyncio.Task[None] | None = None
        self._rejoining: asyncio.Task[None] | None = None
        self._initial: asyncio.Task[None] | None = None

    def _replica_manager(self, topic: str, local: LocalReplicas, roles: Roles) -> ReplicaManager:
        return replica_manager(self.config, self.session, topic, local, roles, self.runtime.timer)

    def _local_has(self, topic: str, partitions: int) -> bool:
        local = self.store.get(topic)
        return local is not None and local.partitions >= partitions

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._applier = loop.create_task(self._apply_events(), name="cluster-events")
        self.zk.on_session_event(self._session_event)
        await self.zk.start()
        # Registered before it learns any partition state, as Kafka's broker does: a node that fetches
        # (and so may rejoin an ISR) while the controller cannot see it would be dropped again.
        await self.zk.register_broker(BrokerRegistration(self.node_id, self.host, self.port))
        await self.view.start()
        await self.controller.start()
        log.info("broker_registered", node_id=self.node_id, host=self.host, port=self.port,
                 zookeeper=self.config.zookeeper_connect)
        self._initial = loop.create_task(self._initial_topics(), name="initial-topics")

    async def _initial_topics(self) -> None:
        """Drop local topics the cluster no longer has (deleted while this node was away), and create the
        `--topic` ones the cluster does not have yet (with --default-replication-factor)."""
        try:
            known = set(await self.zk.children(BROKER_TOPICS))
            for topic in self.store.all():
                if not topic.is_internal and topic.name not in known:
                    self._events.put_nowait((topic.name, None))
            for spec in self.config.topics:
                if spec.name not in known:
                    await self._create_initial_topic(spec.name, spec.partitions)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("initial_topics_failed")

    async def _create_initial_topic(self, name: str, partitions: int) -> None:
        """A `--topic`: created by whichever node gets there first; while fewer brokers are registered than
        its replication factor, tried again every second (nodes of a cluster start in any order)."""
        waiting_logged = False
        while True:
            try:
                await self.admin.create_topic(name, partitions, -1, False)
                return
            except KafkaError as e:
                if e.code == Errors.TOPIC_ALREADY_EXISTS:
                    return
                if e.code != Errors.INVALID_REPLICATION_FACTOR:
                    log.warning("initial_topic_failed", topic=name, error=e.code.name, reason=e.message)
                    return
                if not waiting_logged:
                    log.info("initial_topic_waiting_for_brokers", topic=name, reason=e.message)
                    waiting_logged = True
            await asyncio.sleep(1.0)

    def _brokers_changed(self) -> None:
        for manager in list(self.managers.values()):
            manager.brokers_changed()

    async def _apply_events(self) -> None:
        while True:
            event = await self._events.get()
            if event is None:
                return
            try:
                if isinstance(event, PartitionState):
                    manager = self.managers.get(event.topic)
                    if manager is not None:
                        try:
                            await manager.on_partition_state(event)
                        finally:
                            self._elected()
                elif isinstance(event, str):
                    self._brokers_changed()
                else:
                    await self._apply_topic(*event)
            except Exception:
                log.exception("cluster_event_apply_failed", event=repr(event)[:200])

    def _elected(self) -> None:
        """The group coordinator learns what the offsets replica manager just applied: it loads what this
        broker now leads and unloads what it stopped leading."""
        self._elections.deliver(self.runtime)

    async def _apply_topic(self, name: str, topic: TopicAssignment | None) -> None:
        """A topic of the cluster appeared, grew or went: the topic store and the replica managers follow."""
        if name == OFFSETS_TOPIC:
            return  # the coordinator log holds it, at its fixed partition count
        doomed: list[Path] = []
        if topic is None:
            manager = self.managers.pop(name, None)
            if manager is not None:
                await manager.close()
                for gauge in (cluster_metrics.LEADER_PARTITIONS, cluster_metrics.UNDER_REPLICATED):
                    with contextlib.suppress(KeyError):
                        gauge.remove(name)
            if self.store.get(name) is not None:
                parts, doomed = self.store.delete_topic(name)
                for part in parts:
                    self.fetch_purgatory.check_and_complete((name, part.index))
                self.runtime.rearm_timer()
        else:
            doomed = self.store.ensure_topic(name, topic_uuid(topic.topic_id, name), len(topic.replicas))
            if name not in self.managers:
                self.managers[name] = self._replica_manager(name, TopicReplicas(self.store, name, self.writer),
                                                            FetchWakeups(name, self.fetch_purgatory))
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, _remove_dirs, doomed)

    def _session_event(self, event: str) -> None:
        loop = asyncio.get_running_loop()
        if event == "LOST":
            # Our registration is gone and the controller may already have elected others for everything we
            # led: stop acknowledging at once (the replica manager fails waiting appends).
            log.warning("zookeeper_session_lost", node_id=self.node_id)
            self._resign = loop.create_task(self._resign_all("zookeeper session lost"))
        elif event == "SUSPENDED":
            log.warning("zookeeper_connection_suspended", node_id=self.node_id)
        elif event == "RECONNECTED":
            log.info("zookeeper_session_restored", node_id=self.node_id)
            self._rejoining = loop.create_task(self._rejoin())

    async def _rejoin(self) -> None:
        """A new session after a lost one: register again, campaign again, and re-read every state (a
        watch fires only on a change, and nothing we knew before the loss may be trusted)."""
        if self._resign is not None:
            await self._resign
        try:
            await self.zk.register_broker(BrokerRegistration(self.node_id, self.host, self.port))
            self.controller.session_restored()
            for view in await self.view.reread():
                self._events.put_nowait(view)
        except Exception:
            log.exception("cluster_rejoin_failed", node_id=self.node_id)

    async def _resign_all(self, reason: str) -> None:
        try:
            for manager in list(self.managers.values()):
                await manager.resign_all(reason)
        finally:
            self._elected()

    def leading_partitions(self) -> list[tuple[str, int]]:
        """What this broker leads that another replica could take over (a controlled shutdown moves these;
        a partition with one replica stays, as in Kafka)."""
        out = []
        for topic, manager in sorted(self.managers.items()):
            for p in manager.leading_partitions():
                state = self.view.partition_state(p, topic)
                if state is None or len(state.replicas) > 1:
                    out.append((topic, p))
        return out

    # -- ClusterMetadata (the handlers' view) ---------------------------------------------------------

    def brokers(self) -> list[BrokerAddress]:
        return [BrokerAddress(b.node_id, b.host, b.port) for b in self.view.live_brokers()]

    def broker(self, node_id: int) -> BrokerAddress | None:
        b = self.view.broker(node_id)
        return BrokerAddress(b.node_id, b.host, b.port) if b is not None else None

    def controller_id(self) -> int:
        return self.view.controller_id()

    def offsets_partition(self, partition: int) -> PartitionState | None:
        return self.view.partition_state(partition)

    def topic_partition(self, topic: str, partition: int) -> PartitionState | None:
        return self.view.partition_state(partition, topic)

    def has_topic(self, topic: str) -> bool:
        return self.view.topic(topic) is not None

    # -- shutdown ---------------------------------------------------------------------------------------

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move leadership away (Kafka's ControlledShutdown, retried as Kafka does).
        True when this broker leads nothing any more."""
        started = time.monotonic()
        try:
            return await asyncio.wait_for(self._controlled_shutdown(started), CONTROLLED_SHUTDOWN_DEADLINE_S)
        except TimeoutError:
            log.warning("controlled_shutdown_gave_up", leading=self.leading_partitions(),
                        seconds=round(time.monotonic() - started, 3))
            return False

    async def _controlled_shutdown(self, started: float) -> bool:
        for attempt in range(1, CONTROLLED_SHUTDOWN_RETRIES + 1):
            controller = self.controller_id()
            remaining: list[tuple[str, int]] | None = None
            if controller == self.node_id:
                remaining = await self.controller.controlled_shutdown(self.node_id)
            elif controller >= 0 and (endpoint := self.session.endpoint_of(controller)) is not None:
                client = BrokerClient(endpoint[0], endpoint[1], client_id=f"controlled-shutdown-{self.node_id}")
                try:
                    response = await client.call(
                        ControlledShutdownRequest[CONTROLLED_SHUTDOWN_VERSION](broker_id=self.node_id, broker_epoch=-1),
                        ControlledShutdownResponse, timeout_s=15.0)
                    if response.error_code == Errors.NONE:
                        remaining = [(p.topic_name, p.partition_index) for p in response.remaining_partitions]
                    else:
                        log.warning("controlled_shutdown_refused", error=Errors(response.error_code).name)
                except BrokerUnreachable as e:
                    log.warning("controlled_shutdown_failed", controller=controller, error=str(e))
                finally:
                    await client.close()
            if remaining is not None:
                # Wait for the new states to reach us, so groups unload before the listener closes.
                deadline = time.monotonic() + 5.0
                while self.leading_partitions() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                if not remaining and not self.leading_partitions():
                    log.info("controlled_shutdown_done", attempts=attempt,
                             seconds=round(time.monotonic() - started, 3))
                    return True
                log.info("controlled_shutdown_incomplete", remaining=len(remaining), attempt=attempt)
            await asyncio.sleep(CONTROLLED_SHUTDOWN_BACKOFF_S)
        log.warning("controlled_shutdown_gave_up", leading=self.leading_partitions())
        return False

    async def _close_managers(self) -> None:
        try:
            await asyncio.gather(*(manager.close() for manager in list(self.managers.values())))
        finally:
            self._elected()

    async def close(self) -> None:
        """Resign and leave the cluster; each step bounded, so a stuck peer never holds up a shutdown."""
        if self._initial is not None:
            self._initial.cancel()
        for name, step in (("controller", self.controller.close), ("replicas", self._close_managers)):
            try:
                await asyncio.wait_for(step(), CLOSE_STEP_TIMEOUT_S)
            except (TimeoutError, Exception) as e:
                log.warning("cluster_close_step_failed", step=name, error=repr(e))
        self._events.put_nowait(None)
        if self._applier is not None:
            done, _ = await asyncio.wait([self._applier], timeout=CLOSE_STEP_TIMEOUT_S)
            if not done:
                self._applier.cancel()
        await self.view.close()
        try:
            await asyncio.wait_for(self.zk.close(), CLOSE_STEP_TIMEOUT_S)
        except (TimeoutError, Exception) as e:
            log.warning("cluster_close_step_failed", step="zookeeper", error=repr(e))


def _remove_dirs(dirs: list[Path]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
