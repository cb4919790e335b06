"""OffsetFetch v8-9 requests and responses straight from and to bytes: what a consumer sends before it
starts reading each assignment, after every rebalance and at every start.

Why this exists next to kafka-python's message classes (docs/decisions.md, "OffsetFetch takes a fast path
too"): the generic path decoded and encoded the request with kafka-python's classes and ran it as a task
under the group's lock, ~200 µs of server CPU for one partition's offset. The parser takes the versions
kafka-python 3 and librdkafka 2.x send (8 and 9: groups batched, flexible) in the shapes they send them (no
tagged fields, one-byte compact lengths) and returns None for anything else, which then goes the generic way
with the generic checks. tests/unit/test_offset_fetch_wire.py holds both directions byte for byte against
kafka-python's classes on generated input.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

from .framing import read_plain_request
from .wire_primitives import (
    INT32,
    NOT_TAKEN,
    array_length,
    encode_array_length,
    encode_nullable_string,
    encode_string,
    no_tagged_fields,
    nullable_string,
    string,
    uvarint,
)

OFFSET_FETCH_API_KEY: Final = 9
MIN_VERSION: Final = 8
MAX_VERSION: Final = 9  # keep equal to API_TABLE's OffsetFetch maximum (a test checks)

_PARTITION_RESULT: Final = struct.Struct(">iqi")  # partition index, committed offset, committed leader epoch
_INT16: Final = struct.Struct(">h")


class FetchGroupWire(NamedTuple):
    group_id: str
    member_id: str | None  # v9 (KIP-848 members); None before
    member_epoch: int
    # (topic, partition) in request order; None = every committed offset of the group
    partitions: tuple[tuple[str, int], ...] | None


class OffsetFetchWire(NamedTuple):
    correlation_id: int
    client_id: str | None
    api_version: int
    groups: tuple[FetchGroupWire, ...]
    require_stable: bool


# One partition's answer: partition index, committed offset, leader epoch, metadata, error code.
FetchedPartitionWire = tuple[int, int, int, str | None, int]
# One group's answer: group id, error code, and per topic (in answer order) its partitions.
FetchedGroupWire = tuple[str, int, Sequence[tuple[str, Sequence[FetchedPartitionWire]]]]


def parse_offset_fetch(payload: bytes) -> OffsetFetchWire | None:
    """The OffsetFetch request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse(payload)
    except NOT_TAKEN:
        return None


def _parse(payload: bytes) -> OffsetFetchWire | None:
    start = read_plain_request(payload, OFFSET_FETCH_API_KEY, MIN_VERSION, MAX_VERSION, MIN_VERSION)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    n_groups, pos = array_length(payload, pos, True)
    groups = []
    for _ in range(n_groups):
        group_id, pos = string(payload, pos, True)
        member_id, member_epoch = None, -1
        if version >= 9:
            member_id, pos = nullable_string(payload, pos, True)
            (member_epoch,) = INT32.unpack_from(payload, pos)
            pos += 4
        partitions: tuple[tuple[str, int], ...] | None = None
        if payload[pos] == 0:  # a null topic list: every committed offset
            pos += 1
        else:
            n_topics, pos = array_length(payload, pos, True)
            wanted: list[tuple[str, int]] = []
            for _ in range(n_topics):
                name, pos = string(payload, pos, True)
                n_partitions, pos = array_length(payload, pos, True)
                end = pos + 4 * n_partitions
                if end > len(payload):
                    return None
                wanted.extend((name, p) for p in struct.unpack_from(f">{n_partitions}i", payload, pos))
                pos = no_tagged_fields(payload, end)
            partitions = tuple(wanted)
        pos = no_tagged_fields(payload, pos)
        groups.append(FetchGroupWire(group_id, member_id, member_epoch, partitions))
    require_stable = payload[pos]
    if require_stable > 1:
        return None
    pos = no_tagged_fields(payload, pos + 1)
    if pos != len(payload):
        return None
    return OffsetFetchWire(correlation_id, client_id, version, tuple(groups), bool(require_stable))


def offset_fetch_response_frame(correlation_id: int, groups: Sequence[FetchedGroupWire]) -> bytes:
    """The size-prefixed v8/v9 response (the two are the same on the wire), byte for byte what
    kafka-python encodes (throttle time 0)."""
    parts = [INT32.pack(correlation_id), b"\x00", b"\x00\x00\x00\x00", encode_array_length(len(groups), True)]
    pack = _PARTITION_RESULT.pack
    error = _INT16.pack
    for group_id, group_error, topics in groups:
        parts.append(encode_string(group_id, True))
        parts.append(uvarint(len(topics) + 1))
        for name, partitions in topics:
            parts.append(encode_string(name, True))
            parts.append(uvarint(len(partitions) + 1))
            for index, offset, leader_epoch, metadata, code in partitions:
                parts.append(pack(index, offset, leader_epoch))
                parts.append(encode_nullable_string(metadata, True))
                parts.append(error(code))
                parts.append(b"\x00")
            parts.append(b"\x00")
        parts.append(error(group_error))
        parts.append(b"\x00")
    parts.append(b"\x00")
    body = b"".join(parts)
    return INT32.pack(len(body)) + body
