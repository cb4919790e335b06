"""This broker's copies of a topic's partitions, as the replica manager (replica_manager.LocalReplicas) and
its `Roles` need them: `__consumer_offsets` is the coordinator log's and its leadership is the group
coordinator's; every other topic is the topic store's, and its leadership only wakes parked consumer fetches.

Both write through their log's group-commit writer (storage.group_commit), so a follower's appends and
truncations never interleave with a round's fsync, and a follower's copy is durable (per --fsync) before
its next fetch tells the leader it has it: the copy counts toward acks=all.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.storage.coordinator_log import CoordinatorLog
from coordinator_server.storage.group_commit import GroupCommitWriter
from coordinator_server.storage.log import PartitionLog, partition_dir
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.partition import Partition
from coordinator_server.topics.store import TopicStore


class OffsetsReplicas:
    """`__consumer_offsets` on this broker: the coordinator log's partitions."""

    def __init__(self, log: CoordinatorLog) -> None:
        self._log = log

    def log(self, partition: int) -> PartitionLog:
        return self._log.partition_log(partition)

    def directory(self, partition: int) -> Path:
        return partition_dir(Path(self._log.data_dir), partition)

    async def truncate(self, partition: int, offset: int) -> None:
        await self._log.truncate(partition, offset)

    async def append_as_follower(self, partition: int, batches: list[bytes]) -> list[tuple[int, int]]:
        return await self._log.append_as_follower(partition, batches)


class GroupLoading(Protocol):
    def load_partition(self, partition: int, leader_epoch: int) -> bool: ...
    def unload_partition(self, partition: int, leader_epoch: int | None, reason: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Election:
    """A leadership change of one `__consumer_offsets` partition here: led at `leader_epoch` (`reason`
    None), or no longer (`leader_epoch` the new leader's, None when this broker lost its session)."""

    partition: int
    leader_epoch: int | None
    reason: str | None = None


class CoordinatorElections:
    """`Roles` of `__consumer_offsets`: leading a partition is coordinating its groups. The replica manager
    is built before the group coordinator, whose appends it replicates, so it does not call the coordinator:
    it records each change here, and the cluster node, which hands it every partition state, hands the
    changes on (`deliver`) once the manager has applied one — as Kafka's metadata publisher tells the group
    coordinator of elections and resignations after the replica manager applied them."""

    def __init__(self) -> None:
        self._changes: list[Election] = []

    def load_partition(self, partition: int, leader_epoch: int) -> None:
        self._changes.append(Election(partition, leader_epoch))

    def unload_partition(self, partition: int, leader_epoch: int | None, reason: str) -> None:
        self._changes.append(Election(partition, leader_epoch, reason))

    def high_watermark_moved(self, partition: int) -> None:
        pass  # the coordinator's own appends wait in the Produce purgatory, which the manager checks

    def deliver(self, coordinator: GroupLoading) -> None:
        """Tell `coordinator`, in order, of what changed since the last delivery."""
        changes, self._changes = self._changes, []
        for change in changes:
            if change.reason is None:
                assert change.leader_epoch is not None
                coordinator.load_partition(change.partition, change.leader_epoch)
            else:
                coordinator.unload_partition(change.partition, change.leader_epoch, change.reason)


class TopicReplicas:
    """One topic of the topic store on this broker. The store keeps every partition of a topic the cluster
    has (a broker that is not a replica of one keeps it empty), so group coordinators accept commits for any
    topic the cluster knows."""

    def __init__(self, store: TopicStore, topic: str, writer: GroupCommitWriter) -> None:
        self._store = store
        self._topic = topic
        self._writer = writer

    def _partition(self, partition: int) -> Partition:
        part = self._store.partition(self._topic, partition)
        if part is None:
            raise KeyError(f"{self._topic}-{partition} is not in the topic store")
        return part

    def log(self, partition: int) -> PartitionLog:
        return self._partition(partition).log

    def directory(self, partition: int) -> Path:
        return self._partition(partition).log.directory

    async def truncate(self, partition: int, offset: int) -> None:
        part = self._partition(partition)
        await self._writer.truncate(part.target, offset)
        part.rebuild_producer_state()

    async def append_as_follower(self, partition: int, batches: list[bytes]) -> list[tuple[int, int]]:
        part = self._partition(partition)
        written: list[tuple[int, int]] = []

        def write() -> tuple[int, int]:
            base = part.log.next_offset
            written.extend(part.write_as_follower(batches))
            return base, part.log.next_offset - 1

        await self._writer.write_durably(part.target, write)
        return written


class FetchWakeups:
    """Leadership of a data topic's partition: consumer fetches parked in the "Fetch" purgatory answer
    when its high watermark moves (new records are visible) or when this broker stops leading it."""

    def __init__(self, topic: str, fetch_purgatory: DelayedOperationPurgatory[DelayedFetch]) -> None:
        self._topic = topic
        self._purgatory = fetch_purgatory

    def load_partition(self, partition: int, leader_epoch: int) -> None:
        self._purgatory.check_and_complete((self._topic, partition))

    def unload_partition(self, partition: int, leader_epoch: int | None, reason: str) -> None:
        self._purgatory.check_and_complete((self._topic, partition))

    def high_watermark_moved(self, partition: int) -> None:
        self._purgatory.check_and_complete((self._topic, partition))
