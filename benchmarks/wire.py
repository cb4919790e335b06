"""Kafka frames for the benchmarks, built with kafka-python's message classes (once, before the clock runs).

The load generator never decodes a response: it splits the byte stream by the 4-byte size prefix and reads
the error code at a fixed offset. `error_offset` finds that offset by encoding a response with a sentinel
error code, so it follows whatever header and field layout the version has.
"""
from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its schemas with deprecated importlib.resources calls on first import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

HEARTBEAT_VERSION = 4  # flexible; both our server (0-4) and librdkafka's mock (0-5) serve it
JOIN_VERSION = 5  # the newest JoinGroup both serve without flexible encoding quirks; KIP-394 applies (v4+)
SYNC_VERSION = 3
LEAVE_VERSION = 3  # the first with a member list (a consumer's close() leaves with its own id)
COMMIT_VERSION = 8
FETCH_OFFSETS_VERSION = 8  # what kafka-python 3 and librdkafka 2.16 send (one group per request here)
_SENTINEL = 0x7ABC

__all__ = [
    "ApiVersionsRequest", "ApiVersionsResponse", "HeartbeatResponse", "JoinGroupRequest", "JoinGroupResponse", "LeaveGroupRequest", "LeaveGroupResponse",
    "SyncGroupRequest", "SyncGroupResponse",
    "commit_error_offset", "commit_frame", "encode", "fetch_offsets_error_offset", "fetch_offsets_frame", "heartbeat_error_offset", "heartbeat_frame",
    "heartbeat_response",
]


def encode(request: Any, correlation_id: int, client_id: str = "bench") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    frame: bytes = request.encode(header=True, framed=True)
    return frame


def heartbeat_frame(group_id: str, generation: int, member_id: str, correlation_id: int = 1) -> bytes:
    req = HeartbeatRequest[HEARTBEAT_VERSION](group_id=group_id, generation_id=generation, member_id=member_id,
                                              group_instance_id=None)
    return encode(req, correlation_id)


def heartbeat_response(error_code: int = 0, correlation_id: int = 1) -> bytes:
    """The framed Heartbeat response our server sends: the floor returns exactly this many bytes."""
    resp = HeartbeatResponse[HEARTBEAT_VERSION](throttle_time_ms=0, error_code=error_code)
    resp.with_header(correlation_id=correlation_id)
    out: bytes = resp.encode(header=True, framed=True)
    return out


def heartbeat_error_offset() -> int:
    return _offset_of(heartbeat_response(_SENTINEL))


def commit_frame(group_id: str, topic: str, offset: int, correlation_id: int = 1) -> bytes:
    """A standalone commit (generation -1, no member): what admin tools and simple consumers send."""
    t = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest[COMMIT_VERSION](
        group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1,
        topics=[t(name=topic, partitions=[t.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata="")])])
    return encode(req, correlation_id)


def commit_error_offset(topic: str) -> int:
    t = OffsetCommitResponse.OffsetCommitResponseTopic
    resp = OffsetCommitResponse[COMMIT_VERSION](throttle_time_ms=0, topics=[t(name=topic, partitions=[
        t.OffsetCommitResponsePartition(partition_index=0, error_code=_SENTINEL)])])
    resp.with_header(correlation_id=1)
    return _offset_of(resp.encode(header=True, framed=True))


def fetch_offsets_frame(group_id: str, topic: str, correlation_id: int = 1) -> bytes:
    """What a consumer sends for its assignment before it starts fetching: the committed offset of one
    partition of one group."""
    g = OffsetFetchRequest.OffsetFetchRequestGroup
    req = OffsetFetchRequest[FETCH_OFFSETS_VERSION](groups=[g(group_id=group_id, topics=[
        g.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])], require_stable=True)
    return encode(req, correlation_id)


def fetch_offsets_error_offset(group_id: str, topic: str) -> int:
    """Where the partition's error code lies in the answer (the group's own error code is 0 alike)."""
    g = OffsetFetchResponse.OffsetFetchResponseGroup
    t = g.OffsetFetchResponseTopics
    resp = OffsetFetchResponse[FETCH_OFFSETS_VERSION](throttle_time_ms=0, groups=[g(
        group_id=group_id, error_code=0, topics=[t(name=topic, partitions=[t.OffsetFetchResponsePartitions(
            partition_index=0, committed_offset=0, committed_leader_epoch=-1, metadata="",
            error_code=_SENTINEL)])])])
    resp.with_header(correlation_id=1)
    return _offset_of(resp.encode(header=True, framed=True))


def _offset_of(framed: bytes) -> int:
    pos = framed.find(_SENTINEL.to_bytes(2, "big"))
    assert pos > 0 and framed.count(_SENTINEL.to_bytes(2, "big")) == 1, "sentinel error code not unique"
    return pos
