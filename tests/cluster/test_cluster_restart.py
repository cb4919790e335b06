"""A node restarted right after a kill -9, while ZooKeeper still holds its previous process's session, is
refused (its id is still registered, docs/decisions.md) — and until then it must not have acted on the
partition states it read: they still name it leader at its predecessor's epoch, and a process that is
not registered leads nothing (Kafka's brokers lead only what the controller tells them after registering)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.cluster_support import Cluster

pytestmark = pytest.mark.integration


def test_a_node_refused_registration_never_leads(zk_connect: str, tmp_path: Path) -> None:
    # A long session, so the restart surely comes before ZooKeeper expires the killed process's one.
    cluster = Cluster(zk_connect, tmp_path, zookeeper_session_timeout_ms=15_000).start_all()
    try:
        victim = cluster.commit_via_coordinator("grp", {("t", 0): 5})
        cluster.kill9(victim.node_id)
        first_run = len(victim.events())
        with pytest.raises(RuntimeError, match="registered by another live session"):
            victim.start()
        second_run = [e.get("event") for e in victim.events()[first_run:]]
        assert "startup_failed" in second_run
        assert not {"became_leader", "coordinator_partition_loaded", "became_follower"} & set(second_run), second_run
    finally:
        cluster.stop_all()
