"""This server as one broker of a cluster (docs/cluster.md): its ZooKeeper session, its registration, the
controller role it may win, its view of who leads what, and its replica manager.

Theory of operation. Everything a broker knows about leadership comes from ZooKeeper (the partition states
the controller writes) through watches that `ClusterView` turns into events on the loop; the replica
manager applies each partition state in order (leader: load the groups; follower: unload and fetch). The
group runtime sees only the replica manager (as its ReplicationGate: appends complete once committed) and
the handlers only `ClusterMetadata`. Losing the ZooKeeper session resigns every partition at once; a new
session re-registers and re-reads every state. SIGTERM with controlled shutdown asks the controller to move
this broker's leadership away first (Kafka's ControlledShutdown), so clients move once.
"""
from __future__ import annotations

import asyncio
import time

import structlog

from coordinator_server.cluster.controller import ClusterView, Controller
from coordinator_server.cluster.partition_state import PartitionState
from coordinator_server.cluster.zk_client import ZkClient
from coordinator_server.cluster.zk_layout import BrokerRegistration
from coordinator_server.config import Config
from coordinator_server.net.cluster_metadata import BrokerAddress
from coordinator_server.replication.broker_client import BrokerClient, BrokerUnreachable
from coordinator_server.replication.replica_manager import OFFSETS_TOPIC, ReplicaManager
from coordinator_server.runtime import CoordinatorRuntime
from protocol.broker_messages import (
    CONTROLLED_SHUTDOWN_VERSION,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from protocol.errors import Errors

log = structlog.get_logger("coordinator_server.cluster")

# controlled.shutdown.max.retries and controlled.shutdown.retry.backoff.ms (Kafka: 3 and 5000).
CONTROLLED_SHUTDOWN_RETRIES = 3
CONTROLLED_SHUTDOWN_BACKOFF_S = 1.0
# The whole controlled shutdown: past it the node stops anyway (its session's end moves what it still leads).
CONTROLLED_SHUTDOWN_DEADLINE_S = 15.0
CLOSE_STEP_TIMEOUT_S = 5.0


class ClusterNode:
    def __init__(self, config: Config, runtime: CoordinatorRuntime, host: str, port: int) -> None:
        assert config.zookeeper_connect is not None
        self.config = config
        self.runtime = runtime
        self.node_id = config.node_id
        self.host = host
        self.port = port
        self.zk = ZkClient(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        self.view = ClusterView(self.zk, OFFSETS_TOPIC)
        self.controller = Controller(
            self.zk, self.node_id, offsets_topic=OFFSETS_TOPIC, offsets_partitions=runtime.log.partitions,
            offsets_replication_factor=config.offsets_replication_factor,
            unclean_leader_election=config.unclean_leader_election_enable)
        self.replicas = ReplicaManager(
            self.node_id, runtime.log, runtime, self, self._endpoint_of, config.min_insync_replicas,
            config.replica_lag_time_max_ms)
        runtime.replication = self.replicas
        self._states: asyncio.Queue[PartitionState | None] = asyncio.Queue()
        self._applier: asyncio.Task[None] | None = None
        self._resign: asyncio.Task[None] | None = None
        self._rejoining: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._applier = loop.create_task(self._apply_states(), name="partition-states")
        self.view.on_partition_state = self._partition_state
        self.view.on_brokers_changed = self.replicas.brokers_changed
        self.zk.on_session_event(self._session_event)
        await self.zk.start()
        # Registered before it learns any partition state, as Kafka's broker does: a node that fetches
        # (and so may rejoin an ISR) while the controller cannot see it would be dropped again.
        await self.zk.register_broker(BrokerRegistration(self.node_id, self.host, self.port))
        await self.view.start()
        await self.controller.start()
        log.info("broker_registered", node_id=self.node_id, host=self.host, port=self.port,
                 zookeeper=self.config.zookeeper_connect)

    def _partition_state(self, state: PartitionState) -> None:
        self._states.put_nowait(state)

    async def _apply_states(self) -> None:
        while True:
            state = await self._states.get()
            if state is None:
                return
            try:
                await self.replicas.on_partition_state(state)
            except Exception:
                log.exception("partition_state_apply_failed", partition=state.partition)

    def _session_event(self, event: str) -> None:
        loop = asyncio.get_running_loop()
        if event == "LOST":
            # Our registration is gone and the controller may already have elected others for everything we
            # led: stop acknowledging at once (the replica manager fails waiting appends).
            log.warning("zookeeper_session_lost", node_id=self.node_id)
            self._resign = loop.create_task(self.replicas.resign_all("zookeeper session lost"))
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
                self._partition_state(view)
        except Exception:
            log.exception("cluster_rejoin_failed", node_id=self.node_id)

    # -- runtime's replication gate asks these through the replica manager; the ISR writer is ours -----

    async def write_isr(self, partition: int, leader: int, leader_epoch: int, isr: tuple[int, ...],
                        controller_epoch: int, zk_version: int) -> int | None:
        return await self.zk.update_isr(OFFSETS_TOPIC, partition, leader, leader_epoch, list(isr),
                                        controller_epoch, zk_version)

    async def read_state(self, partition: int) -> PartitionState | None:
        got = await self.zk.partition_state(OFFSETS_TOPIC, partition)
        view = self.view.partition_state(partition)
        if got is None or view is None:
            return None
        state, version = got
        return PartitionState(partition, state.leader, state.leader_epoch, state.isr, view.replicas,
                              state.controller_epoch, version)

    def _endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        broker = self.broker(node_id)
        return (broker.host, broker.port) if broker is not None else None

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

    # -- shutdown ---------------------------------------------------------------------------------------

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move leadership away (Kafka's ControlledShutdown, retried as Kafka does).
        True when this broker leads nothing any more."""
        started = time.monotonic()
        try:
            return await asyncio.wait_for(self._controlled_shutdown(started), CONTROLLED_SHUTDOWN_DEADLINE_S)
        except TimeoutError:
            log.warning("controlled_shutdown_gave_up", leading=self.replicas.leading_partitions(),
                        seconds=round(time.monotonic() - started, 3))
            return False

    async def _controlled_shutdown(self, started: float) -> bool:
        for attempt in range(1, CONTROLLED_SHUTDOWN_RETRIES + 1):
            controller = self.controller_id()
            remaining: list[tuple[str, int]] | None = None
            if controller == self.node_id:
                remaining = await self.controller.controlled_shutdown(self.node_id)
            elif controller >= 0 and (endpoint := self._endpoint_of(controller)) is not None:
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
                while self.replicas.leading_partitions() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                if not remaining and not self.replicas.leading_partitions():
                    log.info("controlled_shutdown_done", attempts=attempt,
                             seconds=round(time.monotonic() - started, 3))
                    return True
                log.info("controlled_shutdown_incomplete", remaining=len(remaining), attempt=attempt)
            await asyncio.sleep(CONTROLLED_SHUTDOWN_BACKOFF_S)
        log.warning("controlled_shutdown_gave_up", leading=self.replicas.leading_partitions())
        return False

    async def close(self) -> None:
        """Resign and leave the cluster; each step bounded, so a stuck peer never holds up a shutdown."""
        for name, step in (("controller", self.controller.close), ("replicas", self.replicas.close)):
            try:
                await asyncio.wait_for(step(), CLOSE_STEP_TIMEOUT_S)
            except (TimeoutError, Exception) as e:
                log.warning("cluster_close_step_failed", step=name, error=repr(e))
        self._states.put_nowait(None)
        if self._applier is not None:
            done, _ = await asyncio.wait([self._applier], timeout=CLOSE_STEP_TIMEOUT_S)
            if not done:
                self._applier.cancel()
        await self.view.close()
        try:
            await asyncio.wait_for(self.zk.close(), CLOSE_STEP_TIMEOUT_S)
        except (TimeoutError, Exception) as e:
            log.warning("cluster_close_step_failed", step="zookeeper", error=repr(e))
