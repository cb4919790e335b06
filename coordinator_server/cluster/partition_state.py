"""One topic partition's state as ZooKeeper holds it (/brokers/topics/<t>/partitions/<p>/state plus the replica
assignment), with its znode version: what the view delivers and the replica manager applies. A leaf module,
so replication/ can take it without depending on the rest of the cluster room."""
from __future__ import annotations

from dataclasses import dataclass

from coordinator_server.topics.registry import OFFSETS_TOPIC


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    controller_epoch: int
    zk_version: int
    topic: str = OFFSETS_TOPIC
