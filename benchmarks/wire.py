"""Kafka frames for the benchmarks, built with kafka-python's message classes (once, before the clock runs).

The load generator never decodes a response: it splits the byte stream by the 4-byte size prefix and reads
the error code at a fixed offset. `error_offset` finds that offset by encoding a response with a sentinel
error code, so it follows whatever header and field layout the version has.
"""
from __future__ import annotations

import struct
import warnings
from typing import Any, NamedTuple

# The topic every benchmark commit names, on the server, the floors and Kafka alike.
COMMIT_TOPIC = "bench-topic"

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
    "ApiVersionsRequest", "ApiVersionsResponse", "HeartbeatResponse", "JoinAnswer", "JoinGroupRequest", "JoinGroupResponse", "LeaveGroupRequest", "LeaveGroupResponse",
    "SyncGroupRequest", "SyncGroupResponse",
    "commit_error_offset", "commit_frame", "commit_response", "encode", "fetch_offsets_error_offset", "fetch_offsets_frame", "heartbeat_error_offset", "heartbeat_frame",
    "heartbeat_response", "join_frame", "read_join_answer", "sync_error", "sync_frame",
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


def commit_response(topic: str, error_code: int = 0, correlation_id: int = 1) -> bytes:
    """The framed answer to `commit_frame`: the commit floor returns exactly this many bytes."""
    t = OffsetCommitResponse.OffsetCommitResponseTopic
    resp = OffsetCommitResponse[COMMIT_VERSION](throttle_time_ms=0, topics=[t(name=topic, partitions=[
        t.OffsetCommitResponsePartition(partition_index=0, error_code=error_code)])])
    resp.with_header(correlation_id=correlation_id)
    out: bytes = resp.encode(header=True, framed=True)
    return out


def commit_error_offset(topic: str) -> int:
    return _offset_of(commit_response(topic, _SENTINEL))


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


# -- the rebalance's own frames, built and read by hand ------------------------------------------------
#
# The members driver (`benchmarks/members.py`) sends 15,000 requests and reads as many answers in a
# 5,000-member rebalance, on the same 2 cores as the server; with kafka-python's classes it spent about as
# much CPU as the server did. These build the very bytes kafka-python builds (JoinGroup v5, SyncGroup v3,
# client id "bench"; tests/unit/test_bench_wire.py holds them to it) and read the few answer fields the
# driver needs, so what goes over the wire and what is timed stay the same.

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_JOIN_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id (then the client id)
_CLIENT_ID = b"\x00\x05bench"


def _s16(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def join_frame(group_id: str, session_ms: int, member_id: str, protocol: str, metadata: bytes,
               correlation_id: int) -> bytes:
    """JoinGroup v5 as `encode(JoinGroupRequest[5](...), correlation_id)` builds it: one protocol, no group
    instance id, the rebalance timeout equal to the session timeout."""
    body = b"".join((_JOIN_HEADER.pack(11, JOIN_VERSION, correlation_id), _CLIENT_ID, _s16(group_id),
                     _I32.pack(session_ms), _I32.pack(session_ms), _s16(member_id), b"\xff\xff", _s16("consumer"),
                     b"\x00\x00\x00\x01", _s16(protocol), _I32.pack(len(metadata)), metadata))
    return _I32.pack(len(body)) + body


def sync_frame(group_id: str, generation: int, member_id: str, assignments: list[tuple[str, bytes]],
               correlation_id: int) -> bytes:
    """SyncGroup v3 as `encode(SyncGroupRequest[3](...), correlation_id)` builds it (no group instance id)."""
    parts = [_JOIN_HEADER.pack(14, SYNC_VERSION, correlation_id), _CLIENT_ID, _s16(group_id), _I32.pack(generation),
             _s16(member_id), b"\xff\xff", _I32.pack(len(assignments))]
    for assigned, assignment in assignments:
        parts += (_s16(assigned), _I32.pack(len(assignment)), assignment)
    body = b"".join(parts)
    return _I32.pack(len(body)) + body


class JoinAnswer(NamedTuple):
    error_code: int
    generation_id: int
    leader: str
    member_id: str
    members: list[str]  # the member ids, in the leader's answer only


def read_join_answer(payload: bytes) -> JoinAnswer:
    """A JoinGroup v5 answer (header v0: correlation id; throttle time, error code, generation, protocol
    name, leader, member id, members), without the members' metadata, which the driver does not read."""
    error, generation = struct.unpack_from(">hi", payload, 8)
    pos = 14
    for _ in range(2):  # protocol name, leader
        (n,) = _I16.unpack_from(payload, pos)
        start, pos = pos + 2, pos + 2 + max(n, 0)
    leader = payload[start:pos].decode()
    (n,) = _I16.unpack_from(payload, pos)
    member_id = payload[pos + 2:pos + 2 + n].decode()
    pos += 2 + n
    (count,) = _I32.unpack_from(payload, pos)
    pos += 4
    members = []
    for _ in range(count):
        (n,) = _I16.unpack_from(payload, pos)
        members.append(payload[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
        (n,) = _I16.unpack_from(payload, pos)  # group instance id, nullable
        pos += 2 + max(n, 0)
        (n,) = _I32.unpack_from(payload, pos)  # metadata
        pos += 4 + n
    return JoinAnswer(error, generation, leader, member_id, members)


def sync_error(payload: bytes) -> int:
    """The error code of a SyncGroup v3 answer (correlation id, throttle time, error code, assignment)."""
    code: int = _I16.unpack_from(payload, 8)[0]
    return code
