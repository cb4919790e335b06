"""OffsetCommit (api key 8), v1-9: the commit's hot path, parsed and answered from bytes.

Versions (Kafka's OffsetCommitRequest/Response specs): v1 has a commit timestamp per partition, v2-4 a
retention time instead, v3 adds the response's throttle time, v6 the committed leader epoch, v7 the group
instance id (KIP-345), v8 is flexible, v9 takes a KIP-848 member epoch in the generation's place. v0 (offsets
kept in ZooKeeper) is not served.

Why by hand (docs/decisions.md, "OffsetCommit takes a fast path too"): after heartbeats OffsetCommit is a
coordinator's most frequent request, and kafka-python's generic decode and encode cost as much as the core
and the log together. The parser takes v2-9 in the shapes clients send (no tagged fields, one-byte compact
lengths); anything else (v1, a tagged field, a long name) is decoded by the generic path
(`net/request_decode.py`) into the same `OffsetCommitWire`. From there one way: the API layer's rules as
Kafka's KafkaApis has them (READ on the group, then on each topic; partitions of unknown topics answered
UNKNOWN_TOPIC_OR_PARTITION without the coordinator; nothing left, answered at once with no group validation),
the runtime (queued behind the group's lock when it is taken, answered once the log has the commit), and the
hand encoder, which covers every served version. tests/unit/test_api_offset_commit.py holds both directions
byte for byte against kafka-python's classes on generated input.
"""
from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from coordinator_server import metrics
from coordinator_server.group.api import (
    CommitPartition,
    OffsetCommitInput,
    OffsetCommitResult,
    PartitionResult,
)
from coordinator_server.net.request_decode import decode_request
from protocol.errors import Errors
from protocol.framing import read_plain_request
from protocol.value_class import ValueClass
from protocol.wire_primitives import (
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

from .context import ApiContext

OFFSET_COMMIT_API_KEY: Final = 8
MIN_VERSION: Final = 2  # of the parser; v1 is decoded by the generic path
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
# C statics for the clock and metrics (a module attribute is a dictionary lookup per use).
_perf_counter: Final = time.perf_counter
_observe_request_errors: Final = metrics.observe_request_errors

PartitionExists = Callable[[str, int], bool]


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
        self.commit_timestamp: Final = commit_timestamp  # v1 only, which the parser does not take

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


# -- the one way --------------------------------------------------------------------------------------------

def serve(payload: bytes, api: ApiContext) -> asyncio.Future[bytes]:
    """The framed answer through a future: done at once when nothing waits for the log."""
    req = parse_offset_commit(payload)
    if req is None:
        req = _decoded(payload, api)
    api.note_client_id(req.client_id)
    access = api.access
    reply = _CommitReply(req, asyncio.get_running_loop().create_future())
    if not access.group("READ", req.group_id):
        reply.answer([PartitionResult(t.name, p.partition_index, Errors.GROUP_AUTHORIZATION_FAILED)
                      for t in req.topics for p in t.partitions])
        return reply.future
    if access.authorizer is None:  # no ACLs: every topic readable, no per-topic filter to build
        inp, reply.unknown = offset_commit_input(req, api.partition_exists)
    else:
        denied = {t.name for t in req.topics if not access.topic("READ", t.name)}
        inp, unknown = offset_commit_input(req, _Readable(denied, api.partition_exists).known)
        reply.unknown = [PartitionResult(r.topic, r.partition, Errors.TOPIC_AUTHORIZATION_FAILED)
                         if r.topic in denied else r for r in unknown]
    if not inp.partitions:
        reply.answer(reply.unknown)
    else:
        api.runtime.offset_commit(inp, reply.result, reply.failed)
    return reply.future


class _Readable:
    """The `known` filter that leaves the topics the caller may not READ to the API layer (answered 29)."""

    __slots__ = ("denied", "exists")

    def __init__(self, denied: set[str], exists: PartitionExists) -> None:
        self.denied, self.exists = denied, exists

    def known(self, topic: str, index: int) -> bool:
        return topic not in self.denied and self.exists(topic, index)


def _decoded(payload: bytes, api: ApiContext) -> OffsetCommitWire:
    header, req = decode_request(payload, api.note_client_id)
    return request_of(req, header.api_version, header.correlation_id, header.client_id)


def request_of(req: Any, version: int, correlation_id: int = -1, client_id: str | None = None) -> OffsetCommitWire:
    """kafka-python's decoded request as the value the parser builds, each field as that version carries it."""
    return OffsetCommitWire(
        correlation_id, client_id, version, req.group_id, req.generation_id_or_member_epoch, req.member_id or "",
        req.group_instance_id if version >= 7 else None,
        req.retention_time_ms if 2 <= version <= 4 else -1,
        tuple(CommitTopicWire(t.name, tuple(
            CommitPartitionWire(p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata,
                                p.commit_timestamp if version == 1 else -1)
            for p in t.partitions)) for t in req.topics))


def offset_commit_input(req: OffsetCommitWire, known: PartitionExists) -> tuple[OffsetCommitInput, list[PartitionResult]]:
    """The coordinator's input (known partitions only) and the API layer's own answers for the rest."""
    partitions: list[CommitPartition] = []
    unknown: list[PartitionResult] = []
    for topic in req.topics:
        for p in topic.partitions:
            if not known(topic.name, p.partition_index):
                unknown.append(PartitionResult(topic.name, p.partition_index, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions.append(CommitPartition(topic.name, p.partition_index, p.committed_offset,
                                              p.committed_leader_epoch, p.committed_metadata, p.commit_timestamp))
    inp = OffsetCommitInput(
        group_id=req.group_id,
        generation_id=req.generation_id_or_member_epoch,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        retention_time_ms=req.retention_time_ms,
        partitions=tuple(partitions),
        api_version=req.api_version,
    )
    return inp, unknown


class _CommitReply:
    """One OffsetCommit's answer: the framed response once the coordinator's result is in (one object instead
    of a closure per step: this runs per request)."""

    __slots__ = ("future", "req", "started", "unknown")

    def __init__(self, req: OffsetCommitWire, future: asyncio.Future[bytes]) -> None:
        self.req = req
        self.future = future
        self.started = _perf_counter()
        self.unknown: list[PartitionResult] = []

    def result(self, result: OffsetCommitResult) -> None:
        self.answer(result.partitions + self.unknown)

    def answer(self, results: list[PartitionResult]) -> None:
        if self.future.done():
            return
        errors = {(r.topic, r.partition): int(r.error) for r in results}
        self.future.set_result(offset_commit_response_frame(self.req, errors))
        _observe_request_errors("OffsetCommit", self.req.api_version, _perf_counter() - self.started,
                                errors.values())

    def failed(self, e: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(e)


# -- bytes ----------------------------------------------------------------------------------------------------

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
    byte for byte what kafka-python encodes (throttle time 0; v1-2 have none)."""
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
