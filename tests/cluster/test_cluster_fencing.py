"""A leader that has been replaced acknowledges nothing (issue 12): SIGSTOP the coordinator of a group past its
ZooKeeper session, let another node take over, SIGCONT it, and every commit sent to it afterwards is refused;
what its successor acknowledged is what the group has. And a rolling restart with SIGTERM (controlled
shutdown) moves every partition away before each node stops: every acknowledged commit stays, and groups of
members (heartbeating and committing as a client library does) do not rebalance for it more than once."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster_support import Cluster
from tests.integration.group_client import (
    ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupMember,
    ServerClosed,
)

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
    cluster.wait_full_isr(what="the resumed node")
    assert cluster.find_coordinator(group, survivors)[1] == new.node_id


def _partitions(cluster: Cluster) -> list[Any]:
    return list(cluster.metadata().topics[0].partitions)


class _Member:
    """One group member as a client library runs it, over the raw protocol (kafka-python's message classes):
    join and sync, then heartbeat and commit its position every 200 ms; on NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE or a dropped connection it finds the coordinator again and carries on with the
    same member id and generation; only an answer that says the group rebalanced makes it join again. It
    records each generation it was assigned in and each acknowledged commit. (The per-node topic store makes
    a consumer library's fetches wander between nodes' copies of the topic, which is beside the point here.)"""

    def __init__(self, cluster: Cluster, group: str) -> None:
        self.cluster = cluster
        self.group = group
        self.generations: list[int] = []
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        member: GroupMember | None = None
        member_id, generation, n = "", -1, 0
        while not self.stop.is_set():
            try:
                node = self.cluster.wait_coordinator(self.group, timeout_s=30)
                member = GroupMember(node, self.group, "rolling-member", session_timeout_ms=10_000)
                member.member_id, member.generation_id = member_id, generation
                if generation < 0:
                    join = member.join()
                    if join.error_code != 0:
                        raise _Retry(f"join {join.error_code}")
                    sync = member.sync({member.member_id: b"all"})
                    if sync.error_code != 0:
                        raise _Retry(f"sync {sync.error_code}")
                    member_id, generation = member.member_id, member.generation_id
                    self.generations.append(generation)
                while not self.stop.is_set():
                    error = member.heartbeat()
                    if error in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
                        generation = -1  # the group rebalanced: join again
                        if error == UNKNOWN_MEMBER_ID:
                            member_id = ""
                        raise _Retry(f"heartbeat {error}")
                    if error != 0:
                        raise _Retry(f"heartbeat {error}")
                    n += 1
                    if self.cluster.commit(node, self.group, {("t", 0): n}, generation=generation,
                                           member_id=member_id) == 0:
                        self.acked.append(n)
                    time.sleep(0.2)
            except (_Retry, ServerClosed, OSError, TimeoutError, AssertionError) as e:
                self.errors.append(repr(e))
                time.sleep(0.1)
            finally:
                if member is not None:
                    member.close()
                    member = None


class _Retry(Exception):
    pass


def test_a_rolling_restart_keeps_every_acknowledged_commit_and_rebalances_at_most_once(cluster: Cluster) -> None:
    members = [_Member(cluster, f"rolling-{i}") for i in range(3)]
    try:
        deadline = time.monotonic() + 30
        while not all(m.acked for m in members):
            assert time.monotonic() < deadline, [m.errors[-3:] for m in members]
            time.sleep(0.1)
        for node in list(cluster.nodes.values()):
            assert node.terminate(45.0) == 0  # SIGTERM: controlled shutdown first (at most 15 s), then close
            assert not any(e["event"] == "controlled_shutdown_gave_up" for e in node.events())
            node.start()
            deadline = time.monotonic() + 30
            while not all(len(p.isr_nodes) == 3 for p in _partitions(cluster)):
                parts = _partitions(cluster)
                assert time.monotonic() < deadline, (
                    f"node {node.node_id} did not rejoin every ISR: {parts}\n" + "\n".join(
                        f"{n.node_id} {e}" for n in cluster.nodes.values() for e in n.events()
                        if "isr" in e["event"] or e["event"] in ("became_leader", "became_follower", "replica_truncated")
                        or e.get("level") == "error")[-60:])
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
