"""Wires the server together: runtime, topics, handlers, listener; and shuts it down on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from coordinator_server.build_info import compiled
from coordinator_server.config import Config
from coordinator_server.metrics import CoordinatorCollector, MetricsEndpoint
from coordinator_server.net.connection_policy import ConnectionRules
from coordinator_server.net.data_handlers import DataHandlers
from coordinator_server.net.handlers import BrokerEndpoint, RequestHandlers
from coordinator_server.net.listener import ListenerContext
from coordinator_server.net.offsets_topic import OffsetsTopic
from coordinator_server.net.replica_handlers import ReplicaHandlers
from coordinator_server.net.server import ConnectionLimits, CoordinatorServer
from coordinator_server.security.listeners import ListenerSpec
from coordinator_server.security_settings import SecuritySettings, build_security
from coordinator_server.storage.group_commit import GroupCommitWriter
from coordinator_server.topics.group_image import StoreTopicsImage
from coordinator_server.topics.store import StoreConfig, TopicStore

if TYPE_CHECKING:
    from coordinator_server.cluster_node import ClusterNode
    from coordinator_server.runtime import CoordinatorRuntime

log = structlog.get_logger("coordinator_server")

# Busy connections get this long to finish normal requests before the runtime closes and answers
# parked ones; then this long for everything before stuck connections are cancelled.
DRAIN_GRACE_S = 0.5
CLOSE_TIMEOUT_S = 10.0


class StartupError(Exception):
    """The server could not start (port in use, corrupt log, ...). The message is meant for operators."""


async def serve(config: Config, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or until `stop` is set), then shut down in order and return."""
    # Imported here so the rest of the shell can be imported (and unit tested) on its own.
    from coordinator_server.runtime import CoordinatorRuntime

    stop = stop or asyncio.Event()
    try:
        security = build_security(config)  # before the data directory is locked: a bad file changes nothing
    except ValueError as e:
        raise StartupError(str(e)) from e
    clustered = config.zookeeper_connect is not None
    try:
        # In a cluster no partition is loaded at start: each is, once this node becomes its leader.
        runtime = await CoordinatorRuntime.open(config, load_all=not clustered)
    except Exception as e:
        raise StartupError(f"cannot open the coordinator log in {config.data_dir}: {e}") from e

    try:
        # Opened after the runtime, whose coordinator log holds the data directory's lock. In a cluster the
        # --topic ones are created cluster-wide once this node has joined (cluster_node.py).
        store = TopicStore.open(store_config(config), runtime.log.partitions, () if clustered else config.topics)
    except Exception as e:
        await runtime.close()
        raise StartupError(f"cannot open the topic store in {config.data_dir}: {e}") from e
    runtime.attach_topics(StoreTopicsImage(store))
    _settle_heap()
    # The topic store's own instance of the writer the coordinator log uses (`storage.group_commit`).
    writer = GroupCommitWriter(config.fsync, "topic_store", syncfs=config.fsync_method == "auto")
    retention: asyncio.Task[None] | None = None
    metrics_endpoint: MetricsEndpoint | None = None
    node: ClusterNode | None = None

    try:
        first = security.listeners[0]
        endpoint = BrokerEndpoint(node_id=config.node_id, host=_advertised_host(config, first), port=first.port)
        data = DataHandlers(store, writer, runtime, config.node_id)
        data.offsets_topic = OffsetsTopic(runtime.log.partition_log, runtime.log.partitions)
        runtime.log.append_listener = data.on_offsets_append
        if config.metrics_port is not None:
            metrics_endpoint = _start_metrics(config, runtime, store, data)
        handlers = RequestHandlers(runtime, store, endpoint, config.cluster_id, data, config.auto_create_topics)
        server = CoordinatorServer(handlers, config.socket_request_max_bytes,
                                   ConnectionLimits(config.max_connections, config.max_connections_per_ip),
                                   ConnectionRules(config.connections_max_idle_ms, config.max_unsent_response_bytes))
        bound = await _start_listeners(server, config, security, endpoint)
        host, port = bound[0][1], bound[0][2]
        if clustered:
            node = await _join_cluster(config, runtime, handlers, data, store, writer, endpoint)

        loop = asyncio.get_running_loop()
        retention = loop.create_task(_retention_loop(store, config.retention_check_interval_ms), name="retention")
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("listening", host=host, port=port, advertised_host=endpoint.host, node_id=config.node_id,
                 data_dir=config.data_dir, listeners={name: p for name, _h, p in bound},
                 acls=security.authorizer is not None, compiled=compiled())
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log.info("shutting_down", connections=server.connection_count)
        if node is not None and config.controlled_shutdown_enable:
            # Leadership moves away while this node still answers: clients follow it to the new leaders.
            await node.controlled_shutdown()
        server.stop_accepting()
        await server.drain(DRAIN_GRACE_S)
    except BaseException:
        if metrics_endpoint is not None:
            await metrics_endpoint.close()
        if node is not None:
            await node.close()
        await _close_store(store, writer, retention)
        await runtime.close()
        raise
    if node is not None:
        # Resigns what it still leads (waiting appends fail NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR) and
        # ends the ZooKeeper session, which is how the controller learns this broker is gone.
        await node.close()
    # Answers parked requests with NOT_COORDINATOR, then flushes and fsyncs the log.
    await runtime.close()
    await server.close(CLOSE_TIMEOUT_S)
    await _close_store(store, writer, retention)
    if metrics_endpoint is not None:
        await metrics_endpoint.close()
    log.info("stopped")


async def _join_cluster(config: Config, runtime: CoordinatorRuntime, handlers: RequestHandlers, data: DataHandlers,
                        store: TopicStore, writer: GroupCommitWriter, endpoint: BrokerEndpoint) -> ClusterNode:
    from coordinator_server.cluster_node import ClusterNode

    node = ClusterNode(config, runtime, store, writer, data.fetch_purgatory, endpoint.host, endpoint.port)
    handlers.cluster = node
    handlers.replicas = ReplicaHandlers(node.managers)
    data.leadership = node.leadership
    data.admin = node.admin
    handlers.controlled_shutdown = node.controller.controlled_shutdown
    try:
        await node.start()
    except Exception as e:
        await node.close()
        raise StartupError(f"cannot join the cluster at {config.zookeeper_connect}: {e}") from e
    return node


# The young generation is collected every 50,000 net container allocations (CPython's default: 700). A
# rebalance parks ~25 objects per member until it completes; each young collection scans whatever survived,
# so at 5,000 members a threshold of 10,000 spent ~12% of the rebalance's CPU rescanning parked members, and
# 50,000 about half that (benchmarks/findings.md, session 9).
GC_THRESHOLDS = (50_000, 20, 10)


def _settle_heap() -> None:
    """What start-up loaded (groups, members, offsets, topic indexes) lives as long as the process: take it
    out of the cyclic collector's view (gc.freeze), so full collections scan only what came later, and
    collect the youngest generation less often (GC_THRESHOLDS). Measured by the rebalance benchmark: the
    server's CPU in a 5,000-member rebalance fell by 17% (full collections over a big heap grew faster than
    linearly); see docs/decisions.md. Objects frozen here are still freed by reference counting when dropped; only cyclic
    garbage made during the load would stay, and the load makes next to none (the young generations are
    collected first, cheaply; a full collection here would cost seconds at a million members)."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _start_listeners(server: CoordinatorServer, config: Config, security: SecuritySettings,
                           first_endpoint: BrokerEndpoint) -> list[tuple[str, str, int]]:
    """Bind every listener; each advertises its own address to the requests it receives (Kafka returns
    the endpoint of the listener a request came in on). Returns (name, host, port) per listener."""
    bound = []
    for i, spec in enumerate(security.listeners):
        endpoint = first_endpoint if i == 0 else BrokerEndpoint(config.node_id, _advertised_host(config, spec),
                                                                spec.port)
        ctx = ListenerContext(spec.name, endpoint, ssl=security.ssl if spec.tls else None,
                              client_auth=spec.tls and security.client_auth,
                              sasl=security.sasl if spec.sasl else None, authorizer=security.authorizer)
        try:
            host, port = await server.start(spec.host, spec.port, ctx)
        except OSError as e:
            raise StartupError(f"cannot listen on {spec}: {e.strerror or e}") from e
        endpoint.port = port  # what Metadata and FindCoordinator advertise, also for port 0
        log.info("listener_bound", listener=spec.name, host=host, port=port, advertised_host=endpoint.host,
                 tls=spec.tls, sasl=spec.sasl, client_auth=ctx.client_auth)
        bound.append((spec.name, host, port))
    return bound


def _start_metrics(config: Config, runtime: CoordinatorRuntime, store: TopicStore,
                   data: DataHandlers) -> MetricsEndpoint:
    coordinator = runtime.coordinator
    purgatories = (coordinator.heartbeat_purgatory, coordinator.rebalance_purgatory, data.fetch_purgatory)
    metrics_endpoint = MetricsEndpoint(CoordinatorCollector(runtime.loop, coordinator, store, purgatories))
    # The same interface as the Kafka listener: the default 127.0.0.1 keeps metrics off the network.
    try:
        host, port = metrics_endpoint.start(config.host, config.metrics_port or 0)
    except OSError as e:
        raise StartupError(f"cannot serve metrics on {config.host}:{config.metrics_port}: {e.strerror or e}") from e
    log.info("metrics_listening", host=host, port=port, path="/metrics")
    return metrics_endpoint


def store_config(config: Config) -> StoreConfig:
    return StoreConfig(
        data_dir=Path(config.data_dir),
        default_partitions=config.default_partitions,
        segment_bytes=config.segment_bytes,
        retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes,
        max_message_bytes=config.max_message_bytes,
    )


async def _retention_loop(store: TopicStore, interval_ms: int) -> None:
    """Kafka's log retention check: off the request path, every log.retention.check.interval.ms."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            store.apply_retention(int(time.time() * 1000))
        except OSError as e:
            log.error("retention_failed", error=str(e))


async def _close_store(store: TopicStore, writer: GroupCommitWriter, retention: asyncio.Task[None] | None) -> None:
    if retention is not None:
        retention.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await retention
    try:
        # A partition whose last fsync fails was logged by the writer; the store closes all the same.
        await writer.close([p.target for p in store.partitions()])
    finally:
        store.close()


def _advertised_host(config: Config, listener: ListenerSpec) -> str:
    """Clients cannot connect to a wildcard address: like Kafka with an empty listener host, advertise
    this machine's canonical name unless --advertised-host says otherwise (for every listener)."""
    host = config.advertised_host or listener.host
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host
