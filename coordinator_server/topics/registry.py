"""What Metadata reports about a topic, and Kafka's topic-name rules. The topics themselves live in
`coordinator_server.topics.store`."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's log: its partitions live in the data directory beside the topics'.
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's Topic.validate: legal characters, at most 249 of them, not "." or "..".
MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


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
