"""Heartbeat (api key 12), v0-4: the coordinator's hot path, parsed and answered from bytes.

Versions (Kafka's HeartbeatRequest/Response specs): v1 adds the response's throttle time, v3 the group
instance id (KIP-345), v4 is flexible (compact strings, tagged fields, request header v2, response header v1).

Why by hand next to kafka-python's classes (docs/decisions.md, "Heartbeats take a fast path"): a member
heartbeats every few seconds for as long as it lives, so heartbeats are most of a coordinator's requests, and
kafka-python's generic header parse, body decode and response encode cost several times what the group core
spends on one. The formats are tiny and fixed, so they are parsed and built here with `struct`.

The parser takes the well-formed shapes real clients send (one-byte compact lengths, no tagged fields); any
other frame is decoded by the generic path (`net/request_decode.py`: kafka-python, the generic checks, a
closed connection with a log line when it does not decode) into the same request, so from there on there is
one way: READ on the group, `runtime.heartbeat`, and the hand encoder, which covers every version.
tests/unit/test_api_heartbeat.py holds both directions against kafka-python's classes on generated input.
"""
from __future__ import annotations

import struct
import time
from typing import Any, Final

from coordinator_server import metrics
from coordinator_server.group.api import HeartbeatInput
from coordinator_server.net.request_decode import decode_request
from protocol.errors import Errors
from protocol.framing import read_plain_request
from protocol.value_class import ValueClass
from protocol.wire_primitives import NOT_TAKEN, nullable_string, string

from .context import ApiContext

# Final: compiled, a module constant is then a C static or an inlined literal, not a lookup in the
# module's dictionary on every heartbeat.
HEARTBEAT_API_KEY: Final = 12
MAX_VERSION: Final = 4  # keep equal to API_TABLE's Heartbeat range (a test checks)
FIRST_FLEXIBLE_VERSION: Final = 4

_HEADER_V4: Final = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_INT32: Final = struct.Struct(">i")
_RESPONSE_V0: Final = struct.Struct(">iih")  # size, correlation id, error code
_RESPONSE_V1: Final = struct.Struct(">iiih")  # size, correlation id, throttle time, error code
_RESPONSE_V4: Final = struct.Struct(">iibihb")  # size, correlation id, header tags, throttle, error code, body tags
# The struct methods bound once: a method call on a `Struct` looks the method up on its type each time.
_header_v4_at: Final = _HEADER_V4.unpack_from
_int32_at: Final = _INT32.unpack_from
_response_v4: Final = _RESPONSE_V4.pack
_perf_counter: Final = time.perf_counter
_observe_request_error: Final = metrics.observe_request_error
_GROUP_AUTHORIZATION_FAILED: Final = Errors.GROUP_AUTHORIZATION_FAILED


class HeartbeatRequest(ValueClass):
    """A ValueClass, built per heartbeat."""

    __slots__ = ("client_id", "correlation_id", "input")

    def __init__(self, correlation_id: int, client_id: str | None, input: HeartbeatInput) -> None:
        self.correlation_id: Final = correlation_id
        self.client_id: Final = client_id
        self.input: Final = input  # what the coordinator core takes (api_version included)

    def _fields(self) -> tuple[int, str | None, HeartbeatInput]:
        return self.correlation_id, self.client_id, self.input


def serve(payload: bytes, api: ApiContext) -> bytes:
    """The framed answer to the Heartbeat in `payload` (READ on the group, then the core's error code)."""
    hb = parse_heartbeat(payload)
    if hb is None:
        hb = _decoded(payload, api)
    started = _perf_counter()
    api.note_client_id(hb.client_id)
    inp = hb.input
    version = inp.api_version
    if api.access.group("READ", inp.group_id):
        error = api.runtime.heartbeat(inp)
    else:
        error = _GROUP_AUTHORIZATION_FAILED
    _observe_request_error("Heartbeat", version, _perf_counter() - started, error)
    return heartbeat_response_frame(version, hb.correlation_id, error)


def _decoded(payload: bytes, api: ApiContext) -> HeartbeatRequest:
    """A shape the parser does not take, decoded by the generic path into the same request."""
    header, req = decode_request(payload, api.note_client_id)
    return HeartbeatRequest(header.correlation_id, header.client_id, heartbeat_input(req, header.api_version))


def heartbeat_input(req: Any, version: int) -> HeartbeatInput:
    """kafka-python's decoded request as the core's input."""
    return HeartbeatInput(req.group_id, req.generation_id, req.member_id,
                          req.group_instance_id if version >= 3 else None, version)


def parse_heartbeat(payload: bytes) -> HeartbeatRequest | None:
    """The Heartbeat request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse(payload)
    except NOT_TAKEN:
        return None


def _parse(payload: bytes) -> HeartbeatRequest | None:
    fast = _parse_v4(payload)
    if fast is not None:
        return fast
    start = read_plain_request(payload, HEARTBEAT_API_KEY, 0, MAX_VERSION, FIRST_FLEXIBLE_VERSION)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    if version >= FIRST_FLEXIBLE_VERSION:
        group_id, pos = string(payload, pos, True)
        (generation_id,) = _int32_at(payload, pos)
        member_id, pos = string(payload, pos + 4, True)
        group_instance_id, pos = nullable_string(payload, pos, True)
        if payload[pos] != 0:  # body tagged fields
            return None
        pos += 1
    else:
        group_id, pos = string(payload, pos, False)
        (generation_id,) = _int32_at(payload, pos)
        member_id, pos = string(payload, pos + 4, False)
        group_instance_id = None
        if version >= 3:
            group_instance_id, pos = nullable_string(payload, pos, False)
    if group_id is None or member_id is None or pos != len(payload):
        return None
    return HeartbeatRequest(correlation_id, client_id,
                            HeartbeatInput(group_id, generation_id, member_id, group_instance_id, version))


def _parse_v4(payload: bytes) -> HeartbeatRequest | None:
    """Heartbeat v4 as librdkafka and kafka-python send it (a client id, one-byte compact lengths, no
    tagged fields, no instance id or a short one), in one pass with no helper calls: the hottest request
    of all. None for anything else, which `_parse` then reads field by field."""
    api_key, version, correlation_id, n = _header_v4_at(payload, 0)
    if api_key != HEARTBEAT_API_KEY or version != 4 or n < 0:
        return None
    pos = 10 + n
    client_id = payload[10:pos].decode()
    if payload[pos]:  # header tagged fields
        return None
    g = payload[pos + 1]
    if not 0 < g < 0x80:
        return None
    pos += 1 + g  # past the group id
    group_id = payload[pos - g + 1:pos].decode()
    generation_id: int = _int32_at(payload, pos)[0]
    m = payload[pos + 4]
    if not 0 < m < 0x80:
        return None
    start = pos + 5
    pos = start + m - 1
    member_id = payload[start:pos].decode()
    i = payload[pos]
    if i == 0:
        instance_id = None
        pos += 1
    elif i < 0x80:
        instance_id = payload[pos + 1:pos + i].decode()
        pos += i
    else:
        return None
    if pos + 1 != len(payload) or payload[pos]:  # body tagged fields, then the end
        return None
    return HeartbeatRequest(correlation_id, client_id,
                            HeartbeatInput(group_id, generation_id, member_id, instance_id, 4))


def heartbeat_response_frame(api_version: int, correlation_id: int, error_code: int) -> bytes:
    """The size-prefixed response, byte for byte what kafka-python encodes (throttle time 0)."""
    if api_version >= FIRST_FLEXIBLE_VERSION:
        return _response_v4(12, correlation_id, 0, 0, error_code, 0)
    if api_version >= 1:
        return _RESPONSE_V1.pack(10, correlation_id, 0, error_code)
    return _RESPONSE_V0.pack(6, correlation_id, error_code)
