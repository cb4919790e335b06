"""Prometheus metrics: every metric object, the core's event observer, the scrape-time collector and
the `/metrics` endpoint (docs/metrics.md lists them all).

Theory of operation. Counters and histograms are module-level objects in one registry of our own
(`REGISTRY`, not prometheus-client's global one, so nothing else leaks into our endpoint). The shell
updates them inline, on the event loop: prometheus-client's metrics are thread-safe and an update costs
about a microsecond. The per-request and per-append ones (request count and latency, bytes in and out,
the log-append latency) are tallied with plain additions instead, the latencies by compiled code
(`loop_tally.py`, read here by `RequestTally` and `LoopHistogram`; `LoopCounter`): they are paid on every
request. The group core never imports this module; it calls a `GroupEvents` observer that
`GroupMetrics` implements here, passing the monotonic `now_ms` it already has, so durations need no
clock read in the core.

Everything that is *state* rather than an event (groups by state, members, purgatory sizes, consumer lag)
is computed at scrape time by `CoordinatorCollector`. The endpoint is prometheus-client's threaded HTTP
server, so a scrape runs on another thread; it must not iterate the loop's dicts while the loop mutates
them. It therefore asks the loop for one snapshot (`call_soon_threadsafe`) and waits for it: the loop
spends one bounded callback per scrape (at most `MAX_LAG_SERIES` lag entries), never per request.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections import Counter as _Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from coordinator_server.group.consumer.group import ConsumerGroup, ConsumerGroupState
from coordinator_server.group.consumer.manager import FENCE_KINDS, ConsumerGroupEvents
from coordinator_server.group.group import GroupMetadata
from coordinator_server.group.rebalance import GroupEvents
from coordinator_server.group.state import GroupState
from coordinator_server.loop_tally import LatencyTally, LoopCount, RequestTallies
from protocol.errors import Errors
from protocol.framing import EncodedResponse

log = structlog.get_logger("coordinator_server.metrics")

# No `*_created` series: one per labelled child doubles the output and nothing here reads them.
disable_created_metrics()
REGISTRY = CollectorRegistry(auto_describe=False)

# Lag series (group, topic, partition) are capped so a server with many groups cannot blow up a scrape
# or Prometheus' memory; beyond this the per-partition series are dropped (per-group totals stay).
MAX_LAG_SERIES = 10_000
# How long a scrape waits for the loop's snapshot; a loop stalled that long has bigger problems.
SNAPSHOT_TIMEOUT_S = 5.0

# Request latency covers the whole time a request is in the server, parked JoinGroups and long-poll
# Fetches included, hence buckets up to minutes.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 300.0)
_DISK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# -- requests and connections (net/connection.py, net/server.py) ---------------------------------------

class RequestTally(Collector):
    """Request counts and latencies by API and version, from the loop's `RequestTallies` (loop_tally.py).

    Why not a prometheus-client Counter and Histogram: every request paid for a lock per counter, a lock per
    histogram bucket and sum, and a label lookup — about 2 µs, a tenth of a heartbeat's whole cost in the
    benchmark profile.
    """

    def __init__(self, tallies: RequestTallies, registry: CollectorRegistry) -> None:
        self._tallies = tallies
        registry.register(self)

    def describe(self) -> list[Metric]:
        return list(self._families({}))

    def collect(self) -> list[Metric]:
        return list(self._families(self._tallies.read()))

    def _families(self, tallies: dict[tuple[str, int], tuple[float, list[int]]]) -> Iterator[Metric]:
        requests = CounterMetricFamily("coordinator_requests",
                                       "Requests answered (or dropped with acks=0), by API and version",
                                       labels=["api", "version"])
        latency = HistogramMetricFamily("coordinator_request_latency_seconds",
                                        "Time from a request's frame being read to its response being encoded",
                                        labels=["api", "version"])
        for (api, version), (total, buckets) in sorted(tallies.items()):
            labels = [api, str(version)]
            requests.add_metric(labels, sum(buckets))
            latency.add_metric(labels, _le_buckets(self._tallies.bounds, buckets), sum_value=total)
        yield requests
        yield latency


class LoopHistogram(Collector):
    """An unlabelled histogram the loop fills through `tally` (a compiled LatencyTally), read at scrape time."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.tally = LatencyTally(buckets)
        registry.register(self)

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=[])]

    def collect(self) -> list[Metric]:
        total, buckets = self.tally.read()
        family = HistogramMetricFamily(self.name, self.documentation, labels=[])
        family.add_metric([], _le_buckets(self.tally.bounds, buckets), sum_value=total)
        return [family]


def _le_buckets(bounds: tuple[float, ...], buckets: list[int]) -> list[tuple[str, int]]:
    """A LatencyTally's per-bucket counts as Prometheus' cumulative `le` samples (+Inf last: the count)."""
    return list(zip([*map(floatToGoString, bounds), "+Inf"], itertools.accumulate(buckets), strict=True))


class LoopCounter(Collector):
    """An unlabelled counter bumped on the event loop with `count.value += n` (no lock; a compiled
    `LoopCount`), read at scrape time."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.count = LoopCount()
        registry.register(self)

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.documentation)]

    def collect(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, value=self.count.value)]


REQUESTS = RequestTallies(_LATENCY_BUCKETS, lambda api, code: _count_error(api, code))
REQUEST_TALLY = RequestTally(REQUESTS, REGISTRY)
ERRORS = Counter("coordinator_response_errors",
                 "Non-zero error codes in responses: the top-level error_code and those of nested "
                 "entries (topics, partitions, groups, members, coordinators)",
                 ["api", "error"], registry=REGISTRY)
BYTES_IN = LoopCounter("coordinator_network_received_bytes", "Request bytes read, size prefixes included",
                       registry=REGISTRY)
BYTES_OUT = LoopCounter("coordinator_network_sent_bytes", "Response bytes written, size prefixes included",
                        registry=REGISTRY)
CONNECTIONS = Gauge("coordinator_connections", "Open client connections", registry=REGISTRY)
CONNECTIONS_OPENED = Counter("coordinator_connections_opened", "Client connections accepted", registry=REGISTRY)
CONNECTION_CLOSE_REASONS = ("idle", "partial_frame", "unsent_responses")
CONNECTIONS_TIMED_OUT = Counter("coordinator_connections_timed_out",
                                "Connections closed by connections.max.idle.ms, by what they were doing",
                                ["reason"], registry=REGISTRY)
READS_PAUSED = Counter("coordinator_connection_reads_paused",
                       "Times a connection stopped being read because its unsent responses passed the bound",
                       registry=REGISTRY)

# -- SASL (net/sasl_gate.py, security/auth_throttle.py) ----------------------------------------------

AUTH_FAILURES = Counter("coordinator_sasl_authentication_failures", "Failed SASL authentications",
                        registry=REGISTRY)
AUTH_FAILURE_DELAY = Counter("coordinator_sasl_authentication_failure_delay_seconds",
                             "Time failed authentications were held before their answer", registry=REGISTRY)
AUTH_THROTTLE_KEYS = Gauge("coordinator_sasl_throttle_keys",
                           "(address, user) keys the failed-authentication throttle tracks", registry=REGISTRY)
AUTH_THROTTLE_EVICTIONS = Counter("coordinator_sasl_throttle_evictions",
                                  "Keys the throttle forgot because it tracked its maximum", registry=REGISTRY)

# -- the group core (through GroupMetrics) -------------------------------------------------------------

REBALANCE_REASONS = ("join", "leave", "session_expiry", "new_member_timeout", "pending_sync_timeout",
                     "static_replacement", "group_max_size", "storage_error")
REMOVAL_REASONS = ("leave", "session_expiry", "new_member_timeout", "rebalance_timeout", "pending_sync_timeout",
                   "group_max_size")
REBALANCES = Counter("coordinator_rebalances", "Rebalances started (a group entering PreparingRebalance)",
                     ["reason"], registry=REGISTRY)
REBALANCE_DURATION = Histogram("coordinator_rebalance_duration_seconds",
                               "From a group entering PreparingRebalance to it becoming Stable",
                               buckets=_REBALANCE_BUCKETS, registry=REGISTRY)
MEMBERS_REMOVED = Counter("coordinator_members_removed", "Members removed from their group", ["reason"],
                          registry=REGISTRY)
# KIP-848 consumer groups (through ConsumerGroupMetrics): their rebalances are group epoch bumps.
CONSUMER_EPOCH_BUMPS = Counter("coordinator_consumer_group_epoch_bumps",
                               "Group epoch bumps of consumer-protocol (KIP-848) groups: each starts a rebalance",
                               registry=REGISTRY)
CONSUMER_MEMBERS_FENCED = Counter("coordinator_consumer_members_fenced",
                                  "Members removed from consumer-protocol (KIP-848) groups", ["reason"],
                                  registry=REGISTRY)
for _reason in FENCE_KINDS:
    CONSUMER_MEMBERS_FENCED.labels(_reason)
PENDING_MEMBERS_EVICTED = Counter("coordinator_pending_members_evicted",
                                  "KIP-394 pending members forgotten because their group held "
                                  "--group-max-pending-members", registry=REGISTRY)
for _reason in REBALANCE_REASONS:  # present at 0 from the first scrape, so rate() and the dashboard work
    REBALANCES.labels(_reason)
for _reason in REMOVAL_REASONS:
    MEMBERS_REMOVED.labels(_reason)
for _reason in CONNECTION_CLOSE_REASONS:
    CONNECTIONS_TIMED_OUT.labels(_reason)

# -- storage (storage/group_commit.py: the coordinator log and the topic store) ---------------------

LOG_APPEND_LATENCY = LoopHistogram("coordinator_log_append_seconds",
                                   "One batch written to a __consumer_offsets segment (the write, not the fsync)",
                                   _DISK_BUCKETS, REGISTRY)
LOG_FSYNC_LATENCY = Histogram("coordinator_log_fsync_seconds", "One partition fsync (or the syncfs covering it)", ["log"],
                              buckets=_DISK_BUCKETS, registry=REGISTRY)
LOG_FSYNC_COORDINATOR = LOG_FSYNC_LATENCY.labels("coordinator")  # the __consumer_offsets partitions
LOG_FSYNC_TOPICS = LOG_FSYNC_LATENCY.labels("topics")  # the topic store's partitions

_METRIC_NAMES_AT_SCRAPE = (
    "coordinator_groups", "coordinator_members", "coordinator_purgatory_delayed_operations",
    "coordinator_purgatory_watched_keys", "coordinator_consumer_lag", "coordinator_consumer_group_lag",
    "coordinator_consumer_lag_series_dropped",
)


def metric_names() -> set[str]:
    """Every sample name this module can expose (counters with their _total, histograms with _bucket...)."""
    names = set(_METRIC_NAMES_AT_SCRAPE)
    for collector in (REQUEST_TALLY, ERRORS, BYTES_IN, BYTES_OUT, CONNECTIONS, CONNECTIONS_OPENED,
                      REBALANCES, REBALANCE_DURATION, MEMBERS_REMOVED, LOG_APPEND_LATENCY, LOG_FSYNC_LATENCY):
        for family in collector.describe():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names |= {family.name + s for s in ("_bucket", "_count", "_sum")}
            else:
                names.add(family.name)
    return names


# -- per-request accounting ----------------------------------------------------------------------------

_error_names: dict[int, str] = {e.value: e.name for e in Errors}


def observe_request(api: str, version: int, seconds: float, response: object | None) -> None:
    """Count one request; `response` (None for acks=0) is scanned for non-zero error codes."""
    REQUESTS.observe(api, version, seconds)
    if response is not None:
        codes = response.error_codes if isinstance(response, EncodedResponse) else error_codes(response)
        for code in codes:
            if code:
                _count_error(api, code)


# The fast paths' accounting: bound methods of the compiled tallies, called without an interpreted frame.
observe_request_error = REQUESTS.observe_error
observe_request_errors: Callable[[str, int, float, Iterable[int]], None] = REQUESTS.observe_errors


# The labelled children of ERRORS, looked up once: `labels()` takes a lock and builds the key on every call,
# and some errors are routine (every member's first JoinGroup is answered MEMBER_ID_REQUIRED).
_error_counters: dict[tuple[str, int], Any] = {}


def _count_error(api: str, code: int) -> None:
    counter = _error_counters.get((api, code))
    if counter is None:
        counter = _error_counters[(api, code)] = ERRORS.labels(api, _error_names.get(code, str(code)))
    counter.inc()


_error_paths: dict[type, tuple[tuple[str, ...], ...]] = {}


def error_codes(message: object) -> Iterator[int]:
    """Non-zero `error_code` values of a response, at the top level and in nested arrays (up to three
    levels: e.g. Fetch responses → partitions). The paths are worked out once per message class."""
    paths = _error_paths.get(type(message))
    if paths is None:
        paths = _error_paths[type(message)] = tuple(_paths_to_error_code(getattr(message, "_struct", None), 3))
    for path in paths:
        yield from _walk(message, path)


def _paths_to_error_code(struct: Any, depth: int) -> Iterator[tuple[str, ...]]:
    if struct is None or depth == 0:
        return
    for name, fld in struct.fields.items():
        if name == "error_code":
            yield (name,)
        elif fld.is_struct_array() or fld.is_struct():
            for rest in _paths_to_error_code(fld, depth - 1):
                yield (name, *rest)


def _walk(node: Any, path: tuple[str, ...]) -> Iterator[int]:
    value = getattr(node, path[0], None)
    if len(path) == 1:
        if value:
            yield int(value)
        return
    if value is None:
        return
    for item in value if isinstance(value, list) else (value,):
        yield from _walk(item, path[1:])


# -- the core's events ---------------------------------------------------------------------------------


class GroupMetrics(GroupEvents):
    """The core's observer: counts rebalances and removals, times rebalances with the core's now_ms."""

    def __init__(self) -> None:
        # group id -> now_ms when its current rebalance began; cleared when it ends (Stable, Empty, Dead).
        self._rebalance_started_ms: dict[str, int] = {}

    def on_rebalance(self, group_id: str, reason: str, now_ms: int) -> None:
        REBALANCES.labels(reason).inc()
        # A rebalance restarted before the group got Stable (a member joined mid-way) is one rebalance
        # for the duration: from the first PreparingRebalance to Stable.
        self._rebalance_started_ms.setdefault(group_id, now_ms)

    def on_stable(self, group_id: str, now_ms: int) -> None:
        started = self._rebalance_started_ms.pop(group_id, None)
        if started is not None:
            REBALANCE_DURATION.observe(max(now_ms - started, 0) / 1000)

    def on_rebalance_abandoned(self, group_id: str) -> None:
        self._rebalance_started_ms.pop(group_id, None)

    def on_member_removed(self, group_id: str, reason: str) -> None:
        MEMBERS_REMOVED.labels(reason).inc()

    def on_pending_member_evicted(self, group_id: str) -> None:
        PENDING_MEMBERS_EVICTED.inc()


class ConsumerGroupMetrics(ConsumerGroupEvents):
    """The consumer group core's observer."""

    def on_group_epoch_bump(self, group_id: str, reason: str) -> None:
        CONSUMER_EPOCH_BUMPS.inc()

    def on_member_fenced(self, group_id: str, reason: str, kind: str) -> None:
        CONSUMER_MEMBERS_FENCED.labels(kind).inc()


# -- scrape-time state ---------------------------------------------------------------------------------


class _Purgatory(Protocol):
    name: str

    def delayed(self) -> int: ...
    def watched(self) -> int: ...


class _GroupSource(Protocol):
    """What the collector reads of the coordinator (GroupCoordinator) and the topic store (TopicStore)."""

    groups: dict[str, Any]  # the one group table: classic and consumer groups by id


class _PartitionSource(Protocol):
    def partition(self, topic: str, index: int) -> Any: ...


@dataclass
class Snapshot:
    groups_by_state: _Tally[str] = field(default_factory=_Tally)
    consumer_groups_by_state: _Tally[str] = field(default_factory=_Tally)
    members: int = 0
    purgatories: list[tuple[str, int, int]] = field(default_factory=list)
    lag: list[tuple[str, str, int, int]] = field(default_factory=list)  # group, topic, partition, lag
    group_lag: dict[str, int] = field(default_factory=dict)
    lag_dropped: int = 0


def take_snapshot(coordinator: _GroupSource, store: _PartitionSource, purgatories: Iterable[_Purgatory],
                  max_lag_series: int = MAX_LAG_SERIES) -> Snapshot:
    """On the event loop: one pass over the groups. Lag = log end offset - committed offset (never below
    0), for committed partitions of topics that exist."""
    snap = Snapshot()
    for state in GroupState:
        snap.groups_by_state[str(state)] = 0
    for consumer_state in ConsumerGroupState:
        if consumer_state is not ConsumerGroupState.DEAD:
            snap.consumer_groups_by_state[str(consumer_state)] = 0
    for group in coordinator.groups.values():
        # Each type has a gauge of its own: their states are different sets.
        if isinstance(group, GroupMetadata):
            snap.groups_by_state[str(group.state)] += 1
        elif isinstance(group, ConsumerGroup):
            snap.consumer_groups_by_state[str(group.state)] += 1
        snap.members += len(group.members)
        total = 0
        for (topic, index), value in group.offsets.items():
            partition = store.partition(topic, index)
            if partition is None:
                continue
            lag = max(partition.log_end_offset - value.offset, 0)
            total += lag
            if len(snap.lag) < max_lag_series:
                snap.lag.append((group.group_id, topic, index, lag))
            else:
                snap.lag_dropped += 1
        if group.offsets:
            snap.group_lag[group.group_id] = total
    snap.purgatories = [(p.name, p.delayed(), p.watched()) for p in purgatories]
    return snap


class CoordinatorCollector(Collector):
    def __init__(self, loop: asyncio.AbstractEventLoop, coordinator: _GroupSource, store: _PartitionSource,
                 purgatories: Iterable[_Purgatory]) -> None:
        self._loop = loop
        self._coordinator = coordinator
        self._store = store
        self._purgatories = list(purgatories)

    def describe(self) -> list[Metric]:
        # Without this, registering would call collect() — on the loop thread, waiting for the loop.
        return list(_families(None))

    def collect(self) -> list[Metric]:
        done: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def on_loop() -> None:
            try:
                done.set_result(take_snapshot(self._coordinator, self._store, self._purgatories))
            except BaseException as e:
                done.set_exception(e)

        try:
            self._loop.call_soon_threadsafe(on_loop)
            snap = done.result(SNAPSHOT_TIMEOUT_S)
        except Exception as e:  # loop closed or stalled: serve the other metrics rather than fail
            log.warning("metrics_snapshot_failed", error=repr(e))
            return []
        return list(_families(snap))


def _families(snap: Snapshot | None) -> Iterator[Metric]:
    groups = GaugeMetricFamily("coordinator_groups", "Groups by state", labels=["state"])
    consumer_groups = GaugeMetricFamily("coordinator_consumer_groups",
                                        "Consumer-protocol (KIP-848) groups by state", labels=["state"])
    members = GaugeMetricFamily("coordinator_members", "Members of all groups")
    delayed = GaugeMetricFamily("coordinator_purgatory_delayed_operations",
                                "Operations parked in a purgatory (heartbeat, rebalance, fetch)", labels=["purgatory"])
    watched = GaugeMetricFamily("coordinator_purgatory_watched_keys",
                                "Watch-list entries of a purgatory", labels=["purgatory"])
    lag = GaugeMetricFamily("coordinator_consumer_lag",
                            "Log end offset minus committed offset, per group and partition",
                            labels=["group", "topic", "partition"])
    group_lag = GaugeMetricFamily("coordinator_consumer_group_lag", "Sum of a group's partition lags",
                                  labels=["group"])
    dropped = GaugeMetricFamily("coordinator_consumer_lag_series_dropped",
                                f"Lag series left out of this scrape (more than {MAX_LAG_SERIES})")
    if snap is not None:
        for state, count in snap.groups_by_state.items():
            groups.add_metric([state], count)
        for state, count in snap.consumer_groups_by_state.items():
            consumer_groups.add_metric([state], count)
        members.add_metric([], snap.members)
        for name, n_delayed, n_watched in snap.purgatories:
            delayed.add_metric([name.lower()], n_delayed)
            watched.add_metric([name.lower()], n_watched)
        for group_id, topic, index, value in snap.lag:
            lag.add_metric([group_id, topic, str(index)], value)
        for group_id, value in snap.group_lag.items():
            group_lag.add_metric([group_id], value)
        dropped.add_metric([], snap.lag_dropped)
    yield from (groups, consumer_groups, members, delayed, watched, lag, group_lag, dropped)


# -- the event loop ---------------------------------------------------------------------------------------

LOOP_LAG_INTERVAL_S = 0.25
LOOP_LAG = Histogram("coordinator_event_loop_lag_seconds",
                     f"How late a {LOOP_LAG_INTERVAL_S} s sleep on the event loop woke up: time the loop was busy",
                     buckets=_DISK_BUCKETS, registry=REGISTRY)


async def watch_loop_lag() -> None:
    """Runs while the metrics endpoint does: four wake-ups a second, so it costs nothing measurable."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(LOOP_LAG_INTERVAL_S)
        LOOP_LAG.observe(max(loop.time() - before - LOOP_LAG_INTERVAL_S, 0.0))


# -- the endpoint --------------------------------------------------------------------------------------


class MetricsEndpoint:
    """prometheus-client's HTTP server on its own thread, plus our collector for the server's state."""

    def __init__(self, collector: CoordinatorCollector) -> None:
        self._collector = collector
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lag_task: asyncio.Task[None] | None = None

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and serve; returns the bound (host, port), the real port for port 0. Raises OSError."""
        REGISTRY.register(self._collector)
        try:
            self._server, self._thread = start_http_server(port, addr=host or "0.0.0.0", registry=REGISTRY)
        except BaseException:
            REGISTRY.unregister(self._collector)
            raise
        self._lag_task = asyncio.get_running_loop().create_task(watch_loop_lag(), name="loop-lag")
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])

    async def close(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        if self._lag_task is not None:
            self._lag_task.cancel()
        # shutdown() waits for the serve loop's next poll (up to 0.5 s): not on the event loop.
        await asyncio.to_thread(server.shutdown)
        server.server_close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
        REGISTRY.unregister(self._collector)
