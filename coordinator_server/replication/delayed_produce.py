"""Kafka's DelayedProduce for ``acks=all``: answer once the high watermark passed every partition's append.

Theory of operation
-------------------
The handler appends to each partition's leader log, then parks one DelayedProduce in the "Produce"
purgatory, watched under ``produce_key(topic, partition)`` of each partition it wrote. Per partition it
holds the ``PartitionLeader`` that took the append and the offset after the append's last record
(``required_offset``, Kafka's ``requiredOffset = lastOffset + 1``):

- whenever a partition's HW advances (a follower fetch, a committed ISR shrink) the shell calls
  ``purgatory.check_and_complete(produce_key(...))`` and each waiter asks that leader
  ``check_enough_replicas`` — NONE or NOT_ENOUGH_REPLICAS_AFTER_APPEND once the HW is there;
- when the broker stops leading the partition the shell resigns the leader and calls
  ``fail_partition``: every waiter of it gets NOT_LEADER_OR_FOLLOWER at once. Holding the leader object,
  not looking the partition up, matters: a broker that lost and regained leadership has a new object for
  a new epoch, and the old append may have been truncated meanwhile;
- a partition still waiting at the timeout gets REQUEST_TIMED_OUT (Kafka presets that code on every
  partition whose acks are pending, and ``on_complete`` reports what is set).

``on_complete`` is the only place the answer goes out, once, through ``respond``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from coordinator_server.purgatory import DelayedOperation, DelayedOperationPurgatory
from coordinator_server.replication.leader import PartitionLeader
from protocol.errors import Errors

TopicPartition = tuple[str, int]
ProduceCallback = Callable[[dict[TopicPartition, Errors]], None]


def produce_key(topic: str, partition: int) -> Hashable:
    """The watch key of a partition's acks=all waiters (Kafka's TopicPartitionOperationKey)."""
    return ("produce", topic, partition)


class ProducePartitionStatus:
    """Kafka's ProducePartitionStatus: what one partition waits for and its answer so far."""

    __slots__ = ("acks_pending", "error", "leader", "required_offset")

    def __init__(self, leader: PartitionLeader, required_offset: int) -> None:
        self.leader = leader
        self.required_offset = required_offset
        self.acks_pending = True
        # Preset as Kafka does: whatever is still pending when the timer wins has timed out.
        self.error = Errors.REQUEST_TIMED_OUT


class DelayedProduce(DelayedOperation):
    """Kafka's DelayedProduce: completes when every partition is done, failed, or the timeout passes."""

    __slots__ = ("_respond", "min_insync_replicas", "statuses")

    def __init__(self, delay_ms: int, appends: dict[TopicPartition, tuple[PartitionLeader, int]],
                 min_insync_replicas: int, respond: ProduceCallback) -> None:
        super().__init__(delay_ms)
        self.statuses = {tp: ProducePartitionStatus(leader, required) for tp, (leader, required) in appends.items()}
        self.min_insync_replicas = min_insync_replicas
        self._respond = respond

    def watch_keys(self) -> list[Hashable]:
        return [produce_key(topic, partition) for topic, partition in self.statuses]

    def try_complete(self) -> bool:
        """Kafka's DelayedProduce.tryComplete: check each pending partition; complete when none is left."""
        for status in self.statuses.values():
            if not status.acks_pending:
                continue
            done, error = status.leader.check_enough_replicas(status.required_offset, self.min_insync_replicas)
            if error != Errors.NONE:
                status.acks_pending = False
                status.error = error
            elif done:
                status.acks_pending = False
                status.error = Errors.NONE
        if any(status.acks_pending for status in self.statuses.values()):
            return False
        return self.force_complete()

    def fail_partition(self, tp: TopicPartition, error: Errors) -> bool:
        """Answer ``error`` for one partition (leadership lost); completes the operation if it was the last."""
        status = self.statuses[tp]
        if status.acks_pending and not self.is_completed:
            status.acks_pending = False
            status.error = error
        return self.safe_try_complete()

    def on_complete(self) -> None:
        self._respond({tp: status.error for tp, status in self.statuses.items()})

    def on_expiration(self) -> None:
        pass  # on_complete already answered REQUEST_TIMED_OUT for what was still pending


def fail_partition(purgatory: DelayedOperationPurgatory[DelayedProduce], topic: str, partition: int,
                   error: Errors = Errors.NOT_LEADER_OR_FOLLOWER) -> int:
    """Fail every acks=all waiter of a partition this broker stopped leading; returns how many completed.

    Waiters that also wait on other partitions stay parked (under their other keys and on the timer)
    until those are done."""
    completed = 0
    for operation in purgatory.cancel_for_key(produce_key(topic, partition)):
        if operation.fail_partition((topic, partition), error):
            completed += 1
    return completed
