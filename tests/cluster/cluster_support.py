"""A cluster of real server processes on one ZooKeeper, for the cluster suites.

    cluster = Cluster(zk_connect, tmp_path, nodes=3)
    cluster.start_all()
    node = cluster.coordinator_of("grp")          # the node leading the group's __consumer_offsets partition
    cluster.kill9(node.node_id)                   # and later cluster.start(node.node_id): same port, same data

Every node listens on a port picked once, so a restarted node keeps its address (clients and the other
brokers find it where it was). Requests are made with kafka-python's message classes over plain sockets
(tests/integration/group_client.py), any node answering for the cluster.
"""
from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from tests.integration.conftest import ServerProcess
from tests.integration.group_client import Connection, ServerClosed

OFFSETS_PARTITIONS = 6  # small, so three nodes lead two each and loads are quick


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node(ServerProcess):
    def __init__(self, node_id: int, data_dir: Path, flags: dict[str, Any]) -> None:
        super().__init__(data_dir, flags)
        self.node_id = node_id
        self.fixed_port = int(flags["port"])
        self.host = "127.0.0.1"
        self.port = self.fixed_port

    paused = False

    def sigstop(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def sigcont(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False


class Cluster:
    def __init__(self, zk_connect: str, root: Path, nodes: int = 3, **flags: Any) -> None:
        defaults: dict[str, Any] = dict(
            zookeeper_connect=zk_connect, zookeeper_session_timeout_ms=3000,
            offsets_partitions=OFFSETS_PARTITIONS, offsets_replication_factor=min(3, nodes),
            min_insync_replicas=min(2, nodes), replica_lag_time_max_ms=4000,
            initial_rebalance_delay_ms=0, min_session_timeout_ms=1000, topic=["t:4"],
        )
        defaults.update(flags)
        self.nodes = {
            i: Node(i, root / f"node-{i}", {**defaults, "node_id": i, "port": free_port()})
            for i in range(nodes)
        }

    def start_all(self) -> Cluster:
        try:
            for node in self.nodes.values():
                node.start(wait=False)
            for node in self.nodes.values():
                node.wait_listening()
            self.wait_brokers()
        except BaseException:
            self.stop_all()  # a fixture that fails here gets no teardown: the nodes would outlive the run
            raise
        return self

    def wait_brokers(self, timeout_s: float = 30.0) -> None:
        """Until every running node's Metadata lists every running node: listening comes before a node's
        registration in ZooKeeper reaches the others' watches, and a CreateTopics with a replication factor
        of the cluster's size is refused (INVALID_REPLICATION_FACTOR) by a node that has not yet seen one."""
        deadline = time.monotonic() + timeout_s
        want = {n.node_id for n in self.running()}
        while True:
            seen = {n.node_id: {b.node_id for b in self.ask(
                MetadataRequest[9](topics=[], allow_auto_topic_creation=False), MetadataResponse, [n]).brokers}
                for n in self.running()}
            if all(s == want for s in seen.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the nodes did not all see each other within {timeout_s}s: {seen}")
            time.sleep(0.1)

    def start(self, node_id: int) -> Node:
        node = self.nodes[node_id]
        node.start()
        return node

    def kill9(self, node_id: int) -> None:
        self.nodes[node_id].kill9()

    def running(self) -> list[Node]:
        """Nodes alive and not paused (a SIGSTOPped node would hold every question until a timeout)."""
        return [n for n in self.nodes.values() if n.running and not n.paused]

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.running:
                try:
                    node.terminate(20.0)
                except Exception:
                    node.kill9()

    # -- questions any node answers --------------------------------------------------------------------

    def ask(self, request: Any, response_cls: Any, nodes: list[Node] | None = None) -> Any:
        """Send `request` to the first running node that answers."""
        last: Exception | None = None
        for node in nodes or self.running():
            try:
                conn = Connection((node.host, node.fixed_port), "cluster-test")
                try:
                    return conn.call(request, response_cls, timeout_s=10.0)
                finally:
                    conn.close()
            except (OSError, ServerClosed, TimeoutError) as e:
                last = e
        raise AssertionError(f"no node answered: {last!r}")

    def find_coordinator(self, group_id: str, nodes: list[Node] | None = None) -> tuple[int, int]:
        """(error code, coordinator node id) as FindCoordinator v3 answers."""
        resp = self.ask(FindCoordinatorRequest[3](key=group_id, key_type=0), FindCoordinatorResponse, nodes)
        return resp.error_code, resp.node_id

    def wait_coordinator(self, group_id: str, timeout_s: float = 30.0,
                         accept: Callable[[int], bool] = lambda n: True) -> Node:
        deadline = time.monotonic() + timeout_s
        last: tuple[int, int] | None = None
        while time.monotonic() < deadline:
            try:
                last = self.find_coordinator(group_id)
            except AssertionError:
                last = None
            if last is not None and last[0] == 0 and accept(last[1]) and self.nodes[last[1]].running:
                return self.nodes[last[1]]
            time.sleep(0.1)
        raise AssertionError(f"no coordinator for {group_id} within {timeout_s}s (last answer {last})")

    def wait_full_isr(self, timeout_s: float = 30.0, what: str = "a node", topic: str = "__consumer_offsets") -> None:
        """Until every partition of `topic` has all its replicas in sync again."""
        deadline = time.monotonic() + timeout_s
        while True:
            parts = [p for t in self.metadata(topic).topics for p in t.partitions]
            if parts and all(len(p.isr_nodes) == len(p.replica_nodes) for p in parts):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not rejoin every ISR within {timeout_s}s: {parts}")
            time.sleep(0.2)

    def topic_state(self, topic: str) -> list[tuple[int, int, int, list[int], list[int]]]:
        """(partition, leader, leader epoch, replicas, ISR) of each of `topic`'s partitions, as a running
        node's Metadata has them: what a failure message shows about a topic's replicas."""
        resp = self.metadata(topic)
        return sorted((p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes))
                      for t in resp.topics for p in t.partitions)

    def log_tails(self, lines: int = 15) -> str:
        """The last log lines of every node, for a failure message."""
        return "\n".join(f"--- node {n.node_id} ({'running' if n.running else 'down'})\n"
                         + "\n".join(n.stderr_lines()[-lines:]) for n in self.nodes.values())

    def metadata(self, topic: str = "__consumer_offsets") -> Any:
        return self.ask(MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False), MetadataResponse)

    # -- offsets, straight to a coordinator ------------------------------------------------------------

    def commit(self, node: Node, group_id: str, offsets: dict[tuple[str, int], int], generation: int = -1,
               member_id: str = "") -> int:
        """OffsetCommit v7 as a simple (member-less) group; returns the first partition's error code, or
        -2 when the node did not answer (killed, stopped, or cut off)."""
        topics: dict[str, list[Any]] = {}
        for (topic, p), offset in offsets.items():
            topics.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
        request = OffsetCommitRequest[7](
            group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
        try:
            conn = Connection((node.host, node.fixed_port), "cluster-test")
            try:
                resp = conn.call(request, OffsetCommitResponse, timeout_s=15.0)
            finally:
                conn.close()
        except (OSError, ServerClosed, TimeoutError):
            return -2
        return int(resp.topics[0].partitions[0].error_code)

    def commit_once_loaded(self, node: Node, group_id: str, offsets: dict[tuple[str, int], int],
                           timeout_s: float = 30.0) -> int:
        """`commit`, sent again while the coordinator answers COORDINATOR_LOAD_IN_PROGRESS (14), as a
        client does: a node that has just become a partition's leader loads its groups first, and on a
        loaded machine that can still be going on when another node already names it the coordinator."""
        deadline = time.monotonic() + timeout_s
        while True:
            error = self.commit(node, group_id, offsets)
            if error != 14 or time.monotonic() > deadline:
                return error
            time.sleep(0.1)

    def committed_via_coordinator(self, group_id: str, timeout_s: float = 30.0,
                                  accept: Callable[[int], bool] = lambda n: True) -> tuple[Node, dict[tuple[str, int], int]]:
        """What a client does: find the coordinator, ask it; on COORDINATOR_LOAD_IN_PROGRESS,
        COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR (the answering node's view may be ahead of the
        coordinator's own) look again, until `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            node = self.wait_coordinator(group_id, max(0.1, deadline - time.monotonic()), accept)
            try:
                error, offsets = self.committed(node, group_id)
            except (OSError, ServerClosed, TimeoutError) as e:
                error, offsets = -2, {}
                last = e
            if error == 0:
                return node, offsets
            last = error
            time.sleep(0.1)
        raise AssertionError(f"{group_id}: no committed offsets from its coordinator in {timeout_s}s ({last})")

    def commit_via_coordinator(self, group_id: str, offsets: dict[tuple[str, int], int], timeout_s: float = 30.0,
                               accept: Callable[[int], bool] = lambda n: True) -> Node:
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            node = self.wait_coordinator(group_id, max(0.1, deadline - time.monotonic()), accept)
            last = self.commit(node, group_id, offsets)
            if last == 0:
                return node
            time.sleep(0.1)
        raise AssertionError(f"{group_id}: commit not acknowledged in {timeout_s}s (last error {last})")

    def committed(self, node: Node, group_id: str) -> tuple[int, dict[tuple[str, int], int]]:
        request = OffsetFetchRequest[7](group_id=group_id, topics=None, require_stable=True)
        conn = Connection((node.host, node.fixed_port), "cluster-test")
        try:
            resp = conn.call(request, OffsetFetchResponse, timeout_s=15.0)
        finally:
            conn.close()
        return resp.error_code, {(t.name, p.partition_index): p.committed_offset
                                 for t in resp.topics for p in t.partitions}
