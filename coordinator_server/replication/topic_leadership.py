"""topics.leadership.Leadership in a cluster: the topic store's partitions answered by this broker's replica
managers, one per topic (docs/cluster.md). Only a partition's leader serves it; consumers read up to the
high watermark; acks=all parks a DelayedProduce until the ISR has the records."""
from __future__ import annotations

from collections.abc import Callable

from coordinator_server.replication.replica_manager import ReplicaManager
from coordinator_server.topics.partition import Partition
from protocol.errors import Errors


class ReplicatedLeadership:
    def __init__(self, managers: dict[str, ReplicaManager]) -> None:
        self._managers = managers  # the cluster node's, kept current as topics come and go

    def read_view(self, part: Partition, current_leader_epoch: int) -> tuple[Errors, int, int]:
        manager = self._managers.get(part.topic)
        if manager is None:
            return Errors.NOT_LEADER_OR_FOLLOWER, -1, -1
        error, view = manager.offsets_view(part.index, current_leader_epoch)
        if view is None:
            return error, -1, -1
        return Errors.NONE, view.high_watermark, view.leader_epoch

    def append_check(self, part: Partition, acks: int) -> tuple[Errors, int]:
        manager = self._managers.get(part.topic)
        if manager is None:
            return Errors.NOT_LEADER_OR_FOLLOWER, -1
        error = manager.append_error(part.index, acks)
        return (error, -1) if error is not None else (Errors.NONE, manager.leader_epoch(part.index))

    def appended(self, part: Partition) -> None:
        manager = self._managers.get(part.topic)
        if manager is not None:
            manager.appended(part.index)

    def await_replicated(self, part: Partition, required_offset: int, timeout_ms: int,
                         on_done: Callable[[Errors], None]) -> None:
        manager = self._managers.get(part.topic)
        if manager is None:
            on_done(Errors.NOT_LEADER_OR_FOLLOWER)
            return
        manager.await_committed(part.index, on_done, required_offset, timeout_ms)

    def epoch_end_offset(self, part: Partition, current_leader_epoch: int, epoch: int) -> tuple[Errors, int, int]:
        manager = self._managers.get(part.topic)
        if manager is None:
            return Errors.NOT_LEADER_OR_FOLLOWER, -1, -1
        return manager.offset_for_leader_epoch(part.index, current_leader_epoch, epoch)
