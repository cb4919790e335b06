"""A leader that has been replaced acknowledges nothing (issue 12): SIGSTOP the coordinator of a group past its
ZooKeeper session, let another node take over, SIGCONT it, and every commit sent to it afterwards is refused;
what its successor acknowledged is what the group has. And a rolling restart with SIGTERM (controlled
shutdown) moves every partition away before each node stops: every acknowledged commit stays, and groups of
real kafka-python consumers do not rebalance for it more than once."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.cluster.cluster_support import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path).start_all()
    yield c
    for node in c.nodes.values():
        if node.running:
            node.sigcont()
    c.stop_all()


def test_a_paused_leader_acknowledges_nothing_after_it_was_replaced(cluster: Cluster) -> None:
    group = "paused-leader-group"
    old = cluster.commit_via_coordinator(group, {("t", 0): 10})
    cluster.nodes[old.node_id].sigstop()
    survivors = [n for n in cluster.nodes.values() if n.node_id != old.node_id]
    new = cluster.commit_via_coordinator(group, {("t", 0): 20}, accept=lambda n: n != old.node_id)
    assert new.node_id != old.node_id
    # The successor leads at a newer epoch; the old leader wakes up knowing nothing of it yet.
    cluster.nodes[old.node_id].sigcont()
    answers = []
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        answers.append(cluster.commit(old, group, {("t", 0): 30 + len(answers)}))
    assert answers and all(a != 0 for a in answers), answers  # refused (or unanswered), never acknowledged
    _node, committed = cluster.committed_via_coordinator(group, accept=lambda n: n != old.node_id)
    assert committed[("t", 0)] == 20
    # And the old leader comes back as a follower of the new epoch: its copy agrees again.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = cluster.metadata().topics[0].partitions
        if all(len(p.isr_nodes) == 3 for p in parts):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the resumed node did not rejoin every ISR: {parts}")
    assert cluster.find_coordinator(group, survivors)[1] == new.node_id


class _Member:
    """A kafka-python consumer in a thread: polls, commits its position now and then, and records every
    generation it was assigned in and every commit that was acknowledged."""

    def __init__(self, cluster: Cluster, group: str) -> None:
        self.group = group
        self.bootstrap = [f"127.0.0.1:{n.fixed_port}" for n in cluster.nodes.values()]
        self.generations: list[int] = []
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._consume()
        except Exception as e:  # reported by the test's assertions, not as a thread warning
            self.errors.append(repr(e))

    def _consume(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                                 session_timeout_ms=10_000, heartbeat_interval_ms=500, request_timeout_ms=20_000)
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                pass

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.generations.append(consumer._coordinator._generation.generation_id)

        consumer.subscribe(["t"], listener=Listener())
        n = 0
        self.generations.clear()
        try:
            while not self.stop.is_set():
                consumer.poll(timeout_ms=200)
                if consumer.assignment():
                    n += 1
                    try:
                        consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(n, "", -1)})
                        self.acked.append(n)
                    except Exception as e:  # a commit during a coordinator move fails: retried next round
                        self.errors.append(repr(e))
                time.sleep(0.05)
        finally:
            consumer.close(autocommit=False)


def test_a_rolling_restart_keeps_every_acknowledged_commit_and_rebalances_at_most_once(cluster: Cluster) -> None:
    members = [_Member(cluster, f"rolling-{i}") for i in range(3)]
    try:
        deadline = time.monotonic() + 30
        while not all(m.acked for m in members):
            assert time.monotonic() < deadline, [m.errors[-3:] for m in members]
            time.sleep(0.1)
        for node in list(cluster.nodes.values()):
            assert node.terminate(30.0) == 0  # SIGTERM: controlled shutdown first
            assert not any(e["event"] == "controlled_shutdown_gave_up" for e in node.events())
            node.start()
            deadline = time.monotonic() + 30
            while not all(len(p.isr_nodes) == 3 for p in cluster.metadata().topics[0].partitions):
                assert time.monotonic() < deadline, "the restarted node did not rejoin every ISR"
                time.sleep(0.2)
        time.sleep(2)  # a last round of commits on the final leaders
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.thread.join(30)
    for m in members:
        _node, committed = cluster.committed_via_coordinator(m.group)
        assert committed[("t", 0)] == m.acked[-1], (m.group, committed, m.acked[-3:])
        # One assignment at the start; a coordinator move reloads the group Stable, so at most one more.
        assert len(m.generations) <= 2, (m.group, m.generations)
