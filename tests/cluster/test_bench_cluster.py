"""Keeps the cluster benchmark (benchmarks/cluster.py, benchmarks/failover.py) from rotting: the whole
scenario at a tiny scale on a real ZooKeeper and three real nodes, no timing assertions (figures come from
`make bench`, never from tests), only that every part produced a figure from a complete run."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import cluster

pytestmark = pytest.mark.integration


def test_the_cluster_scenario_at_a_tiny_scale(tmp_path: Path) -> None:
    res = cluster.run(tmp_path, groups=30, committers=[2], warmup_s=0.2, duration_s=0.5)

    [commits] = res["commits"]
    for side in ("single", "cluster"):
        assert commits[side]["requests"] > 0 and commits[side]["errors"] == 0, commits[side]
    assert sum(commits["cluster"]["connections_per_node"].values()) == 2

    fo = res["failover"]
    # The killed node coordinated the most groups; each one is Stable again elsewhere with its member.
    assert fo["moved"] == max(fo["groups_per_node"].values()) > 0
    assert fo["described_stable"] == fo["moved"]
    assert fo["victim"] not in fo["new_coordinators"]
    assert fo["others_lost_coordinator"] == 0
    assert 0 < fo["first_s"] <= fo["p50_s"] <= fo["seconds"]
    # The new leaders' load events: one per partition the killed node led.
    assert fo["partitions_moved"] > 0 and fo["partition_load_s_max"] is not None
    assert isinstance(fo["victim_was_controller"], bool)
