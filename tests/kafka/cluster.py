"""Three Apache Kafka nodes in one KRaft cluster: the peer of the server's own three-node cluster.

    cluster = KafkaCluster(tmp_dir).start()   # formats three fresh log dirs, starts, waits until ready
    ...cluster.bootstrap(), cluster.coordinator(group_id), cluster.kill9(node_id)...
    cluster.stop()

Each node is a KafkaBroker (tests/kafka/broker.py) that is broker and controller at once, node ids 0, 1 and
2, on free ports, in a static quorum of the three (`controller.quorum.voters`), formatted with one cluster
id. Replication as the server's cluster is run: every internal topic at replication factor 3 and min ISR 2,
and so are new topics. Each JVM is smaller than the single broker's (three share two cores).

A broker's liveness decides how long a kill -9 goes unnoticed, so it is set to the server's: its ZooKeeper
session is 3 s (benchmarks/cluster.py), and here the controller fences a broker it has not heard from in 3 s
(`broker.session.timeout.ms`, 9 s by default), heartbeated every second (`broker.heartbeat.interval.ms`, 2 s
by default, below the timeout as it must be). Everything else is Kafka's default.

Ready means every group request would be served by its coordinator with its partition fully replicated:
Metadata lists all three brokers (unfenced), FindCoordinator then answers a probe group of each
`__consumer_offsets` partition with no error, every partition has a leader and all three replicas in sync,
and a DescribeGroups of each probe group at its coordinator answers with no error (no NOT_COORDINATOR, no
load in progress). The first FindCoordinator creates the topic, so it waits for all three brokers: created
while the others are still fenced, every partition would have its first replica, its leader, on the one
unfenced node, and stay there (a preferred leader is restored only after minutes).

`python -m tests.kafka.cluster [--dir D]` runs one in the foreground until interrupted. Every node dies with
the process that started it (PR_SET_PDEATHSIG, as a single broker does).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from coordinator_server.topics.registry import OFFSETS_TOPIC
from tests.kafka.broker import (
    OFFSETS_PARTITIONS,
    START_TIMEOUT_S,
    KafkaBroker,
    call,
    describe_errors,
    find_coordinators,
    free_port,
    probe_groups,
    random_cluster_id,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

NODES = 3
HEAP = "768m"
BROKER_SESSION_MS = 3_000  # the server's cluster's ZooKeeper session (benchmarks/cluster.py ZK_SESSION_MS)
CLUSTER_SETTINGS = {
    "default.replication.factor": str(NODES),
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": str(NODES),
    "transaction.state.log.replication.factor": str(NODES),
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": str(NODES),
    "share.coordinator.state.topic.min.isr": "2",
    "broker.session.timeout.ms": str(BROKER_SESSION_MS),
    "broker.heartbeat.interval.ms": "1000",
}


class KafkaCluster:
    def __init__(self, work_dir: Path, *, settings: dict[str, str] | None = None, heap: str = HEAP,
                 host: str = "127.0.0.1") -> None:
        self.work_dir = Path(work_dir)
        self.host = host
        ports = {i: (free_port(host), free_port(host)) for i in range(NODES)}
        voters = ",".join(f"{i}@{host}:{controller}" for i, (_, controller) in ports.items())
        self.nodes = {i: KafkaBroker(self.work_dir / f"node-{i}", port=port, controller_port=controller, heap=heap,
                                     host=host, settings={**CLUSTER_SETTINGS, **(settings or {})}, node_id=i,
                                     voters=voters)
                      for i, (port, controller) in ports.items()}
        self.started_s = 0.0

    def start(self, timeout_s: float = START_TIMEOUT_S) -> KafkaCluster:
        began = time.monotonic()
        cluster_id = random_cluster_id()
        try:
            for formatting in [n.format(cluster_id) for n in self.nodes.values()]:
                formatting.wait()
            for node in self.nodes.values():
                node.launch()
            self._wait_ready(began + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - began
        return self

    def running(self) -> list[KafkaBroker]:
        return [n for n in self.nodes.values() if n.running]

    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes.values())

    def _any(self) -> tuple[str, int]:
        node = self.running()[0]
        return node.host, node.port

    def _metadata(self) -> Any:
        return call(self._any(), MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name=OFFSETS_TOPIC)],
                                                    allow_auto_topic_creation=False), MetadataResponse)

    def offsets_partitions(self) -> list[Any]:
        """`__consumer_offsets`' partitions as Metadata has them (leader, ISR), [] before the topic exists."""
        md = self._metadata()
        topic = md.topics[0] if md.topics else None
        return list(topic.partitions) if topic is not None and topic.error_code == 0 else []

    def not_ready(self) -> object:
        """What keeps the cluster from serving every group fully replicated, or None once nothing does."""
        if len(brokers := self._metadata().brokers) < NODES:
            return f"{len(brokers)} brokers unfenced"
        probes = list(probe_groups(OFFSETS_PARTITIONS))
        coordinators = find_coordinators(self._any(), probes)
        if errors := sorted({c.error_code for c in coordinators if c.error_code != 0}):
            return f"FindCoordinator errors {errors}"
        parts = self.offsets_partitions()
        short = [(p.partition_index, p.leader_id, list(p.isr_nodes)) for p in parts
                 if p.leader_id < 0 or len(p.isr_nodes) < NODES]
        if len(parts) < OFFSETS_PARTITIONS or short:
            return f"{len(parts)} partitions, not fully in sync: {short[:5]}"
        by_address: dict[tuple[str, int], list[str]] = {}
        for c in coordinators:
            by_address.setdefault((c.host, c.port), []).append(c.key)
        unloaded = [g for address, groups in by_address.items() for g in describe_errors(address, groups)]
        return f"DescribeGroups errors for {unloaded[:5]}" if unloaded else None

    def _wait_ready(self, deadline: float) -> None:
        last: object = "not listening"
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if not node.running:
                    raise RuntimeError(f"Kafka node {node.node_id} exited before the cluster was ready:\n"
                                       f"{node.log_tail()}")
            try:
                last = self.not_ready()
                if last is None:
                    return
            except OSError as e:
                last = e
            time.sleep(0.2)
        raise RuntimeError(f"Kafka cluster not ready in time (last: {last})")

    def coordinator(self, group_id: str, timeout_s: float = 30.0) -> tuple[str, int]:
        """Host and port of the group's coordinator, asked of a running node until it names one."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                (c,) = find_coordinators(self._any(), [group_id])
                if c.error_code == 0:
                    return c.host, c.port
            time.sleep(0.1)
        raise RuntimeError(f"no coordinator for {group_id}")

    def quorum_leader(self) -> int | None:
        """The active controller as a running node last recorded it (its metadata log's quorum-state)."""
        for node in self.running():
            with contextlib.suppress(OSError, ValueError):
                state = json.loads((node.work_dir / "log" / "__cluster_metadata-0" / "quorum-state").read_text())
                if state.get("leaderId", -1) >= 0:
                    return int(state["leaderId"])
        return None

    def kill9(self, node_id: int) -> None:
        proc = self.nodes[node_id].proc
        assert proc is not None
        proc.kill()
        proc.wait(10)

    def stop(self, timeout_s: float = 20.0) -> None:
        # SIGTERM to every node at once, then SIGKILL whatever is left at the deadline: the last nodes of a
        # cluster shutting down lose their quorum and may wait for it rather than exit.
        running = [n.proc for n in self.nodes.values() if n.proc is not None and n.proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a three-node Apache Kafka KRaft cluster in the foreground.")
    parser.add_argument("--dir", default=None, help="work dir: one directory per node (default: a new tmp dir)")
    args = parser.parse_args(argv)
    work_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kafka-cluster-"))
    cluster = KafkaCluster(work_dir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        cluster.start()
        print(f"Kafka cluster ready on {cluster.bootstrap()} after {cluster.started_s:.1f} s (logs: "
              f"{work_dir}/node-*/kafka.log); Ctrl-C stops it", flush=True)
        while len(cluster.running()) == NODES:
            time.sleep(0.5)
        print("a Kafka node exited", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
