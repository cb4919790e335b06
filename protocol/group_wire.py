"""JoinGroup and SyncGroup straight from and to bytes: a rebalance's requests and answers.

Why this exists next to kafka-python's message classes (docs/decisions.md, "Rebalance requests and answers
by hand"): every member of a rebalancing group sends a JoinGroup (two, with KIP-394's MEMBER_ID_REQUIRED
round trip) and a SyncGroup and gets an answer to each, the leader's JoinGroup answer lists every member and
its SyncGroup assigns every member. Building and encoding the answers with kafka-python's generic classes
cost about a fifth of the server's time in a 5,000-member rebalance, and decoding the requests (then
checking them for nulls) most of another eighth. The formats are Kafka's JoinGroupRequest/Response v0-9 and
SyncGroupRequest/Response v0-5 (field order and flexible versions from Kafka's JSON message specs).

The request parsers are deliberately partial, like protocol/heartbeat_wire.py's: they take the shapes
clients send (a client id, no tagged fields, no null where Kafka forbids one) and return None for anything
else, which then goes the generic way with the generic checks (decode with kafka-python, or a closed
connection with a log line). The parsed requests carry kafka-python's attribute names, so
protocol/group_messages.py turns them into the core's inputs with the generic path's own code.
tests/unit/test_group_wire.py holds the answers byte for byte, and the parsed requests field for field,
against kafka-python's classes on generated input at every version.
"""
from __future__ import annotations

import struct
from typing import Final, NamedTuple

from coordinator_server.group.api import JoinGroupResult, SyncGroupResult

from .framing import EncodedResponse, read_plain_request
from .wire_primitives import (
    INT16,
    INT32,
    NOT_TAKEN,
    Unusual,
    encode_array_length,
    encode_bytes,
    encode_nullable_string,
    encode_string,
)

_ZERO32: Final = b"\x00\x00\x00\x00"
JOIN_GROUP_API_KEY: Final = 11
SYNC_GROUP_API_KEY: Final = 14
JOIN_MAX_VERSION: Final = 9  # keep equal to API_TABLE's ranges (a test checks)
SYNC_MAX_VERSION: Final = 5
JOIN_FIRST_FLEXIBLE: Final = 6
SYNC_FIRST_FLEXIBLE: Final = 4

_TIMEOUTS: Final = struct.Struct(">ii")  # session timeout, rebalance timeout (v1+)


# -- requests ---------------------------------------------------------------------------------------

class JoinGroupProtocolWire(NamedTuple):
    name: str
    metadata: bytes


class JoinGroupWire(NamedTuple):
    """A JoinGroup request as parsed here: kafka-python's field names, plus the header's."""

    correlation_id: int
    client_id: str | None
    api_version: int
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # -1 before v1 (not on the wire), as kafka-python reads it
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[JoinGroupProtocolWire, ...]
    reason: str | None


class SyncGroupAssignmentWire(NamedTuple):
    member_id: str
    assignment: bytes


class SyncGroupWire(NamedTuple):
    """A SyncGroup request as parsed here: kafka-python's field names, plus the header's."""

    correlation_id: int
    client_id: str | None
    api_version: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[SyncGroupAssignmentWire, ...]


def parse_join_group(payload: bytes) -> JoinGroupWire | None:
    """The JoinGroup request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse_join_group(payload)
    except NOT_TAKEN:
        return None


def parse_sync_group(payload: bytes) -> SyncGroupWire | None:
    """The SyncGroup request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse_sync_group(payload)
    except NOT_TAKEN:
        return None


def _parse_join_group(payload: bytes) -> JoinGroupWire | None:
    start = read_plain_request(payload, JOIN_GROUP_API_KEY, 0, JOIN_MAX_VERSION, JOIN_FIRST_FLEXIBLE)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    r = _Reader(payload, pos, version >= JOIN_FIRST_FLEXIBLE)
    group_id = r.string()
    if version >= 1:
        session_timeout_ms, rebalance_timeout_ms = _TIMEOUTS.unpack_from(payload, r.pos)
        r.pos += 8
    else:
        (session_timeout_ms,) = INT32.unpack_from(payload, r.pos)
        rebalance_timeout_ms = -1
        r.pos += 4
    member_id = r.string()
    group_instance_id = r.nullable_string() if version >= 5 else None
    protocol_type = r.string()
    protocols = []
    for _ in range(r.array_length()):
        name = r.string()
        protocols.append(JoinGroupProtocolWire(name, r.bytes()))
        r.no_tagged_fields()
    reason = r.nullable_string() if version >= 8 else None
    r.end()
    return JoinGroupWire(correlation_id, client_id, version, group_id, session_timeout_ms, rebalance_timeout_ms,
                         member_id, group_instance_id, protocol_type, tuple(protocols), reason)


def _parse_sync_group(payload: bytes) -> SyncGroupWire | None:
    start = read_plain_request(payload, SYNC_GROUP_API_KEY, 0, SYNC_MAX_VERSION, SYNC_FIRST_FLEXIBLE)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    r = _Reader(payload, pos, version >= SYNC_FIRST_FLEXIBLE)
    group_id = r.string()
    (generation_id,) = INT32.unpack_from(payload, r.pos)
    r.pos += 4
    member_id = r.string()
    group_instance_id = r.nullable_string() if version >= 3 else None
    protocol_type = protocol_name = None
    if version >= 5:
        protocol_type = r.nullable_string()
        protocol_name = r.nullable_string()
    assignments = []
    for _ in range(r.array_length()):
        assigned = r.string()
        assignments.append(SyncGroupAssignmentWire(assigned, r.bytes()))
        r.no_tagged_fields()
    r.end()
    return SyncGroupWire(correlation_id, client_id, version, group_id, generation_id, member_id, group_instance_id,
                         protocol_type, protocol_name, tuple(assignments))


class _Reader:
    """Kafka's primitives at a position, in the classic or the compact (flexible) encoding. Unlike
    wire_primitives' one-byte readers, compact lengths may be multi-byte varints here: a leader's SyncGroup
    in a flexible version carries one assignment per member, and subscriptions are often over 127 bytes.
    A null where Kafka forbids one, or anything truncated, raises (NOT_TAKEN)."""

    __slots__ = ("buf", "compact", "pos")

    def __init__(self, buf: bytes, pos: int, compact: bool) -> None:
        self.buf, self.pos, self.compact = buf, pos, compact

    def _length(self) -> int:
        """The length or count that follows: -1 for null."""
        if self.compact:
            return self._uvarint() - 1
        n: int = INT16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return n

    def _uvarint(self) -> int:
        buf, pos = self.buf, self.pos
        value = buf[pos]
        pos += 1
        if value >= 0x80:
            value &= 0x7F
            shift = 7
            while True:
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 28:
                    raise Unusual
        self.pos = pos
        return value

    def nullable_string(self) -> str | None:
        n = self._length()
        if n < 0:
            if n != -1:
                raise Unusual
            return None
        start = self.pos
        end = self.pos = start + n
        if end > len(self.buf):
            raise Unusual
        return self.buf[start:end].decode()

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise Unusual
        return value

    def bytes(self) -> bytes:
        n = self.array_length()  # a bytes field's length is read as an array's count
        start = self.pos
        end = self.pos = start + n
        if end > len(self.buf):
            raise Unusual
        return self.buf[start:end]

    def array_length(self) -> int:
        if self.compact:
            n = self._uvarint() - 1
        else:
            (n,) = INT32.unpack_from(self.buf, self.pos)
            self.pos += 4
        if n < 0:
            raise Unusual
        return n

    def no_tagged_fields(self) -> None:
        if self.compact:
            if self.buf[self.pos] != 0:
                raise Unusual
            self.pos += 1

    def end(self) -> None:
        """The request's own tagged fields (none), then nothing more."""
        self.no_tagged_fields()
        if self.pos != len(self.buf):
            raise Unusual


# -- answers ----------------------------------------------------------------------------------------


def join_group_response(result: JoinGroupResult, version: int) -> EncodedResponse:
    flexible = version >= JOIN_FIRST_FLEXIBLE
    out = [_ZERO32] if version >= 2 else []  # throttle time
    out.append(int(result.error).to_bytes(2, "big", signed=True))
    out.append(INT32.pack(result.generation_id))
    if version >= 7:
        out.append(encode_nullable_string(result.protocol_type, flexible))
        out.append(encode_nullable_string(result.protocol_name, flexible))
    else:  # not nullable before v7: "absent" is written as ""
        out.append(encode_string(result.protocol_name or "", flexible))
    out.append(encode_string(result.leader, flexible))
    if version >= 9:
        out.append(b"\x01" if result.skip_assignment else b"\x00")
    out.append(encode_string(result.member_id, flexible))
    out.append(encode_array_length(len(result.members), flexible))
    for m in result.members:
        out.append(encode_string(m.member_id, flexible))
        if version >= 5:
            out.append(encode_nullable_string(m.group_instance_id, flexible))
        out.append(encode_bytes(m.metadata, flexible))
        if flexible:
            out.append(b"\x00")
    if flexible:
        out.append(b"\x00")
    return EncodedResponse(b"".join(out), flexible, (int(result.error),))


def sync_group_response(result: SyncGroupResult, version: int) -> EncodedResponse:
    flexible = version >= SYNC_FIRST_FLEXIBLE
    out = [_ZERO32] if version >= 1 else []
    out.append(int(result.error).to_bytes(2, "big", signed=True))
    if version >= 5:
        out.append(encode_nullable_string(result.protocol_type, flexible))
        out.append(encode_nullable_string(result.protocol_name, flexible))
    out.append(encode_bytes(result.assignment, flexible))
    if flexible:
        out.append(b"\x00")
    return EncodedResponse(b"".join(out), flexible, (int(result.error),))
