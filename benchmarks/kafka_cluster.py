"""Apache Kafka's three-node cluster as the peer of the server's (benchmarks/cluster.py), in the same run, so the
cluster rows can say "x Kafka".

- **Replicated commits**: `cluster.cluster_commits` itself (the same frames, one group per committer, each
  connection to its group's coordinator as FindCoordinator names it, a first commit acknowledged before the
  clock runs) against three KRaft nodes (tests/kafka/cluster.py: RF 3, min ISR 2), at Kafka's defaults (no
  flush: an acknowledged commit is in the page cache of the ISR) and on a second cluster that flushes each
  append before answering it (`log.flush.interval.messages=1`), the durability the server's cluster gives
  (fsync always). The commit topic has one partition at RF 3, as the server's cluster stores its topics.
  `make bench-quick` runs the defaults cluster only.
- **Failover**: `cluster.drive_failover` itself (benchmarks/failover.py's one-member groups, session 45 s)
  on the defaults cluster, after its commits: kill -9 of the node coordinating the most groups, the time
  until every one of them is Stable on its new coordinator. The survivors' logs give each moved partition's
  load time (the coordinator runtime's "Finished loading of metadata from __consumer_offsets-N ... in X ms").

Each load starts after the Kafka peer's JIT warm-up (benchmarks/kafka_peer.py KAFKA_WARMUP_S), unmeasured.
"""
from __future__ import annotations

import re
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tests.kafka.cluster import BROKER_SESSION_MS, NODES, KafkaCluster

from . import cluster, kafka_peer, scenarios

# A moved partition's load, as the new leader's coordinator runtime logs it at info.
LOADED = re.compile(r"Finished loading of metadata from __consumer_offsets-(\d+) with epoch \d+ in (\d+)ms")


def kafka_cluster(work: Path, name: str, settings: dict[str, str] | None = None) -> AbstractContextManager[KafkaCluster]:
    return kafka_peer.owned(KafkaCluster(scenarios._tmpdir(work, name), settings=settings).start())


def commits(kc: KafkaCluster, committers: list[int], warmup_s: float, duration_s: float,
            flush: str) -> list[dict[str, Any]]:
    kafka_peer.create_commit_topic(kc.bootstrap(), NODES)  # until its partition is served, _first_commit retries each group's first commit
    return [cluster.cluster_commits(kc, n, max(warmup_s, kafka_peer.KAFKA_WARMUP_S), duration_s)
            | {"committers": n, "flush": flush} for n in committers]


def failover(kc: KafkaCluster, groups: int) -> dict[str, Any]:
    at_kill: dict[int, int] = {}  # each survivor's log size when the victim was killed

    def kill9(victim: int) -> None:
        at_kill.update({i: n.log_path.stat().st_size for i, n in kc.nodes.items() if i != victim})
        kc.kill9(victim)

    result, _ = cluster.drive_failover(kc.bootstrap(), groups, kc.quorum_leader, kill9)
    loads = []
    for i, offset in at_kill.items():
        with open(kc.nodes[i].log_path, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        loads += [{"node": i, "partition": int(m[1]), "seconds": int(m[2]) / 1000} for m in LOADED.finditer(text)]
    load_s = sorted(e["seconds"] for e in loads)
    result.update(broker_session_timeout_ms=BROKER_SESSION_MS, partitions_moved=len(loads),
                  partition_load_s_max=load_s[-1] if load_s else None,
                  partition_load_s_median=statistics.median(load_s) if load_s else None, partition_loads=loads)
    return result


def run(scale: scenarios.Scale, work: Path) -> dict[str, Any]:
    """Kafka's cluster rows: commits and the failover on a cluster at Kafka's defaults, then commits on one
    that flushes each write."""
    res: dict[str, Any] = {"version": kafka_peer.version(), "nodes": NODES, "replication_factor": NODES,
                           "min_insync_replicas": 2, "commits": [], "failover": None, "errors": []}

    def part(name: str, fn: Callable[[], Any], empty: Any) -> Any:
        # Three JVMs and a thousand members: when one part fails, the run keeps every other figure, and the
        # results say what failed.
        try:
            return fn()
        except Exception as e:
            print(f"[bench] kafka-cluster {name} failed: {e!r}"[:2000], file=sys.stderr, flush=True)
            res["errors"].append({"part": name, "error": repr(e)[-2000:]})
            return empty

    def defaults() -> None:
        with kafka_cluster(work, "kafka-cluster-defaults") as kc:
            res["start_s"] = kc.started_s
            res["commits"] += part("commits", lambda: commits(kc, scale.cluster_committers, scale.commit_warmup_s,
                                                              scale.commit_duration_s, "never"), [])
            res["failover"] = part("failover", lambda: failover(kc, scale.cluster_groups), None)

    def flushed() -> None:
        with kafka_cluster(work, "kafka-cluster-flush", kafka_peer.FLUSH_EACH_WRITE) as kc:
            res["commits"] += part("commits, flush each write",
                                   lambda: commits(kc, scale.cluster_committers, scale.commit_warmup_s,
                                                   scale.commit_duration_s, "always"), [])

    began = time.monotonic()
    part("cluster at Kafka's defaults", defaults, None)
    # A second cluster is another three JVM starts (20-30 s on 2 cores): `make bench-quick` keeps to the one
    # at Kafka's defaults, so its rows pair the server's fsync with Kafka's page cache only.
    if not scale.quick:
        part("cluster flushing each write", flushed, None)
    res["seconds"] = round(time.monotonic() - began, 1)
    return res
