"""Three real nodes on a real ZooKeeper (issue 12): groups spread over the nodes, each coordinated by the
leader of its __consumer_offsets partition; kill -9 of a coordinator moves its groups to another node
within the ZooKeeper session timeout plus the load, and every acknowledged commit is there."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.cluster_support import Cluster

pytestmark = pytest.mark.integration

GROUPS = [f"group-{i}" for i in range(12)]


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path).start_all()
    yield c
    c.stop_all()


def test_groups_spread_and_fail_over_with_every_acknowledged_commit(cluster: Cluster) -> None:
    coordinators = {g: cluster.wait_coordinator(g).node_id for g in GROUPS}
    assert len(set(coordinators.values())) == 3, coordinators  # leaders are spread over the brokers

    md = cluster.metadata()
    assert sorted(b.node_id for b in md.brokers) == [0, 1, 2]
    assert md.controller_id in (0, 1, 2)
    [offsets] = md.topics
    assert offsets.is_internal and len(offsets.partitions) == 6
    assert all(sorted(p.replica_nodes) == [0, 1, 2] and len(p.isr_nodes) >= 2 for p in offsets.partitions)

    acked: dict[str, int] = {}
    for i, g in enumerate(GROUPS):
        node = cluster.nodes[coordinators[g]]
        for n in range(3):
            assert cluster.commit_once_loaded(node, g, {("t", 0): 100 * i + n}) == 0
            acked[g] = 100 * i + n
        # Another node is not the coordinator and says so.
        other = next(x for x in cluster.nodes.values() if x.node_id != node.node_id)
        assert cluster.commit(other, g, {("t", 0): 1}) == 16  # NOT_COORDINATOR

    victim = coordinators[GROUPS[0]]
    killed_at = time.monotonic()
    cluster.kill9(victim)
    moved = {g for g, n in coordinators.items() if n == victim}
    for g in sorted(moved):
        _node, committed = cluster.committed_via_coordinator(g, accept=lambda n: n != victim)
        assert committed[("t", 0)] == acked[g], (g, committed, acked[g])
    failover_s = time.monotonic() - killed_at
    assert failover_s < 20, failover_s
    for g in sorted(set(GROUPS) - moved):  # the other groups never moved
        assert cluster.find_coordinator(g)[1] == coordinators[g]

    # The survivors keep acknowledging (ISR of two >= min.insync.replicas=2), and the killed node comes back
    # as a follower that catches up.
    g = sorted(moved)[0]
    cluster.commit_via_coordinator(g, {("t", 0): 7777}, accept=lambda n: n != victim)
    cluster.start(victim)
    cluster.wait_full_isr(what="the restarted node")
