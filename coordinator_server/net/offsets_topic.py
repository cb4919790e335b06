"""`__consumer_offsets` served as a topic to clients, as a Kafka broker serves it: what lag monitors that
read the coordinator's records themselves (Burrow, kcat with a decoder) need.

- Metadata lists it among all topics with `is_internal` set (the topic store's `Topic`); clients leave it
  out of their subscriptions themselves unless told otherwise (`exclude.internal.topics=false`).
- A consumer's Fetch, ListOffsets and OffsetForLeaderEpoch read the coordinator's own log through a
  read-only `Partition` view of each `__consumer_offsets-N` log (`OffsetsTopic.partition`), so the data
  handlers serve it like any topic: the leadership rules (on one node everything, in a cluster only the
  partition's leader, up to its high watermark), the KIP-74 limits, the long poll. An append by the
  coordinator wakes the long polls waiting on that partition (`OffsetsLongPolls.on_append`).
- ACLs are Kafka's topic ACLs and nothing more: READ on the topic to fetch it, DESCRIBE to list it or its
  offsets. Anyone granted READ on `__consumer_offsets` reads every group's commits, as on Kafka.
- Produce is refused: after the WRITE check (TOPIC_AUTHORIZATION_FAILED), INVALID_TOPIC_EXCEPTION, as
  Kafka's ReplicaManager refuses a client's append to an internal topic. Only the coordinator writes it.
"""
from __future__ import annotations

from collections.abc import Callable

from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.storage.log import PartitionLog
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.partition import Partition
from coordinator_server.topics.registry import OFFSETS_TOPIC
from protocol.errors import Errors

# Kafka's ReplicaManager.appendToLocalLog: "Cannot append to internal topic".
PRODUCE_REFUSAL = Errors.INVALID_TOPIC_EXCEPTION
PRODUCE_REFUSAL_MESSAGE = f"Cannot append to internal topic {OFFSETS_TOPIC}"


class OffsetsTopic:
    """Read-only views of the coordinator log's partitions, for the data handlers' consumer paths."""

    def __init__(self, partition_log: Callable[[int], PartitionLog], partitions: int) -> None:
        self._partition_log = partition_log  # CoordinatorLog.partition_log
        self._partitions = partitions
        self._views: dict[int, Partition] = {}

    def partition(self, index: int) -> Partition | None:
        """A view of `__consumer_offsets-index` (never written through: Produce is refused before), or None
        for a partition the topic does not have."""
        if not 0 <= index < self._partitions:
            return None
        plog = self._partition_log(index)
        view = self._views.get(index)
        if view is None or view.log is not plog:
            view = self._views[index] = Partition(OFFSETS_TOPIC, index, plog)
        return view


class OffsetsLongPolls:
    """The runtime's append listener (`runtime.appends.AppendListener`), built before the runtime on the
    "Fetch" purgatory: every coordinator append to `__consumer_offsets-N` retries the long polls parked
    on it. It runs on every commit, so it only says whether any completed; the runtime then re-arms its
    loop timer (with none completed the shared wheel is as it was)."""

    def __init__(self, fetch_purgatory: DelayedOperationPurgatory[DelayedFetch]) -> None:
        self._purgatory = fetch_purgatory

    def on_append(self, partition: int) -> bool:
        return self._purgatory.check_and_complete((OFFSETS_TOPIC, partition)) > 0


def produce_refusal(topic: str) -> tuple[Errors, str] | None:
    """The answer to a client's Produce to `topic` when it is an internal topic (after authorization)."""
    return (PRODUCE_REFUSAL, PRODUCE_REFUSAL_MESSAGE) if topic == OFFSETS_TOPIC else None
