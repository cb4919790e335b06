"""Kafka's UUIDs as text: the 16 bytes in URL-safe base64 without padding (22 characters), which is how Kafka
writes topic ids and the member ids its coordinator makes up; and a random one as Kafka draws it."""
from __future__ import annotations

import base64
import uuid


def kafka_uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def random_kafka_uuid() -> uuid.UUID:
    # Kafka's Uuid.randomUuid never returns ids whose string starts with "-" (they read as CLI flags).
    while True:
        u = uuid.uuid4()
        if not kafka_uuid_string(u).startswith("-"):
            return u


def random_kafka_uuid_string() -> str:
    """Kafka's Uuid.randomUuid().toString(): a member id the coordinator makes up for a member of a consumer
    group (KIP-848), or for a classic member joining one."""
    return kafka_uuid_string(random_kafka_uuid())
