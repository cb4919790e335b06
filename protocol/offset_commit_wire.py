"""OffsetCommit requests and responses straight from and to bytes: the commit's hot path.

Why this exists next to kafka-python's message classes (docs/decisions.md, "OffsetCommit takes a fast path too"): a consumer
commits after every batch or every few seconds, so after heartbeats OffsetCommit is a coordinator's most
frequent request, and the benchmark profile showed kafka-python's generic decode and encode costing as
much as the core and the log together. The parser takes versions 2-9 in the shapes clients send (no
tagged fields, one-byte compact lengths) and returns None for anything else, which then goes the generic
way with the generic checks. The parsed request has the attribute names of kafka-python's
`OffsetCommitRequest`, so the API layer's rules (protocol/offset_messages.py) read it unchanged.
tests/unit/test_offset_commit_wire.py holds both directions byte for byte against kafka-python's classes
on generated input.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from .framing import read_plain_request
from .value_class import ValueClass
from .wire_primitives import (
    INT32,
    INT64,
    NOT_TAKEN,
    array_length,
    encode_array_length,
    encode_string,
    no_tagged_fields,
    nullable_string,
    string,
)

OFFSET_COMMIT_API_KEY: Final = 8
MIN_VERSION: Final = 2
MAX_VERSION: Final = 9  # keep equal to API_TABLE's OffsetCommit range (a test checks)
FIRST_FLEXIBLE_VERSION: Final = 8

_PARTITION: Final = struct.Struct(">iq")  # partition index, committed offset
_PARTITION_RESULT: Final = struct.Struct(">ih")  # partition index, error code
# The struct methods bound once: a method call on a `Struct` looks the method up on its type each time.
_int32_at: Final = INT32.unpack_from
_int64_at: Final = INT64.unpack_from
_partition_at: Final = _PARTITION.unpack_from
_int32: Final = INT32.pack
_partition_result: Final = _PARTITION_RESULT.pack


class CommitPartitionWire(ValueClass):
    __slots__ = (
        "commit_timestamp", "committed_leader_epoch", "committed_metadata", "committed_offset",
        "partition_index"
    )

    def __init__(
        self, partition_index: int, committed_offset: int, committed_leader_epoch: int,
        committed_metadata: str | None, commit_timestamp: int = -1,
    ) -> None:
        self.partition_index: Final = partition_index
        self.committed_offset: Final = committed_offset
        self.committed_leader_epoch: Final = committed_leader_epoch
        self.committed_metadata: Final = committed_metadata
        self.commit_timestamp: Final = commit_timestamp  # v1 only, which this parser does not take

    def _fields(self) -> tuple[int, int, int, str | None, int]:
        return (
            self.partition_index, self.committed_offset, self.committed_leader_epoch,
            self.committed_metadata, self.commit_timestamp
        )


class CommitTopicWire(ValueClass):
    __slots__ = ("name", "partitions")

    def __init__(self, name: str, partitions: tuple[CommitPartitionWire, ...]) -> None:
        self.name: Final = name
        self.partitions: Final = partitions

    def _fields(self) -> tuple[str, tuple[CommitPartitionWire, ...]]:
        return self.name, self.partitions


class OffsetCommitWire(ValueClass):
    """A ValueClass (protocol/value_class.py), as are its topics and partitions: built per commit."""

    __slots__ = (
        "api_version", "client_id", "correlation_id", "generation_id_or_member_epoch", "group_id",
        "group_instance_id", "member_id", "retention_time_ms", "topics"
    )

    def __init__(
        self, correlation_id: int, client_id: str | None, api_version: int,
        group_id: str, generation_id_or_member_epoch: int, member_id: str, group_instance_id: str | None,
        retention_time_ms: int, topics: tuple[CommitTopicWire, ...],
    ) -> None:
        self.correlation_id: Final = correlation_id
        self.client_id: Final = client_id
        self.api_version: Final = api_version
        self.group_id: Final = group_id
        self.generation_id_or_member_epoch: Final = generation_id_or_member_epoch
        self.member_id: Final = member_id
        self.group_instance_id: Final = group_instance_id
        self.retention_time_ms: Final = retention_time_ms
        self.topics: Final = topics

    def _fields(
        self,
    ) -> tuple[int, str | None, int, str, int, str, str | None, int, tuple[CommitTopicWire, ...]]:
        return (
            self.correlation_id, self.client_id, self.api_version, self.group_id,
            self.generation_id_or_member_epoch, self.member_id, self.group_instance_id,
            self.retention_time_ms, self.topics
        )


def parse_offset_commit(payload: bytes) -> OffsetCommitWire | None:
    """The OffsetCommit request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse(payload)
    except NOT_TAKEN:
        return None


def _parse(payload: bytes) -> OffsetCommitWire | None:
    start = read_plain_request(payload, OFFSET_COMMIT_API_KEY, MIN_VERSION, MAX_VERSION, FIRST_FLEXIBLE_VERSION)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    flexible = version >= FIRST_FLEXIBLE_VERSION
    group_id, pos = string(payload, pos, flexible)
    generation: int = _int32_at(payload, pos)[0]
    member_id, pos = string(payload, pos + 4, flexible)
    instance_id = None
    if version >= 7:
        instance_id, pos = nullable_string(payload, pos, flexible)
    retention = -1
    if version <= 4:
        retention = _int64_at(payload, pos)[0]
        pos += 8
    n_topics, pos = array_length(payload, pos, flexible)
    topics = []
    for _ in range(n_topics):
        name, pos = string(payload, pos, flexible)
        n_partitions, pos = array_length(payload, pos, flexible)
        partitions = []
        for _ in range(n_partitions):
            index, offset = _partition_at(payload, pos)
            pos += 12
            epoch = -1
            if version >= 6:
                epoch = _int32_at(payload, pos)[0]
                pos += 4
            metadata, pos = nullable_string(payload, pos, flexible)
            if flexible:
                pos = no_tagged_fields(payload, pos)
            partitions.append(CommitPartitionWire(index, offset, epoch, metadata))
        if flexible:
            pos = no_tagged_fields(payload, pos)
        topics.append(CommitTopicWire(name, tuple(partitions)))
    if flexible:
        pos = no_tagged_fields(payload, pos)
    if pos != len(payload):
        return None
    return OffsetCommitWire(correlation_id, client_id, version, group_id, generation, member_id, instance_id,
                            retention, tuple(topics))


def offset_commit_response_frame(req: OffsetCommitWire, errors: Mapping[tuple[str, int], int]) -> bytes:
    """The size-prefixed response to `req`, per partition in request order (duplicates answered alike),
    byte for byte what kafka-python encodes (throttle time 0)."""
    version = req.api_version
    flexible = version >= FIRST_FLEXIBLE_VERSION
    parts = [_int32(req.correlation_id)]
    if flexible:
        parts.append(b"\x00")  # response header tagged fields
    if version >= 3:
        parts.append(b"\x00\x00\x00\x00")  # throttle time
    parts.append(encode_array_length(len(req.topics), flexible))
    for topic in req.topics:
        parts.append(encode_string(topic.name, flexible))
        parts.append(encode_array_length(len(topic.partitions), flexible))
        name = topic.name
        for p in topic.partitions:
            parts.append(_partition_result(p.partition_index, errors[(name, p.partition_index)]))
            if flexible:
                parts.append(b"\x00")
        if flexible:
            parts.append(b"\x00")
    if flexible:
        parts.append(b"\x00")
    body = b"".join(parts)
    return _int32(len(body)) + body
