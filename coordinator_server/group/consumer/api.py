"""What goes into and comes out of the consumer group core, independent of wire versions."""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.errors import Errors

from .records import Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatInput:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None  # None: unchanged
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class ConsumerGroupHeartbeatResult:
    error: Errors
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, the member keeps what it has


HeartbeatCallback = Callable[[ConsumerGroupHeartbeatResult], None]


@dataclass(frozen=True, slots=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]
    member_type: int  # 0 classic, 1 consumer


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    error: Errors
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMember, ...] = field(default_factory=tuple)
