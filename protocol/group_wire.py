"""JoinGroup and SyncGroup response bodies straight to bytes: a rebalance's answers.

Why this exists next to kafka-python's message classes (docs/decisions.md, "Rebalance answers are encoded
by hand"): every member of a rebalancing group gets a JoinGroup and a SyncGroup answer, the leader's
JoinGroup answer lists every member, and building and encoding them with kafka-python's generic classes
cost about a fifth of the server's time in a 5,000-member rebalance. The formats are Kafka's
JoinGroupResponse v0-9 and SyncGroupResponse v0-5 (field order and flexible versions from Kafka's JSON
message specs); tests/unit/test_group_wire.py holds them byte for byte against kafka-python's encoding on
generated results.
"""
from __future__ import annotations

from coordinator_server.group.api import JoinGroupResult, SyncGroupResult

from .framing import EncodedResponse
from .wire_primitives import INT32, encode_array_length, encode_bytes, encode_nullable_string, encode_string

_ZERO32 = b"\x00\x00\x00\x00"
JOIN_FIRST_FLEXIBLE = 6
SYNC_FIRST_FLEXIBLE = 4


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
