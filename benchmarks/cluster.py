"""The cluster scenario (issue 12): ZooKeeper and three coordinator nodes, each its own process.

- **Replicated commits**: the commits scenario's load generator and frames (one group per committer,
  OffsetCommit v8, generation -1), first against a single node, then against the cluster (RF 3, min ISR 2),
  each connection to the coordinator of its own group; same flags otherwise (fsync always, 50 partitions).
- **Failover**: one-member groups registered over the wire (benchmarks/failover.py), kill -9 of the node
  coordinating the most of them, and the time until every one of its groups is Stable again on its new
  coordinator; the new leaders' `coordinator_partition_loaded` log events give each partition's load time.

Apache Kafka's three-node cluster runs the same commits and the same failover (benchmarks/kafka_cluster.py)
through `cluster_commits` and `drive_failover`.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import statistics
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from coordinator_server.tools.local_zookeeper import LocalZooKeeper
from coordinator_server.topics.registry import OFFSETS_TOPIC
from tests.kafka.broker import call, recv_exactly

from . import wire
from .procs import PY, ROOT, Server, run_loadgen
from .wire import COMMIT_TOPIC

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import (
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        MetadataRequest,
        MetadataResponse,
    )

NODES = 3
ZK_SESSION_MS = 3_000  # --zookeeper-session-timeout-ms: how long a kill -9 goes unnoticed
MEMBER_SESSION_MS = 45_000  # session.timeout.ms, Kafka's default since 3.0
EVENTS = frozenset({"became_leader", "coordinator_partition_loaded"})
READY_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Both setups get these; the cluster adds its own flags. Info level in both: the failover reads the new
# leaders' partition loads from it, and no log line is written per commit at info.
COMMON_FLAGS: dict[str, Any] = {"fsync": "always", "topic": f"{COMMIT_TOPIC}:1", "initial_rebalance_delay_ms": 0}
LOG_LEVEL = "info"


class LocalCluster:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.zk = LocalZooKeeper.start(work / "zookeeper")
        flags = {**COMMON_FLAGS, "zookeeper_connect": f"{self.zk.connect_string}/bench",
                 "zookeeper_session_timeout_ms": ZK_SESSION_MS, "offsets_replication_factor": NODES,
                 "min_insync_replicas": 2}
        self.nodes = {i: Server(work / f"node-{i}", {**flags, "node_id": i}, port=_free_port(), log_level=LOG_LEVEL,
                                keep_events=EVENTS) for i in range(NODES)}

    def start(self) -> LocalCluster:
        for node in self.nodes.values():
            node.start(timeout_s=60)
        self._wait_ready()
        return self

    def running(self) -> list[Server]:
        return [n for n in self.nodes.values() if n.proc is not None and n.proc.poll() is None]

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.fixed_port}" for n in self.nodes.values())

    def metadata(self) -> Any:
        node = self.running()[0]
        return call(("127.0.0.1", node.fixed_port), MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=OFFSETS_TOPIC)],
            allow_auto_topic_creation=False), MetadataResponse, timeout_s=10.0)

    def _wait_ready(self) -> None:
        """Every __consumer_offsets partition led and fully in sync, so each commit is replicated to 3."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                md = self.metadata()
                parts = md.topics[0].partitions if md.topics and md.topics[0].error_code == 0 else []
                last = [(p.partition_index, p.leader_id, list(p.isr_nodes)) for p in parts][:5]
                if parts and all(p.leader_id >= 0 and len(p.isr_nodes) == NODES for p in parts):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"cluster not ready in {READY_TIMEOUT_S:.0f} s: {last}")

    def coordinator(self, group_id: str) -> tuple[str, int]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            resp = call(("127.0.0.1", self.nodes[0].fixed_port),
                        FindCoordinatorRequest[3](key=group_id, key_type=0), FindCoordinatorResponse, timeout_s=10.0)
            if resp.error_code == 0:
                return resp.host, resp.port
            time.sleep(0.1)
        raise RuntimeError(f"no coordinator for {group_id}")

    def stop(self) -> None:
        # SIGTERM to every node at once (each a controlled shutdown), then ZooKeeper once they are gone.
        for node in self.running():
            assert node.proc is not None
            node.proc.send_signal(signal.SIGTERM)
        for node in self.running():
            assert node.proc is not None
            try:
                node.proc.wait(30)
            except subprocess.TimeoutExpired:
                node.kill9()
        self.zk.stop()


def _first_commit(address: tuple[str, int], group_id: str, timeout_s: float = 30.0) -> None:
    """One acknowledged commit per group before the clock runs: the metadata says every partition has a
    leader as soon as the controller wrote the states, a moment before each node has applied them (until
    then the coordinator answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS)."""
    deadline = time.monotonic() + timeout_s
    error = -1
    offset = wire.commit_error_offset(COMMIT_TOPIC)
    while time.monotonic() < deadline:
        with socket.create_connection(address, timeout=10) as s:
            s.sendall(wire.commit_frame(group_id, COMMIT_TOPIC, 0))
            size = int.from_bytes(recv_exactly(s, 4), "big")
            response = (size.to_bytes(4, "big") + recv_exactly(s, size))
        error = int.from_bytes(response[offset:offset + 2], "big")
        if error == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{group_id}: no commit acknowledged by {address} in {timeout_s:.0f} s (error {error})")


def _commit_frames(committers: int) -> list[list[bytes]]:
    # The commits scenario's: one group per committer, 16 offsets cycled.
    return [[wire.commit_frame(f"committer-{c}", COMMIT_TOPIC, o, correlation_id=o) for o in range(16)]
            for c in range(committers)]


def _commit_run(address: tuple[str, int] | None, addresses: list[tuple[str, int]] | None, committers: int,
                warmup_s: float, duration_s: float) -> dict[str, Any]:
    host, port = address or addresses[0]  # type: ignore[index]
    return run_loadgen(host, port, _commit_frames(committers), connections=committers, warmup_s=warmup_s,
                       duration_s=duration_s, error_offset=wire.commit_error_offset(COMMIT_TOPIC),
                       addresses=addresses)


def single_node_commits(work: Path, committers: int, warmup_s: float, duration_s: float) -> dict[str, Any]:
    data = work / f"single-{committers}"
    shutil.rmtree(data, ignore_errors=True)
    srv = Server(data, COMMON_FLAGS, log_level=LOG_LEVEL).start()
    try:
        return _commit_run(("127.0.0.1", srv.port), None, committers, warmup_s, duration_s)
    finally:
        srv.stop()


class Coordinators(Protocol):
    """A cluster that names each group's coordinator: the server's, or Kafka's (tests/kafka/cluster.py)."""

    def coordinator(self, group_id: str) -> tuple[str, int]: ...


def cluster_commits(cluster: Coordinators, committers: int, warmup_s: float, duration_s: float) -> dict[str, Any]:
    addresses = [cluster.coordinator(f"committer-{c}") for c in range(committers)]
    for c, address in enumerate(addresses):
        _first_commit(address, f"committer-{c}")
    result = _commit_run(None, addresses, committers, warmup_s, duration_s)
    result["connections_per_node"] = {f"{h}:{p}": addresses.count((h, p)) for h, p in sorted(set(addresses))}
    return result


def drive_failover(bootstrap: str, groups: int, controller: Callable[[], int | None],
                   kill9: Callable[[int], None]) -> tuple[dict[str, Any], float]:
    """The failover driver's groups registered on a cluster, kill -9 of the node coordinating the most of
    them, and the driver's result once every one of them is Stable again elsewhere, with the groups per
    node and whether the victim was the controller (`controller()`, asked just before the kill); also the
    time.monotonic() of the kill."""
    driver = subprocess.Popen([PY, "-m", "benchmarks.failover", bootstrap, str(groups),
                               str(MEMBER_SESSION_MS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert driver.stdin is not None and driver.stdout is not None and driver.stderr is not None
    try:
        line = driver.stdout.readline()
        if not line:
            raise RuntimeError(f"failover driver exited with {driver.wait(60)}: {driver.stderr.read()[-3000:]}")
        registered = json.loads(line)
        per_node: dict[int, int] = {}
        for node_id in registered["groups"].values():
            per_node[node_id] = per_node.get(node_id, 0) + 1
        victim = max(per_node, key=lambda n: per_node[n])
        controller_id = controller()
        time.sleep(1.0)  # every member heartbeating on its own schedule, nothing in flight from registering
        killed_at = time.monotonic()
        kill9(victim)
        driver.stdin.write(f"killed {victim} {killed_at!r}\n")
        driver.stdin.flush()
        out, err = driver.communicate(timeout=300)
        if driver.returncode != 0 or not out.strip():
            raise RuntimeError(f"failover driver failed ({driver.returncode}): {err[-3000:]}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
    if result["described_stable"] != result["moved"]:
        raise RuntimeError(f"failover: {result['moved'] - result['described_stable']} moved groups not Stable "
                           f"with their member on the new coordinator: {result['describe_problems']}")
    result.update(groups_per_node={str(k): v for k, v in sorted(per_node.items())},
                  register_s=registered["register_s"],
                  # Killing the controller too adds a controller election.
                  victim_was_controller=victim == controller_id)
    return result, killed_at


def failover(cluster: LocalCluster, groups: int) -> dict[str, Any]:
    result, killed_at = drive_failover(cluster.bootstrap(), groups, lambda: cluster.metadata().controller_id,
                                       lambda victim: cluster.nodes[victim].kill9())
    loads = [e for n in cluster.running() for e in n.events
             if e["event"] == "coordinator_partition_loaded" and e["received_s"] > killed_at]
    elected = [e["received_s"] - killed_at for n in cluster.running() for e in n.events
               if e["event"] == "became_leader" and e["received_s"] > killed_at]
    load_s = sorted(float(e["seconds"]) for e in loads)
    result.update(
        zookeeper_session_timeout_ms=ZK_SESSION_MS, partitions_moved=len(loads),
        first_leader_s=min(elected) if elected else None, last_leader_s=max(elected) if elected else None,
        partition_load_s_max=load_s[-1] if load_s else None,
        partition_load_s_median=statistics.median(load_s) if load_s else None,
        partition_loads=[{"partition": e["partition"], "groups": e["groups"], "seconds": e["seconds"],
                          "at_s": round(e["received_s"] - killed_at, 3)} for e in loads])
    return result


def run(work: Path, groups: int, committers: list[int], warmup_s: float, duration_s: float) -> dict[str, Any]:
    single = {c: single_node_commits(work, c, warmup_s, duration_s) for c in committers}
    cluster = LocalCluster(work / "cluster")
    try:
        cluster.start()
        replicated = {c: cluster_commits(cluster, c, warmup_s, duration_s) for c in committers}
        fail = failover(cluster, groups)
    finally:
        cluster.stop()
    return {
        "nodes": NODES, "replication_factor": NODES, "min_insync_replicas": 2,
        "commits": [{"committers": c, "single": single[c], "cluster": replicated[c],
                     "cluster_vs_single": replicated[c]["rps"] / single[c]["rps"]} for c in committers],
        "failover": fail,
    }
