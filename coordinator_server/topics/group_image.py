"""The topic store as KIP-848 consumer groups see it (`group.consumer.topics.TopicsImage`): names, ids,
partition counts and the store's change counter. __consumer_offsets is not a topic they can subscribe to."""
from __future__ import annotations

import uuid
from collections.abc import Iterable

from coordinator_server.group.consumer.records import TopicMetadata
from coordinator_server.topics.store import TopicStore


class StoreTopicsImage:
    def __init__(self, store: TopicStore) -> None:
        self.store = store

    @property
    def version(self) -> int:
        return self.store.version

    def topic(self, name: str) -> TopicMetadata | None:
        if self.store.partition(name, 0) is None:
            return None
        topic = self.store.get(name)
        return None if topic is None else TopicMetadata(topic.topic_id, topic.name, topic.partitions)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        topic = self.store.get_by_id(topic_id)
        if topic is None or topic.is_internal:
            return None
        return TopicMetadata(topic.topic_id, topic.name, topic.partitions)

    def topic_names(self) -> Iterable[str]:
        return self.store.topic_names()
