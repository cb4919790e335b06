"""ConsumerGroupHeartbeat (api key 68, v1) frames built and read by hand, for the KIP-848 member driver
(benchmarks/consumer_members.py).

kafka-python has no class for the consumer group protocol; the repo's protocol package builds one from the
message spec, but its generic encoder costs the driver about as much CPU per heartbeat as a server spends
answering it, on the same 2 cores. These build the very bytes that class builds and read every field of the
answer (tests/unit/test_bench_consumer_heartbeat.py holds them to it). The request is flexible: header v2
(client id as a classic string, then tagged fields), compact strings and arrays, a nullable array as
length + 1 (0 for null); the answer's header v1 is the correlation id and tagged fields, its nullable
Assignment struct a one-byte marker (-1 null, 1 present).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.wire_primitives import encode_array_length, encode_nullable_string

API_KEY = 68
VERSION = 1  # the member id is the consumer's own (v1+), as the Java client sends it
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
FENCED_MEMBER_EPOCH = 110
UNKNOWN_MEMBER_ID = 25

_HEADER = struct.Struct(">hhi")
_CLIENT_ID = b"\x00\x05bench"
_I32 = struct.Struct(">i")
_TWO_I32 = struct.Struct(">ii")
_ERROR = struct.Struct(">h")

# topic id (16 bytes) -> partitions
Partitions = dict[bytes, frozenset[int]]


def _topic_partitions(owned: Partitions | None) -> bytes:
    if owned is None:
        return b"\x00"
    parts = [encode_array_length(len(owned), True)]
    for topic_id, partitions in sorted(owned.items()):
        ordered = sorted(partitions)
        parts += (topic_id, encode_array_length(len(ordered), True), struct.pack(f">{len(ordered)}i", *ordered),
                  b"\x00")
    return b"".join(parts)


def heartbeat_frame(group_id: str, member_id: str, member_epoch: int, correlation_id: int, *,
                    rebalance_timeout_ms: int = -1, subscribed_topic_names: list[str] | None = None,
                    server_assignor: str | None = None, owned: Partitions | None = None) -> bytes:
    """A heartbeat with the fields a consumer sends: all of them when it joins, else only what changed
    since its last heartbeat (null or -1 for the rest, as the Java client does). No instance id, rack or
    regex."""
    names = b"\x00" if subscribed_topic_names is None else (
        encode_array_length(len(subscribed_topic_names), True)
        + b"".join(encode_nullable_string(n, True) for n in subscribed_topic_names))
    body = b"".join((_HEADER.pack(API_KEY, VERSION, correlation_id), _CLIENT_ID, b"\x00",
                     encode_nullable_string(group_id, True), encode_nullable_string(member_id, True),
                     _I32.pack(member_epoch), b"\x00", b"\x00",
                     _I32.pack(rebalance_timeout_ms), names, b"\x00", encode_nullable_string(server_assignor, True),
                     _topic_partitions(owned), b"\x00"))
    return _I32.pack(len(body)) + body


def join_frame(group_id: str, member_id: str, topic: str, assignor: str, rebalance_timeout_ms: int,
               correlation_id: int) -> bytes:
    """Epoch 0 with the subscription, the assignor and no owned partitions (an empty list, not null)."""
    return heartbeat_frame(group_id, member_id, JOIN_EPOCH, correlation_id, rebalance_timeout_ms=rebalance_timeout_ms,
                           subscribed_topic_names=[topic], server_assignor=assignor, owned={})


class Answer(NamedTuple):
    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Partitions | None  # None: unchanged since the last answer


def _read_uvarint(payload: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = payload[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _read_string(payload: bytes, pos: int) -> tuple[str | None, int]:
    n, pos = _read_uvarint(payload, pos)
    if n == 0:
        return None, pos
    return payload[pos:pos + n - 1].decode(), pos + n - 1


def _skip_tags(payload: bytes, pos: int) -> int:
    count, pos = _read_uvarint(payload, pos)
    for _ in range(count):
        _, pos = _read_uvarint(payload, pos)
        size, pos = _read_uvarint(payload, pos)
        pos += size
    return pos


def read_answer(payload: bytes) -> Answer:
    """A v1 answer without its size prefix: correlation id, header tags, then the body."""
    pos = _skip_tags(payload, 4)
    (error,) = _ERROR.unpack_from(payload, pos + 4)  # after the throttle time
    message, pos = _read_string(payload, pos + 6)
    member_id, pos = _read_string(payload, pos)
    epoch, interval = _TWO_I32.unpack_from(payload, pos)
    pos += 8
    assignment: Partitions | None = None
    if payload[pos] != 0xFF:  # -1: null
        pos += 1
        assignment = {}
        topics, pos = _read_uvarint(payload, pos)
        for _ in range(topics - 1):
            topic_id = payload[pos:pos + 16]
            n, pos = _read_uvarint(payload, pos + 16)
            assignment[topic_id] = frozenset(struct.unpack_from(f">{n - 1}i", payload, pos))
            pos = _skip_tags(payload, pos + 4 * (n - 1))
    return Answer(error, message, member_id, epoch, interval, assignment)


def error_offset() -> int:
    """Where the error code lies in a framed answer (size, correlation id, no header tags, throttle time):
    what the load generator reads."""
    return 4 + 4 + 1 + 4
