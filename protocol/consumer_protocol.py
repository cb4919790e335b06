"""The consumer protocol's subscription and assignment bytes (ConsumerProtocolSubscription and
ConsumerProtocolAssignment), read and written with kafka-python's schema classes. No I/O."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

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


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's ConsumerProtocolSubscription, as KIP-848's migration reads it."""

    version: int
    topics: tuple[str, ...]
    owned_partitions: dict[str, tuple[int, ...]]
    rack_id: str | None


class MalformedConsumerProtocol(ValueError):
    """Subscription or assignment bytes that do not decode (or would lose a custom assignor's user data)."""


def decode_subscription(raw: bytes) -> Subscription:
    try:
        decoded = ConsumerProtocolSubscription.decode(bytes(raw))
    except Exception as e:  # kafka-python raises assorted errors on bad bytes
        raise MalformedConsumerProtocol(f"the subscription does not decode: {e}") from e
    owned: dict[str, tuple[int, ...]] = {}
    for tp in getattr(decoded, "owned_partitions", None) or ():
        owned[tp.topic] = (*owned.get(tp.topic, ()), *tp.partitions)
    return Subscription(decoded.version, tuple(t for t in decoded.topics if t is not None), owned,
                        getattr(decoded, "rack_id", None))


def decode_assignment(raw: bytes) -> dict[str, tuple[int, ...]]:
    """The partitions of a ConsumerProtocolAssignment; user data would be lost, so it is refused."""
    try:
        decoded = ConsumerProtocolAssignment.decode(bytes(raw))
    except Exception as e:
        raise MalformedConsumerProtocol(f"the assignment does not decode: {e}") from e
    if decoded.user_data:
        raise MalformedConsumerProtocol("userData from a custom assignor would be lost")
    out: dict[str, tuple[int, ...]] = {}
    for tp in decoded.assigned_partitions or ():
        out[tp.topic] = (*out.get(tp.topic, ()), *tp.partitions)
    return out


def encode_assignment(partitions: dict[str, tuple[int, ...]], version: int) -> bytes:
    """A ConsumerProtocolAssignment at the version the member's subscription was written in (Kafka's rule),
    capped at the newest one known."""
    version = max(0, min(version, ConsumerProtocolAssignment.max_version))
    topic_partition = ConsumerProtocolAssignment.TopicPartition
    message = ConsumerProtocolAssignment(
        version=version, user_data=None,
        assigned_partitions=[topic_partition(topic=t, partitions=sorted(p)) for t, p in sorted(partitions.items())])
    return bytes(message.encode(version=version))
