"""The cluster's Prometheus series (docs/metrics.md, docs/cluster.md), in the server's one registry.

Kept apart from metrics.py so the replication and controller rooms depend on a small leaf module; every
series here moves on a rare event (a leader change, an ISR change, a partition load), never per request.
"""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from coordinator_server.metrics import REGISTRY

PARTITION_LOADS = Histogram(
    "coordinator_partition_load_seconds",
    "Time to load a __consumer_offsets partition's groups after becoming its leader",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
PARTITION_UNLOADS = Counter(
    "coordinator_partition_unloads",
    "__consumer_offsets partitions whose groups were unloaded (leadership moved or the session was lost)",
    registry=REGISTRY,
)
ISR_SHRINKS = Counter("coordinator_isr_shrinks", "ISR shrinks committed by this node as a leader",
                      registry=REGISTRY)
ISR_EXPANDS = Counter("coordinator_isr_expands", "ISR expansions committed by this node as a leader",
                      registry=REGISTRY)
LEADER_ELECTIONS = Counter("coordinator_leader_elections",
                           "Partition leader elections written by this node as the controller",
                           ["kind"], registry=REGISTRY)
UNDER_REPLICATED = Gauge("coordinator_under_replicated_partitions",
                         "Partitions of the topic this node leads whose ISR is smaller than their replica set",
                         ["topic"], registry=REGISTRY)
LEADER_PARTITIONS = Gauge("coordinator_leader_partitions", "Partitions of the topic this node leads",
                          ["topic"], registry=REGISTRY)
