"""Who may read and write a topic partition here, and when an append counts as acknowledged: the data
handlers ask this for every Produce, Fetch, ListOffsets and OffsetForLeaderEpoch partition.

On one node (`SoleLeader`) this node has led every partition since it was created, at leader epoch 0: the
high watermark is the log end and an append is acknowledged once durable here. In a cluster the broker's
replica managers answer (cluster_node.ReplicatedLeadership, docs/cluster.md): only the partition's leader
serves it, consumers read up to the high watermark, and acks=all waits for the ISR.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from coordinator_server.topics.partition import Partition
from protocol.errors import Errors

SOLE_LEADER_EPOCH = 0


class Leadership(Protocol):
    def read_view(self, part: Partition, current_leader_epoch: int) -> tuple[Errors, int, int]:
        """(error, high watermark, leader epoch) for a consumer's read; the error is NOT_LEADER_OR_FOLLOWER
        off the leader, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the caller's epoch is older / newer."""
        ...

    def append_check(self, part: Partition, acks: int) -> tuple[Errors, int]:
        """(error, leader epoch to stamp the batch with): NOT_LEADER_OR_FOLLOWER off the leader,
        NOT_ENOUGH_REPLICAS for acks=all with the ISR below min.insync.replicas."""
        ...

    def appended(self, part: Partition) -> None:
        """Records were written as leader (followers' parked fetches may go)."""
        ...

    def await_replicated(self, part: Partition, required_offset: int, timeout_ms: int,
                         on_done: Callable[[Errors], None]) -> None:
        """acks=all: `on_done` once the high watermark reaches `required_offset`, or with the error."""
        ...

    def epoch_end_offset(self, part: Partition, current_leader_epoch: int, epoch: int) -> tuple[Errors, int, int]:
        """OffsetForLeaderEpoch: (error, the epoch found, its end offset)."""
        ...


class SoleLeader:
    """One node: it leads everything, and its log end is committed."""

    def read_view(self, part: Partition, current_leader_epoch: int) -> tuple[Errors, int, int]:
        if current_leader_epoch > SOLE_LEADER_EPOCH:
            return Errors.UNKNOWN_LEADER_EPOCH, -1, -1
        return Errors.NONE, part.log_end_offset, SOLE_LEADER_EPOCH

    def append_check(self, part: Partition, acks: int) -> tuple[Errors, int]:
        return Errors.NONE, SOLE_LEADER_EPOCH

    def appended(self, part: Partition) -> None:
        pass

    def await_replicated(self, part: Partition, required_offset: int, timeout_ms: int,
                         on_done: Callable[[Errors], None]) -> None:
        on_done(Errors.NONE)

    def epoch_end_offset(self, part: Partition, current_leader_epoch: int, epoch: int) -> tuple[Errors, int, int]:
        if current_leader_epoch > SOLE_LEADER_EPOCH:
            return Errors.UNKNOWN_LEADER_EPOCH, -1, -1
        if epoch == SOLE_LEADER_EPOCH:
            return Errors.NONE, SOLE_LEADER_EPOCH, part.log_end_offset
        # An epoch this partition never had: Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
        return Errors.NONE, -1, -1
