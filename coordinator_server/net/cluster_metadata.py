"""What the request handlers need to know about the cluster: the live brokers, the controller, and who
leads each partition of `__consumer_offsets` and of every other topic (so FindCoordinator and Metadata answer
as Kafka's brokers do).

Without one (the embedded default) the handlers answer as the whole cluster: this node controls and
leads everything. In a cluster (docs/cluster.md) the broker's view, kept current by ZooKeeper watches,
implements this protocol.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from coordinator_server.cluster.partition_state import PartitionState


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


class ClusterMetadata(Protocol):
    def brokers(self) -> list[BrokerAddress]:
        """Every live broker."""
        ...

    def controller_id(self) -> int:
        """The controller's node id; -1 while no controller is elected."""
        ...

    def offsets_partition(self, partition: int) -> PartitionState | None:
        """The partition's leadership, or None while `__consumer_offsets` does not exist yet (KIP-115:
        it is created once offsets.topic.replication.factor brokers are alive)."""
        ...

    def topic_partition(self, topic: str, partition: int) -> PartitionState | None:
        """A topic partition's leadership (any topic of the cluster, `__consumer_offsets` included), or None
        while the topic or its state is not known here yet."""
        ...

    def broker(self, node_id: int) -> BrokerAddress | None:
        ...
