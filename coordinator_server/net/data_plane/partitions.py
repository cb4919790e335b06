"""What the data handlers share: the partitions a consumer may read, and the slice of the runtime that
parks and wakes long polls."""
from __future__ import annotations

from typing import Protocol

from coordinator_server.net.offsets_topic import OffsetsTopic
from coordinator_server.purgatory import Timer
from coordinator_server.topics.partition import Partition
from coordinator_server.topics.registry import OFFSETS_TOPIC
from coordinator_server.topics.store import TopicStore


class TimerHost(Protocol):
    """The slice of the runtime a purgatory needs: the shared timing wheel and its loop timer."""

    @property
    def timer(self) -> Timer: ...
    def now_ms(self) -> int: ...
    def rearm_timer(self) -> None: ...


class ReadablePartitions:
    """The partitions Fetch, ListOffsets and OffsetForLeaderEpoch serve: the topic store's, and
    `__consumer_offsets` read through views of the coordinator's log (net/offsets_topic.py)."""

    def __init__(self, store: TopicStore, offsets_topic: OffsetsTopic) -> None:
        self._store = store
        self._offsets_topic = offsets_topic

    def partition(self, topic: str, index: int) -> Partition | None:
        if topic == OFFSETS_TOPIC:
            return self._offsets_topic.partition(index)
        return self._store.partition(topic, index)
