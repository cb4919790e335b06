"""The consumer protocol's subscription bytes (ConsumerProtocolSubscription), read with kafka-python's
schema class. No I/O."""
from __future__ import annotations

from collections.abc import Iterable

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscribed_topics(subscriptions: Iterable[bytes]) -> set[str] | None:
    """The union of the members' subscribed topics, or None when any subscription cannot be parsed —
    then every topic counts as subscribed, as in Kafka (the v0 prefix of any version is read)."""
    topics: set[str] = set()
    for raw in subscriptions:
        try:
            decoded = ConsumerProtocolSubscription.decode(bytes(raw))
        except Exception:  # any malformed bytes: be conservative, as Kafka is
            return None
        topics.update(t for t in decoded.topics if t is not None)
    return topics
