"""coordinator_server.metrics: the core's events through the group harness, the scrape-time snapshot,
error-code counting, the collector across threads and the HTTP endpoint.

Metrics are process-wide objects and xdist runs other tests in this process too, so every check is a
difference between two readings of the registry.
"""
from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from kafka.protocol.metadata import FindCoordinatorResponse

from coordinator_server import metrics
from coordinator_server.group.records import OffsetCommitValue
from coordinator_server.purgatory import DelayedOperationPurgatory, Timer
from protocol.errors import Errors

from .group_harness import Harness


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


class Readings:
    """Remembers the registry's values of some samples; `delta` is how much each moved since."""

    def __init__(self, *keys: tuple[str, dict[str, str]]) -> None:
        self.keys = keys
        self.before = [sample(name, **labels) for name, labels in keys]

    def delta(self) -> list[float]:
        return [sample(name, **labels) - b for (name, labels), b in zip(self.keys, self.before, strict=True)]


def rebalances(reason: str) -> tuple[str, dict[str, str]]:
    return ("coordinator_rebalances_total", {"reason": reason})


def removed(reason: str) -> tuple[str, dict[str, str]]:
    return ("coordinator_members_removed_total", {"reason": reason})


DURATION_COUNT = ("coordinator_rebalance_duration_seconds_count", {})
DURATION_SUM = ("coordinator_rebalance_duration_seconds_sum", {})


def observed_harness(**kwargs: Any) -> Harness:
    h = Harness(**kwargs)
    h.coordinator.events = metrics.GroupMetrics()
    return h


# ----------------------------------------------------------------------------------- core events


def test_a_formed_group_counts_one_join_rebalance_timed_on_the_core_clock() -> None:
    h = observed_harness()
    readings = Readings(rebalances("join"), DURATION_COUNT, DURATION_SUM)
    started = h.now
    h.form_group(2)
    assert h.group().state.value == "Stable"
    # The duration is the harness' clock from the first join to Stable: no real clock involved.
    assert readings.delta() == [1, 1, pytest.approx((h.now - started) / 1000)]


def test_a_rebalance_restarted_before_stable_is_timed_from_its_first_start() -> None:
    h = observed_harness(initial_rebalance_delay_ms=0)
    [first] = h.form_group(1)
    readings = Readings(rebalances("join"), DURATION_COUNT, DURATION_SUM)
    started = h.now
    second = h.join_new_member()  # Stable -> PreparingRebalance
    h.sleep(1000)
    rejoin = h.join(member_id=first.member_id)  # both in: CompletingRebalance
    assert rejoin.done and second.done
    h.sleep(500)
    # A new joiner during CompletingRebalance restarts the rebalance; the duration keeps its first start.
    third = h.join_new_member()
    h.join(member_id=first.member_id)
    h.join(member_id=second.value.member_id)
    assert third.done
    leader = third.value.leader
    h.sleep(250)
    h.sync("g", leader, third.value.generation_id, {})
    assert h.group().state.value == "Stable"
    assert readings.delta() == [2, 1, pytest.approx((h.now - started) / 1000)]


def test_leave_and_session_expiry_count_removals_and_rebalances_by_reason() -> None:
    h = observed_harness()
    results = h.form_group(2)
    readings = Readings(removed("leave"), rebalances("leave"), removed("session_expiry"),
                        rebalances("session_expiry"))
    h.leave("g", (results[0].member_id, None))
    assert readings.delta() == [1, 1, 0, 0]

    h = observed_harness()
    h.form_group(3, session_ms=10_000)
    readings = Readings(removed("session_expiry"), rebalances("session_expiry"))
    h.sleep(10_001)  # nobody heartbeats: every session runs out at the same tick
    # The first expiry starts the rebalance; the others happen while it is already preparing.
    assert readings.delta() == [3, 1]


def test_a_rebalance_ending_empty_is_not_timed_and_forgets_its_start() -> None:
    h = observed_harness(initial_rebalance_delay_ms=0)
    [member] = h.form_group(1)
    observer = h.coordinator.events
    assert isinstance(observer, metrics.GroupMetrics)
    readings = Readings(DURATION_COUNT)
    h.leave("g", (member.member_id, None))
    h.sleep(1)
    assert h.group().state.value == "Empty"
    assert readings.delta() == [0]
    assert observer._rebalance_started_ms == {}


def test_pending_sync_expiry_counts_its_reason() -> None:
    h = observed_harness()
    replies = [h.join_new_member(rebalance_ms=5_000) for _ in range(2)]
    h.settle()
    assert all(r.done for r in replies)
    readings = Readings(removed("pending_sync_timeout"), rebalances("pending_sync_timeout"))
    leader = next(r.value for r in replies if r.value.members)
    h.sync("g", leader.member_id, leader.generation_id, None)  # the leader syncs, the follower never does
    h.heartbeat("g", leader.member_id, leader.generation_id)
    h.sleep(5_001)
    assert readings.delta() == [1, 1]


def test_the_default_observer_is_a_no_op() -> None:
    h = Harness()
    readings = Readings(rebalances("join"))
    h.form_group(2)
    assert readings.delta() == [0]


# ----------------------------------------------------------------------------------- the snapshot


@dataclass
class FakePartition:
    log_end_offset: int


class FakeStore:
    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends

    def partition(self, topic: str, index: int) -> FakePartition | None:
        end = self.ends.get((topic, index))
        return None if end is None else FakePartition(end)


def committed(offset: int) -> OffsetCommitValue:
    return OffsetCommitValue(offset, -1, "", 0, -1)


def test_snapshot_counts_states_members_lag_and_purgatories() -> None:
    h = Harness()
    h.form_group(2, group="stable")
    h.join_new_member(group="preparing")  # parked for the initial rebalance delay
    h.group("stable").offsets.update({("t", 0): committed(10), ("t", 1): committed(50), ("gone", 0): committed(3)})
    store = FakeStore({("t", 0): 25, ("t", 1): 40})
    snap = metrics.take_snapshot(h.coordinator, store,
                                 [h.coordinator.heartbeat_purgatory, h.coordinator.rebalance_purgatory])
    assert snap.groups_by_state["Stable"] == 1
    assert snap.groups_by_state["PreparingRebalance"] == 1
    assert snap.groups_by_state["Dead"] == 0  # every state is reported, also at zero
    assert snap.members == 3
    # Lag never goes below 0 (a commit past the end, e.g. after retention); unknown topics are skipped.
    assert sorted(snap.lag) == [("stable", "t", 0, 15), ("stable", "t", 1, 0)]
    assert snap.group_lag == {"stable": 15}
    heartbeat = next(p for p in snap.purgatories if p[0] == "Heartbeat")
    assert heartbeat[1] == 3  # two members' sessions plus the new member's join timeout


def test_snapshot_caps_lag_series_and_counts_the_rest() -> None:
    h = Harness()
    group = h.coordinator.create_simple_group("many")
    group.offsets.update({("t", i): committed(0) for i in range(10)})
    snap = metrics.take_snapshot(h.coordinator, FakeStore({("t", i): 5 for i in range(10)}), [], max_lag_series=4)
    assert len(snap.lag) == 4 and snap.lag_dropped == 6
    assert snap.group_lag == {"many": 50}  # the per-group total still covers every partition


# ------------------------------------------------------------------------------- requests, errors


def test_error_codes_are_found_at_the_top_level_and_in_nested_entries() -> None:
    response = FindCoordinatorResponse[4](throttle_time_ms=0, coordinators=[
        FindCoordinatorResponse[4].Coordinator(key="a", node_id=0, host="h", port=1, error_code=0, error_message=None),
        FindCoordinatorResponse[4].Coordinator(key="b", node_id=-1, host="", port=-1, error_code=15,
                                               error_message=None),
    ])
    assert list(metrics.error_codes(response)) == [15]
    readings = Readings(("coordinator_requests_total", {"api": "FindCoordinator", "version": "4"}),
                        ("coordinator_response_errors_total",
                         {"api": "FindCoordinator", "error": "COORDINATOR_NOT_AVAILABLE"}),
                        ("coordinator_request_latency_seconds_count", {"api": "FindCoordinator", "version": "4"}))
    metrics.observe_request("FindCoordinator", 4, 0.002, response)
    metrics.observe_request("FindCoordinator", 4, 0.001, None)  # acks=0 style: no response to scan
    assert readings.delta() == [2, 1, 2]


def test_every_error_code_name_comes_from_the_one_taxonomy() -> None:
    assert metrics._error_names[Errors.MEMBER_ID_REQUIRED.value] == "MEMBER_ID_REQUIRED"


# ----------------------------------------------------------------------------- collector, endpoint


class Counted:
    def __init__(self, name: str, delayed: int, watched: int) -> None:
        self.name, self._delayed, self._watched = name, delayed, watched

    def delayed(self) -> int:
        return self._delayed

    def watched(self) -> int:
        return self._watched


async def test_the_collector_takes_its_snapshot_on_the_loop_from_the_scrape_thread() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    h.form_group(1)
    fetch: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory("Fetch", Timer(0))
    collector = metrics.CoordinatorCollector(asyncio.get_running_loop(), h.coordinator, FakeStore({}),
                                             [h.coordinator.heartbeat_purgatory, fetch])
    # describe() never waits for the loop: registering happens on the loop thread.
    assert {m.name for m in collector.describe()} >= {"coordinator_groups", "coordinator_consumer_lag"}
    families = {m.name: m for m in await asyncio.to_thread(collector.collect)}
    groups = {s.labels["state"]: s.value for s in families["coordinator_groups"].samples}
    assert groups["Stable"] == 1
    assert [s.value for s in families["coordinator_members"].samples] == [1]
    delayed = {s.labels["purgatory"]: s.value for s in families["coordinator_purgatory_delayed_operations"].samples}
    assert delayed == {"heartbeat": 1, "fetch": 0}


async def test_the_endpoint_serves_the_registry_and_our_state_then_unregisters() -> None:
    loop = asyncio.get_running_loop()
    h = Harness()
    h.form_group(2)
    endpoint = metrics.MetricsEndpoint(metrics.CoordinatorCollector(loop, h.coordinator, FakeStore({}),
                                                                    [Counted("Rebalance", 0, 0)]))
    host, port = endpoint.start("127.0.0.1", 0)
    try:
        assert port > 0
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode())
    finally:
        await endpoint.close()
    assert 'coordinator_groups{state="Stable"} 1.0' in body
    assert "coordinator_members 2.0" in body
    assert "coordinator_requests_total" in body or "# TYPE coordinator_requests counter" in body
    # Closed: the collector is gone, so a second endpoint can register its own.
    assert metrics.REGISTRY.get_sample_value("coordinator_members") is None


def test_every_exposed_name_is_listed_for_the_dashboard_check() -> None:
    names = metrics.metric_names()
    assert {"coordinator_requests_total", "coordinator_request_latency_seconds_bucket", "coordinator_groups",
            "coordinator_consumer_lag", "coordinator_log_fsync_seconds_bucket"} <= names


# ---------------------------------------------------------------------------------- log context


async def test_timers_run_without_the_context_of_the_request_that_armed_them(tmp_path: Any) -> None:
    """A session expiry fired from the loop timer must not carry the peer/client id of whichever
    connection last armed the timer."""
    from coordinator_server.config import load_config
    from coordinator_server.group.api import JoinGroupInput
    from coordinator_server.net.awaiting import as_future
    from coordinator_server.runtime import CoordinatorRuntime, open_coordinator_log, shared_timer

    config = load_config(["--data-dir", str(tmp_path), "--offsets-partitions", "1", "--fsync", "never",
                          "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "10"], {})
    captured = structlog.testing.LogCapture()
    old = structlog.get_config()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, captured])
    runtime = await CoordinatorRuntime.open(config, open_coordinator_log(config),
                                            shared_timer(asyncio.get_running_loop()))
    try:
        async def connection() -> None:
            structlog.contextvars.bind_contextvars(peer="10.0.0.1:5555", client_id="armed-it")
            result = await as_future(runtime.join_group, JoinGroupInput(
                "g", "", None, 50, 50, "consumer", (("range", b""),), 3, "armed-it", "/10.0.0.1", None))
            assert result.error is Errors.NONE

        await asyncio.create_task(connection())
        for _ in range(200):
            if any(e["event"] == "member_removed" for e in captured.entries):
                break
            await asyncio.sleep(0.01)
    finally:
        await runtime.close()
        structlog.configure(**old)
    [removal] = [e for e in captured.entries if e["event"] == "member_removed"]
    assert removal["group_id"] == "g" and removal["member_id"] and "generation" in removal
    # client_id is the removed member's own, which the line names explicitly (pipeline explain reads it).
    assert "peer" not in removal and removal["client_id"] == "armed-it"
    # The join itself was logged in its connection's context.
    [added] = [e for e in captured.entries if e["event"] == "member_added"]
    assert added["peer"] == "10.0.0.1:5555" and added["client_id"] == "armed-it"


def test_request_latencies_land_in_prometheus_le_buckets_and_bytes_are_counted() -> None:
    labels = {"api": "Heartbeat", "version": "4"}
    bucket = "coordinator_request_latency_seconds_bucket"
    readings = Readings(("coordinator_requests_total", labels),
                        ("coordinator_request_latency_seconds_count", labels),
                        (bucket, {**labels, "le": "0.0005"}), (bucket, {**labels, "le": "0.001"}),
                        (bucket, {**labels, "le": "+Inf"}),
                        ("coordinator_response_errors_total", {"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS"}),
                        ("coordinator_network_received_bytes_total", {}))
    metrics.observe_request_error("Heartbeat", 4, 0.0005, 0)  # on a bound: that bucket (le means <=)
    metrics.observe_request_error("Heartbeat", 4, 0.0007, Errors.REBALANCE_IN_PROGRESS.value)
    metrics.observe_request_error("Heartbeat", 4, 700.0, 0)  # beyond the last bound: only +Inf
    metrics.BYTES_IN.count.value += 42
    assert readings.delta() == [3, 3, 1, 2, 3, 1, 42]
    assert sample("coordinator_request_latency_seconds_sum", **labels) >= 700.0012


def test_log_append_latencies_land_in_prometheus_le_buckets() -> None:
    bucket = "coordinator_log_append_seconds_bucket"
    readings = Readings(("coordinator_log_append_seconds_count", {}), (bucket, {"le": "0.0001"}),
                        (bucket, {"le": "0.00025"}), (bucket, {"le": "2.5"}), (bucket, {"le": "+Inf"}))
    tally = metrics.LOG_APPEND_LATENCY.tally  # what the coordinator log's writer is handed
    tally.observe(0.0001)  # on a bound: that bucket
    tally.observe(0.0002)
    tally.observe(3.0)  # beyond the last bound: only +Inf
    assert readings.delta() == [3, 1, 2, 2, 3]
    assert sample("coordinator_log_append_seconds_sum") >= 3.0003


def test_consumer_protocol_groups_are_counted_by_state_with_their_members_and_lag() -> None:
    from tests.unit.test_consumer_group_facade import consumer_group

    h = Harness(topics={"orders": 4})
    h.coordinator.consumer.events = metrics.ConsumerGroupMetrics()
    bumps = metrics.REGISTRY.get_sample_value("coordinator_consumer_group_epoch_bumps_total") or 0.0
    left = metrics.REGISTRY.get_sample_value("coordinator_consumer_members_fenced_total", {"reason": "leave"}) or 0.0
    members = consumer_group(h, 2)
    m0, epoch = members[0]
    h.commit("cg", {("orders", 0): 5}, generation=epoch, member_id=m0, version=9)
    snap = metrics.take_snapshot(h.coordinator, FakeStore({("orders", 0): 8}), [])
    assert snap.consumer_groups_by_state == {"Empty": 0, "Assigning": 0, "Reconciling": 0, "Stable": 1}
    assert snap.groups_by_state["Stable"] == 0 and snap.members == 2
    assert snap.lag == [("cg", "orders", 0, 3)]
    h.consumer_heartbeat("cg", m0, -1)
    assert metrics.REGISTRY.get_sample_value("coordinator_consumer_group_epoch_bumps_total") > bumps + 1
    assert metrics.REGISTRY.get_sample_value("coordinator_consumer_members_fenced_total",
                                             {"reason": "leave"}) == left + 1
