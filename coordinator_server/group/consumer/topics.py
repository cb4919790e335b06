"""What the consumer group core knows of topics: an image it reads, never a store it touches.

The shell provides an object with this shape over the topic store (names, ids, partition counts and a
version that moves whenever any of them changes); the core compares versions to see that a subscribed
topic appeared, grew or went, as Kafka's group coordinator reacts to a new metadata image.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

from .records import TopicMetadata


class TopicsImage(Protocol):
    @property
    def version(self) -> int:
        """Moves whenever a topic is created, deleted or given partitions."""
        ...

    def topic(self, name: str) -> TopicMetadata | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def topic_names(self) -> Iterable[str]: ...


class StaticTopicsImage:
    """A TopicsImage from a dict: the unit tests' topics, and the empty image of a core with no store."""

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self._by_name: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self.version = 0
        for name, partitions in (topics or {}).items():
            self.set_topic(name, partitions)

    def set_topic(self, name: str, partitions: int, topic_id: uuid.UUID | None = None) -> TopicMetadata:
        """Create the topic (a fresh id) or change its partition count."""
        current = self._by_name.get(name)
        tid = topic_id or (current.topic_id if current is not None else uuid.uuid5(uuid.NAMESPACE_OID, name))
        topic = TopicMetadata(tid, name, partitions)
        self._by_name[name] = topic
        self._by_id[tid] = topic
        self.version += 1
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self._by_name.pop(name)
        del self._by_id[topic.topic_id]
        self.version += 1

    def topic(self, name: str) -> TopicMetadata | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def topic_names(self) -> Iterable[str]:
        return self._by_name.keys()
