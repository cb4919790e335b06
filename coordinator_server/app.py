"""The composition root (`build`: runtime, topics, handlers, listeners, and in a cluster the cluster node,
each constructed whole) and the shell that runs it (`serve`), shutting it down on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
import time
from dataclasses import dataclass
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
from coordinator_server.net.offsets_topic import OffsetsLongPolls, OffsetsTopic
from coordinator_server.net.replica_handlers import ReplicaHandlers
from coordinator_server.net.server import ConnectionLimits, CoordinatorServer, bind_listener
from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.security.listeners import ListenerSpec
from coordinator_server.security_settings import SecuritySettings, build_security
from coordinator_server.storage.group_commit import GroupCommitWriter
from coordinator_server.topics.configs import broker_settings
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.group_image import StoreTopicsImage
from coordinator_server.topics.leadership import SoleLeader
from coordinator_server.topics.store import StoreConfig, TopicStore

if TYPE_CHECKING:
    from coordinator_server.cluster_node import ClusterNode, ClusterSession
    from coordinator_server.purgatory import Timer
    from coordinator_server.replication.local_replicas import CoordinatorElections
    from coordinator_server.replication.replica_manager import ReplicaManager
    from coordinator_server.runtime import CoordinatorRuntime
    from coordinator_server.storage import CoordinatorLog
    from coordinator_server.txn_runtime import TransactionRuntime

log = structlog.get_logger("coordinator_server")

# Busy connections get this long to finish normal requests before the runtime closes and answers
# parked ones; then this long for everything before stuck connections are cancelled.
DRAIN_GRACE_S = 0.5
CLOSE_TIMEOUT_S = 10.0


class StartupError(Exception):
    """The server could not start (port in use, corrupt log, ...). The message is meant for operators."""


@dataclass(frozen=True)
class BoundListener:
    """One listener, its socket bound (not yet listening) and the context its connections get."""

    spec: ListenerSpec
    sock: socket.socket
    context: ListenerContext


@dataclass(frozen=True)
class Node:
    """This server, built whole by `build`: nothing in it is wired after construction. `serve` runs it."""

    config: Config
    security: SecuritySettings
    runtime: CoordinatorRuntime
    store: TopicStore
    writer: GroupCommitWriter  # the topic store's
    handlers: RequestHandlers
    server: CoordinatorServer
    listeners: list[BoundListener]
    metrics: MetricsEndpoint | None
    cluster: ClusterNode | None  # this node as a broker of a ZooKeeper cluster
    transactions: TransactionRuntime | None  # the transaction coordinator: one node only

    async def close_unserved(self) -> None:
        """Close what `build` opened, for a node that was never run (`run` closes its own on every exit)."""
        for listener in self.listeners:
            listener.sock.close()
        await _close_store(self.store, self.writer, None)
        if self.cluster is not None:
            await self.cluster.replicas.close()
        await _close_transactions(self.transactions)
        await self.runtime.close()


async def build(config: Config) -> Node:
    """The composition root: opens the coordinator log and the topic store, binds the listeners' sockets
    and constructs every object with what it needs, in dependency order (nothing is bound after
    construction). Nothing is served yet. A one-node server and a broker of a ZooKeeper cluster differ only
    in what is handed over: leadership, topic admin and the replica handlers come from the cluster node,
    else this node leads every partition. What was opened is closed again, in reverse order, on failure."""
    # Imported here so the rest of the shell can be imported (and unit tested) on its own.
    from coordinator_server.runtime import CoordinatorRuntime, open_coordinator_log, shared_timer

    try:
        security = build_security(config)  # before the data directory is locked: a bad file changes nothing
    except ValueError as e:
        raise StartupError(str(e)) from e
    clustered = config.zookeeper_connect is not None
    try:
        log_ = open_coordinator_log(config)  # first: it takes the data directory's lock
    except Exception as e:
        raise StartupError(f"cannot open the coordinator log in {config.data_dir}: {e}") from e
    try:
        # In a cluster the --topic ones are created cluster-wide once this node has joined (cluster_node.py).
        store = TopicStore.open(store_config(config), log_.partitions, () if clustered else config.topics)
    except Exception as e:
        await log_.close()
        raise StartupError(f"cannot open the topic store in {config.data_dir}: {e}") from e
    # The topic store's own instance of the writer the coordinator log uses (`storage.group_commit`).
    writer = GroupCommitWriter(config.fsync, "topic_store", syncfs=config.fsync_method == "auto")
    # The one timing wheel, before the runtime that drives it: the "Fetch" purgatory is built on it, and
    # with it what wakes the long polls on `__consumer_offsets` when the coordinator appends.
    timer = shared_timer(asyncio.get_running_loop())
    fetch_purgatory: DelayedOperationPurgatory[DelayedFetch] = DelayedOperationPurgatory("Fetch", timer)
    replication: Replication | None = None
    if clustered:
        try:
            # Before the runtime, as Kafka's broker builds its replica manager before the group coordinator:
            # the runtime's appends complete once `__consumer_offsets`'s replica manager has them replicated.
            replication = _replication(config, log_, timer)
        except BaseException:
            await _close_store(store, writer, None)
            await log_.close()
            raise
    try:
        # Consumer groups subscribe to and are assigned from the topic store. In a cluster no partition is
        # loaded at start: each is, once this node becomes its leader.
        runtime = await CoordinatorRuntime.open(config, log_, timer, StoreTopicsImage(store),
                                                OffsetsLongPolls(fetch_purgatory).on_append,
                                                replication.replicas if replication is not None else None,
                                                load_all=not clustered)
    except BaseException as e:
        if replication is not None:
            await replication.replicas.close()
        await _close_store(store, writer, None)
        await log_.close()
        if isinstance(e, Exception):
            raise StartupError(f"cannot open the coordinator log in {config.data_dir}: {e}") from e
        raise
    transactions: TransactionRuntime | None = None
    try:
        if not clustered:
            # After the runtime, whose log holds the data directory's lock. A cluster runs no transaction
            # coordinator (its `__transaction_state` would have to be replicated and led like the offsets').
            transactions = await _open_transactions(config, store, writer, fetch_purgatory, runtime)
        return await _compose(config, security, runtime, store, writer, fetch_purgatory, replication, transactions)
    except BaseException:
        if replication is not None:
            await replication.replicas.close()
        await _close_store(store, writer, None)
        await _close_transactions(transactions)
        await runtime.close()
        raise


async def _open_transactions(config: Config, store: TopicStore, writer: GroupCommitWriter,
                             fetch_purgatory: DelayedOperationPurgatory[DelayedFetch],
                             runtime: CoordinatorRuntime) -> TransactionRuntime:
    from coordinator_server.net.data_plane.txn_markers import TopicTxnMarkers
    from coordinator_server.txn_runtime import TransactionRuntime, open_transaction_log

    try:
        txn_log = open_transaction_log(config)
    except Exception as e:
        raise StartupError(f"cannot open the transaction log in {config.data_dir}: {e}") from e
    try:
        # Producer ids come from the one source idempotent producers' come from: unique in the directory.
        # Markers go to this node's topic partitions, through the writer Produce uses.
        markers = TopicTxnMarkers(store, writer, SoleLeader(), fetch_purgatory, runtime)
        transactions = TransactionRuntime.open(
            config, txn_log, store.next_producer_id, markers=markers,
            partition_exists=lambda topic, index: store.partition(topic, index) is not None)
        transactions.start_sweeps(config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                                  config.transaction_remove_expired_transaction_cleanup_interval_ms)
        return transactions
    except BaseException as e:
        await txn_log.close()
        if isinstance(e, Exception):
            raise StartupError(f"cannot load the transaction log in {config.data_dir}: {e}") from e
        raise


async def _close_transactions(transactions: TransactionRuntime | None) -> None:
    if transactions is not None:
        await transactions.close()


@dataclass(frozen=True)
class Replication:
    """In a cluster, what is built before the runtime: the ZooKeeper session (not yet connected), and
    `__consumer_offsets`'s replica manager with the record of its leadership changes, which the cluster
    node, built after the runtime, hands on to it."""

    session: ClusterSession
    replicas: ReplicaManager
    elections: CoordinatorElections


def _replication(config: Config, log_: CoordinatorLog, timer: Timer) -> Replication:
    # Imported only in a cluster (ZooKeeper's client comes with it).
    from coordinator_server.cluster_node import ClusterSession, offsets_replicas
    from coordinator_server.replication.local_replicas import CoordinatorElections

    session = ClusterSession(config)
    elections = CoordinatorElections()
    return Replication(session, offsets_replicas(config, session, log_, elections, timer), elections)


async def _compose(config: Config, security: SecuritySettings, runtime: CoordinatorRuntime, store: TopicStore,
                   writer: GroupCommitWriter, fetch_purgatory: DelayedOperationPurgatory[DelayedFetch],
                   replication: Replication | None, transactions: TransactionRuntime | None) -> Node:
    # Bound first: the advertised port (the real one for port 0) is what the cluster node registers and
    # the handlers answer in Metadata and FindCoordinator.
    sockets = await _bind_listeners(security)
    try:
        contexts = [_listener_context(config, security, spec, sock) for spec, sock in sockets]
        endpoint = contexts[0].endpoint
        cluster = None
        if replication is not None:
            from coordinator_server.cluster_node import ClusterNode

            cluster = ClusterNode(config, replication.session, replication.replicas, replication.elections, runtime,
                                  store, writer, fetch_purgatory, endpoint.host, endpoint.port)
        data = DataHandlers(store, writer, runtime, config.node_id, fetch_purgatory,
                            OffsetsTopic(runtime.log.partition_log, runtime.log.partitions),
                            cluster.leadership if cluster is not None else SoleLeader(),
                            cluster.admin if cluster is not None else None, broker_settings(config),
                            transactions)
        _settle_heap()
        handlers = RequestHandlers(
            runtime, store, endpoint, config.cluster_id, data, config.auto_create_topics,
            cluster=cluster, replicas=ReplicaHandlers(cluster.managers) if cluster is not None else None,
            controlled_shutdown=cluster.controller.controlled_shutdown if cluster is not None else None,
            transactions_served=transactions is not None)
        server = CoordinatorServer(handlers, config.socket_request_max_bytes,
                                   ConnectionLimits(config.max_connections, config.max_connections_per_ip),
                                   ConnectionRules(config.connections_max_idle_ms, config.max_unsent_response_bytes))
        metrics_endpoint = None
        if config.metrics_port is not None:
            coordinator = runtime.coordinator
            purgatories = (coordinator.heartbeat_purgatory, coordinator.rebalance_purgatory, fetch_purgatory)
            metrics_endpoint = MetricsEndpoint(CoordinatorCollector(runtime.loop, coordinator, store, purgatories))
    except BaseException:
        for _spec, sock in sockets:
            sock.close()
        raise
    return Node(config, security, runtime, store, writer, handlers, server,
                [BoundListener(spec, sock, ctx) for (spec, sock), ctx in zip(sockets, contexts, strict=True)],
                metrics_endpoint, cluster, transactions)


async def serve(config: Config, stop: asyncio.Event | None = None) -> None:
    """Build the node, run it until SIGTERM/SIGINT (or until `stop` is set), then shut down in order."""
    await run(await build(config), stop or asyncio.Event())


async def run(node: Node, stop: asyncio.Event) -> None:
    """Serve a built node until `stop`; every exit closes what it holds, in order."""
    config, runtime, store, writer, server = node.config, node.runtime, node.store, node.writer, node.server
    retention: asyncio.Task[None] | None = None
    joined = False
    serving = 0  # listeners handed to the server (their sockets are its to close from then on)
    try:
        if node.metrics is not None:
            _start_metrics(config, node.metrics)
        for listener in node.listeners:
            try:
                await server.serve(listener.sock, listener.context)
            except OSError as e:
                raise StartupError(f"cannot listen on {listener.spec}: {e.strerror or e}") from e
            serving += 1
            endpoint = listener.context.endpoint
            log.info("listener_bound", listener=listener.spec.name, host=_bound_host(listener.sock),
                     port=endpoint.port, advertised_host=endpoint.host, tls=listener.spec.tls,
                     sasl=listener.spec.sasl, client_auth=listener.context.client_auth)
        if node.cluster is not None:
            await _join_cluster(config, node.cluster)
            joined = True

        loop = asyncio.get_running_loop()
        retention = loop.create_task(_retention_loop(store, config.retention_check_interval_ms), name="retention")
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        first = node.listeners[0]
        log.info("listening", host=_bound_host(first.sock), port=first.context.endpoint.port,
                 advertised_host=first.context.endpoint.host, node_id=config.node_id, data_dir=config.data_dir,
                 listeners={lst.spec.name: lst.context.endpoint.port for lst in node.listeners},
                 acls=node.security.authorizer is not None, compiled=compiled())
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log.info("shutting_down", connections=server.connection_count)
        if node.cluster is not None and config.controlled_shutdown_enable:
            # Leadership moves away while this node still answers: clients follow it to the new leaders.
            await node.cluster.controlled_shutdown()
        server.stop_accepting()
        await server.drain(DRAIN_GRACE_S)
    except BaseException:
        for listener in node.listeners[serving:]:
            listener.sock.close()
        if node.metrics is not None:
            await node.metrics.close()
        if node.cluster is not None and joined:
            await node.cluster.close()
        await _close_store(store, writer, retention)
        await _close_transactions(node.transactions)
        await runtime.close()
        raise
    if node.cluster is not None:
        # Resigns what it still leads (waiting appends fail NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR) and
        # ends the ZooKeeper session, which is how the controller learns this broker is gone.
        await node.cluster.close()
    # Waits for the transaction log's writes in flight, flushes and closes it, before the offsets log
    # (which holds the data directory's lock).
    await _close_transactions(node.transactions)
    # Answers parked requests with NOT_COORDINATOR, then flushes and fsyncs the log.
    await runtime.close()
    await server.close(CLOSE_TIMEOUT_S)
    await _close_store(store, writer, retention)
    if node.metrics is not None:
        await node.metrics.close()
    log.info("stopped")


async def _join_cluster(config: Config, node: ClusterNode) -> None:
    try:
        await node.start()
    except Exception as e:
        await node.close()
        raise StartupError(f"cannot join the cluster at {config.zookeeper_connect}: {e}") from e


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


async def _bind_listeners(security: SecuritySettings) -> list[tuple[ListenerSpec, socket.socket]]:
    bound: list[tuple[ListenerSpec, socket.socket]] = []
    try:
        for spec in security.listeners:
            try:
                bound.append((spec, await bind_listener(spec.host, spec.port)))
            except OSError as e:
                raise StartupError(f"cannot listen on {spec}: {e.strerror or e}") from e
    except BaseException:
        for _spec, sock in bound:
            sock.close()
        raise
    return bound


def _listener_context(config: Config, security: SecuritySettings, spec: ListenerSpec,
                      sock: socket.socket) -> ListenerContext:
    """Each listener advertises its own address to the requests it receives (Kafka returns the endpoint of
    the listener a request came in on): the bound port, also for port 0."""
    endpoint = BrokerEndpoint(config.node_id, _advertised_host(config, spec), int(sock.getsockname()[1]))
    return ListenerContext(spec.name, endpoint, ssl=security.ssl if spec.tls else None,
                           client_auth=spec.tls and security.client_auth,
                           sasl=security.sasl if spec.sasl else None, authorizer=security.authorizer)


def _bound_host(sock: socket.socket) -> str:
    return str(sock.getsockname()[0])


def _start_metrics(config: Config, metrics_endpoint: MetricsEndpoint) -> None:
    # The same interface as the Kafka listener: the default 127.0.0.1 keeps metrics off the network.
    try:
        host, port = metrics_endpoint.start(config.host, config.metrics_port or 0)
    except OSError as e:
        raise StartupError(f"cannot serve metrics on {config.host}:{config.metrics_port}: {e.strerror or e}") from e
    log.info("metrics_listening", host=host, port=port, path="/metrics")


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
