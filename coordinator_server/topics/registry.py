"""In-memory topic registry: the `--topic` topics, `__consumer_offsets`, and topics auto-created by
Metadata requests. Stands in for the real topic store (a later issue); nothing here survives a restart,
so topic ids are stable only for the life of the process.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator_server.config import TopicSpec

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's Topic.validate: legal characters, at most 249 of them, not "." or "..".
MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Kafka's num.partitions broker default, used for auto-created topics.
DEFAULT_AUTO_CREATE_PARTITIONS = 1


def is_valid_topic_name(name: str) -> bool:
    return (
        0 < len(name) <= MAX_NAME_LENGTH
        and name not in (".", "..")
        and _LEGAL_NAME.fullmatch(name) is not None
    )


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: int
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    is_internal: bool = False


class TopicRegistry:
    def __init__(self, topics: Iterable[TopicSpec], offsets_partitions: int) -> None:
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        # Kafka lists internal topics in Metadata (flagged IsInternal); clients filter them out of
        # pattern subscriptions themselves, so we report the log that stands in for it the same way.
        self._add(Topic(OFFSETS_TOPIC, offsets_partitions, is_internal=True))
        for spec in topics:
            if spec.name not in self._by_name:
                self._add(Topic(spec.name, spec.partitions))

    def _add(self, topic: Topic) -> Topic:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        return topic

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._by_name.values())

    def get_or_create(self, name: str, partitions: int = DEFAULT_AUTO_CREATE_PARTITIONS) -> Topic:
        """Return the topic, creating it if missing. The caller has checked the name is valid."""
        existing = self._by_name.get(name)
        if existing is not None:
            return existing
        if not is_valid_topic_name(name):
            raise ValueError(f"invalid topic name {name!r}")
        return self._add(Topic(name, partitions))
