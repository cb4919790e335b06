"""The /metrics endpoint of a real server, with docker/demo.py as the traffic: a producer and a
three-member consumer group (what docker-compose runs), then the key metrics are scraped and checked.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[2] / "docker" / "demo.py"
GROUP = "demo-consumers"
TOPIC = "demo"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def wait_for(port: int, check: Callable[[Samples], bool], timeout_s: float = 45.0) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(port)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            interesting = {k: v for k, v in samples.items() if "bucket" not in k[0]}
            raise AssertionError(f"metrics never satisfied the check: {interesting}")
        time.sleep(0.2)


class Demo:
    """docker/demo.py as a subprocess; its JSON stdout lines are collected."""

    def __init__(self, server: ServerProcess, *args: str) -> None:
        argv = [sys.executable, str(DEMO), *args, "--bootstrap", server.address, "--topic", TOPIC, "--group", GROUP]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def finish(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait for the exit; returns the summary line."""
        code = self.proc.wait(timeout_s)
        self._reader.join(5)
        assert self.proc.stderr is not None
        assert code == 0, self.proc.stderr.read()
        return self.lines[-1]

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        return self.finish()


@pytest.fixture
def demo_server(server_factory: ServerFactory) -> ServerProcess:
    # A short initial delay lets the three consumers usually form the group in one rebalance.
    return server_factory(metrics_port=0, topic=[f"{TOPIC}:3"], initial_rebalance_delay_ms=500,
                          offsets_partitions=4)


@pytest.fixture
def consumers(demo_server: ServerProcess) -> Iterator[list[Demo]]:
    started: list[Demo] = []
    yield started
    for demo in started:
        if demo.proc.poll() is None:
            demo.proc.kill()
            demo.proc.wait(10)


def test_metrics_follow_a_producer_and_a_three_member_group(demo_server: ServerProcess,
                                                            consumers: list[Demo]) -> None:
    [listening] = demo_server.events("metrics_listening")
    port = int(listening["port"])
    assert port > 0 and port != demo_server.port
    before = scrape(port)
    assert value(before, "coordinator_groups", state="Stable") == 0

    produced = Demo(demo_server, "produce", "--duration", "2", "--rate", "100").finish()
    assert produced["event"] == "produced" and produced["records"] > 0
    sent = int(produced["records"])

    consumers.extend(Demo(demo_server, "consume") for _ in range(3))
    # The group forms with all three members, and they consume and commit everything.
    running = wait_for(port, lambda s: value(s, "coordinator_groups", state="Stable") == 1
                       and value(s, "coordinator_members") == 3
                       and ("coordinator_consumer_group_lag", (("group", GROUP),)) in s
                       and value(s, "coordinator_consumer_group_lag", group=GROUP) == 0
                       and total(s, "coordinator_consumer_lag", group=GROUP, topic=TOPIC) == 0
                       and len([k for k in s if k[0] == "coordinator_consumer_lag"]) == 3)
    assert value(running, "coordinator_connections") >= 3
    assert value(running, "coordinator_purgatory_delayed_operations", purgatory="heartbeat") >= 3

    summaries = [c.stop() for c in consumers]
    assert all(s["event"] == "consumed" for s in summaries)
    assert sum(s["records"] for s in summaries) >= sent  # at least once: a rebalance may redeliver

    # More records after the group left: its committed offsets stay, so the lag is exactly the new ones.
    more = int(Demo(demo_server, "produce", "--duration", "1", "--rate", "50").finish()["records"])
    after = wait_for(port, lambda s: value(s, "coordinator_groups", state="Empty") == 1
                     and value(s, "coordinator_consumer_group_lag", group=GROUP) == more)
    assert value(after, "coordinator_members") == 0
    assert value(after, "coordinator_rebalances_total", reason="join") >= 1
    assert value(after, "coordinator_rebalances_total", reason="leave") >= 1
    assert value(after, "coordinator_members_removed_total", reason="leave") >= 2  # the last leaves an Empty group
    assert value(after, "coordinator_rebalance_duration_seconds_count") >= 1
    for api in ("Produce", "Fetch", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetCommit", "LeaveGroup"):
        assert total(after, "coordinator_requests_total", api=api) > 0, api
    assert total(after, "coordinator_request_latency_seconds_count", api="Produce") == \
        total(after, "coordinator_requests_total", api="Produce")
    # kafka-python's JoinGroup v4+ gets its member id through MEMBER_ID_REQUIRED (KIP-394) first.
    assert value(after, "coordinator_response_errors_total", api="JoinGroup", error="MEMBER_ID_REQUIRED") >= 3
    assert value(after, "coordinator_connections_opened_total") >= 5
    assert value(after, "coordinator_network_received_bytes_total") > 0
    assert value(after, "coordinator_network_sent_bytes_total") > 0
    assert value(after, "coordinator_log_fsync_seconds_count", log="coordinator") > 0
    assert value(after, "coordinator_log_fsync_seconds_count", log="topics") > 0
    assert value(after, "coordinator_log_append_seconds_count") > 0


def test_no_endpoint_without_the_flag(server_factory: ServerFactory) -> None:
    srv = server_factory()
    assert srv.events("metrics_listening") == []
    assert srv.terminate() == 0


def test_the_endpoint_closes_on_shutdown(demo_server: ServerProcess) -> None:
    port = int(demo_server.events("metrics_listening")[0]["port"])
    assert scrape(port)
    assert demo_server.terminate() == 0
    with pytest.raises(OSError):
        scrape(port)
