"""JoinGroup (api key 11), v0-9: a rebalance's first request, parsed and answered from bytes.

Versions (Kafka's JoinGroupRequest/Response specs): v0 has no rebalance timeout (the session timeout stands
in, as JoinGroupRequest.java normalizes it), v1 adds it, v2 the response's throttle time, v4 answers a new
member MEMBER_ID_REQUIRED (KIP-394, decided by the core), v5 the group instance id (KIP-345), v6 is flexible,
v7 answers the protocol type and makes the protocol name nullable (before, "absent" is written as ""), v8
the reason (KIP-800), v9 skip_assignment (KIP-814).

Why by hand (docs/decisions.md, "Rebalance requests and answers by hand"): every member of a rebalancing
group sends one or two JoinGroups and the leader's answer lists every member; kafka-python's generic classes
spent about a fifth of a 5,000-member rebalance building and encoding the answers and most of another eighth
decoding the requests and checking them for nulls. The parser takes the shapes clients send (a client id, no
tagged fields, no null where Kafka forbids one, compact lengths of any size); anything else is decoded by the
generic path (`net/request_decode.py`) into the same `JoinGroupWire`, so there is one input, one runtime
call and one encoder (this module's, every version). tests/unit/test_api_join_sync.py holds the answers byte
for byte and the parsed requests field for field against kafka-python's classes.
"""
from __future__ import annotations

import asyncio
import struct
from typing import Any, Final, NamedTuple

from coordinator_server.group.api import JoinGroupInput, JoinGroupResult
from coordinator_server.net.request_decode import decode_request
from protocol.errors import Errors
from protocol.framing import EncodedResponse, read_plain_request
from protocol.wire_primitives import (
    INT32,
    NOT_TAKEN,
    encode_array_length,
    encode_bytes,
    encode_nullable_string,
    encode_string,
)
from protocol.wire_reader import Reader

from .answer import FramedAnswer
from .context import ApiContext

JOIN_GROUP_API_KEY: Final = 11
MAX_VERSION: Final = 9  # keep equal to API_TABLE's range (a test checks)
FIRST_FLEXIBLE: Final = 6

_ZERO32: Final = b"\x00\x00\x00\x00"
_TIMEOUTS: Final = struct.Struct(">ii")  # session timeout, rebalance timeout (v1+)


class JoinGroupProtocolWire(NamedTuple):
    name: str
    metadata: bytes


class JoinGroupWire(NamedTuple):
    """A JoinGroup request: kafka-python's field names, plus the header's."""

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


def serve(payload: bytes, api: ApiContext) -> asyncio.Future[bytes]:
    """READ on the group, then the runtime; the answer comes through the future (a JoinGroup parks until its
    join phase completes)."""
    req = parse_join_group(payload)
    if req is None:
        req = _decoded(payload, api)
    api.note_client_id(req.client_id)
    inp = join_group_input(req, api.client_host)
    answer = FramedAnswer("JoinGroup", req.api_version, req.correlation_id, join_group_response)
    if api.access.group("READ", inp.group_id):
        api.runtime.join_group(inp, answer.result, answer.failed)
    else:
        answer.result(JoinGroupResult(Errors.GROUP_AUTHORIZATION_FAILED))
    return answer.future


def _decoded(payload: bytes, api: ApiContext) -> JoinGroupWire:
    header, req = decode_request(payload, api.note_client_id)
    return request_of(req, header.api_version, header.correlation_id, header.client_id)


def request_of(req: Any, version: int, correlation_id: int = -1, client_id: str | None = None) -> JoinGroupWire:
    """kafka-python's decoded request as the parser's, each field as that version carries it."""
    return JoinGroupWire(
        correlation_id, client_id, version, req.group_id, req.session_timeout_ms,
        req.rebalance_timeout_ms if version >= 1 else -1, req.member_id,
        req.group_instance_id if version >= 5 else None, req.protocol_type,
        tuple(JoinGroupProtocolWire(p.name, bytes(p.metadata)) for p in req.protocols),
        req.reason if version >= 8 else None)


def join_group_input(req: JoinGroupWire, client_host: str) -> JoinGroupInput:
    session_timeout_ms = req.session_timeout_ms
    version = req.api_version
    return JoinGroupInput(
        group_id=req.group_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms if version >= 1 else session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in req.protocols),
        api_version=version,
        client_id=req.client_id or "",
        client_host=client_host,
        reason=req.reason,
    )


def parse_join_group(payload: bytes) -> JoinGroupWire | None:
    """The JoinGroup request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse(payload)
    except NOT_TAKEN:
        return None


def _parse(payload: bytes) -> JoinGroupWire | None:
    start = read_plain_request(payload, JOIN_GROUP_API_KEY, 0, MAX_VERSION, FIRST_FLEXIBLE)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    r = Reader(payload, pos, version >= FIRST_FLEXIBLE)
    group_id = r.string()
    if version >= 1:
        session_timeout_ms, rebalance_timeout_ms = _TIMEOUTS.unpack_from(payload, r.pos)
        r.pos += 8
    else:
        session_timeout_ms = r.int32()
        rebalance_timeout_ms = -1
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


def join_group_response(result: JoinGroupResult, version: int) -> EncodedResponse:
    """The response body at `version`, byte for byte what kafka-python encodes (throttle time 0)."""
    flexible = version >= FIRST_FLEXIBLE
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
