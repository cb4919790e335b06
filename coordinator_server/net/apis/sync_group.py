"""SyncGroup (api key 14), v0-5: the leader's assignments in, each member's out, parsed and answered from bytes.

Versions (Kafka's SyncGroupRequest/Response specs): v1 adds the response's throttle time, v3 the group
instance id (KIP-345), v4 is flexible, v5 the protocol type and name in both directions (KIP-559; a null one
is answered INCONSISTENT_GROUP_PROTOCOL by the core, before authorization as Kafka does).

Why by hand: as JoinGroup (join_group.py): the leader's SyncGroup assigns every member. The parser takes the
shapes clients send (compact lengths of any size: a flexible leader's request carries one assignment per
member); anything else is decoded by the generic path (`net/request_decode.py`) into the same
`SyncGroupWire`, so there is one input, one runtime call and one encoder (this module's, every version).
"""
from __future__ import annotations

import asyncio
from typing import Any, Final, NamedTuple

from coordinator_server.group.api import SyncGroupInput, SyncGroupResult
from coordinator_server.net.request_decode import decode_request
from coordinator_server.security.authorizer import Access
from protocol.errors import Errors
from protocol.framing import EncodedResponse, read_plain_request
from protocol.wire_primitives import NOT_TAKEN, encode_bytes, encode_nullable_string
from protocol.wire_reader import Reader

from .answer import FramedAnswer
from .context import ApiContext

SYNC_GROUP_API_KEY: Final = 14
MAX_VERSION: Final = 5  # keep equal to API_TABLE's range (a test checks)
FIRST_FLEXIBLE: Final = 4

_ZERO32: Final = b"\x00\x00\x00\x00"


class SyncGroupAssignmentWire(NamedTuple):
    member_id: str
    assignment: bytes


class SyncGroupWire(NamedTuple):
    """A SyncGroup request: kafka-python's field names, plus the header's."""

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


def serve(payload: bytes, api: ApiContext) -> asyncio.Future[bytes]:
    req = parse_sync_group(payload)
    if req is None:
        req = _decoded(payload, api)
    api.note_client_id(req.client_id)
    inp = sync_group_input(req)
    answer = FramedAnswer("SyncGroup", req.api_version, req.correlation_id, sync_group_response)
    if sync_authorized(inp, api.access):
        api.runtime.sync_group(inp, answer.result, answer.failed)
    else:
        answer.result(SyncGroupResult(Errors.GROUP_AUTHORIZATION_FAILED))
    return answer.future


def sync_authorized(inp: SyncGroupInput, access: Access) -> bool:
    # v5+ with a null ProtocolType/Name gets INCONSISTENT_GROUP_PROTOCOL from the core *before*
    # authorization in Kafka, so those skip the check here.
    null_protocol = inp.api_version >= 5 and (inp.protocol_type is None or inp.protocol_name is None)
    return null_protocol or access.group("READ", inp.group_id)


def _decoded(payload: bytes, api: ApiContext) -> SyncGroupWire:
    header, req = decode_request(payload, api.note_client_id)
    return request_of(req, header.api_version, header.correlation_id, header.client_id)


def request_of(req: Any, version: int, correlation_id: int = -1, client_id: str | None = None) -> SyncGroupWire:
    """kafka-python's decoded request as the parser's, each field as that version carries it."""
    return SyncGroupWire(
        correlation_id, client_id, version, req.group_id, req.generation_id, req.member_id,
        req.group_instance_id if version >= 3 else None,
        req.protocol_type if version >= 5 else None, req.protocol_name if version >= 5 else None,
        tuple(SyncGroupAssignmentWire(a.member_id, bytes(a.assignment)) for a in req.assignments))


def sync_group_input(req: SyncGroupWire) -> SyncGroupInput:
    return SyncGroupInput(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        protocol_type=req.protocol_type,
        protocol_name=req.protocol_name,
        assignments=tuple((a.member_id, a.assignment) for a in req.assignments),
        api_version=req.api_version,
    )


def parse_sync_group(payload: bytes) -> SyncGroupWire | None:
    """The SyncGroup request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse(payload)
    except NOT_TAKEN:
        return None


def _parse(payload: bytes) -> SyncGroupWire | None:
    start = read_plain_request(payload, SYNC_GROUP_API_KEY, 0, MAX_VERSION, FIRST_FLEXIBLE)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    r = Reader(payload, pos, version >= FIRST_FLEXIBLE)
    group_id = r.string()
    generation_id = r.int32()
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


def sync_group_response(result: SyncGroupResult, version: int) -> EncodedResponse:
    """The response body at `version`, byte for byte what kafka-python encodes (throttle time 0)."""
    flexible = version >= FIRST_FLEXIBLE
    out = [_ZERO32] if version >= 1 else []
    out.append(int(result.error).to_bytes(2, "big", signed=True))
    if version >= 5:
        out.append(encode_nullable_string(result.protocol_type, flexible))
        out.append(encode_nullable_string(result.protocol_name, flexible))
    out.append(encode_bytes(result.assignment, flexible))
    if flexible:
        out.append(b"\x00")
    return EncodedResponse(b"".join(out), flexible, (int(result.error),))
