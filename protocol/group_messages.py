"""Classic group APIs: decoded requests of any version -> core inputs, core results -> responses.

No I/O and no decisions: every rule (validation, error precedence, version-dependent behaviour such as
MEMBER_ID_REQUIRED) lives in the core. This module only fills in what older versions lack, the way
Kafka's request classes normalize them:
- JoinGroup v0 has no rebalance timeout: the session timeout stands in (JoinGroupRequest.java).
- LeaveGroup v0-2 carry one member id: normalized into one LeaveMember (LeaveGroupRequest.normalizedData),
  and the response folds member errors into the top-level code (LeaveGroupResponse constructor).
- JoinGroup ProtocolName is nullable only from v7; below that "absent" is written as "".
"""
from __future__ import annotations

import functools
import ipaddress

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)

from coordinator_server.group.api import (
    HeartbeatInput,
    JoinGroupInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    LeaveMember,
    SyncGroupInput,
    SyncGroupResult,
)

from .errors import Errors


@functools.lru_cache(maxsize=4096)  # per connection, and clients come back from the same few addresses
def java_inet_address_string(ip: str) -> str:
    """Java's InetAddress.toString() for an address without a resolved host name: "/" + host address.

    Kafka puts this in the member's client host (DescribeGroups shows it). Java prints IPv6 in full
    eight-group form without zero compression ("/0:0:0:0:0:0:0:1"), so we do too.
    """
    addr, _, scope = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(addr)
    except ValueError:
        return "/" + ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            # Java turns an IPv4-mapped IPv6 address into an Inet4Address.
            return "/" + str(parsed.ipv4_mapped)
        text = ":".join(f"{int(g, 16):x}" for g in parsed.exploded.split(":"))
        return "/" + text + (f"%{scope}" if scope else "")
    return "/" + str(parsed)


# ---------------------------------------------------------------------------------------- JoinGroup


def join_group_input(req: ApiMessage, version: int, client_id: str | None, client_host: str) -> JoinGroupInput:
    session_timeout_ms = req.session_timeout_ms
    return JoinGroupInput(
        group_id=req.group_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if version >= 5 else None,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms if version >= 1 else session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        api_version=version,
        client_id=client_id or "",
        client_host=client_host,
        reason=req.reason if version >= 8 else None,
    )


def join_group_response(result: JoinGroupResult, version: int) -> ApiMessage:
    """kafka-python's JoinGroupResponse for `result`: the reference that protocol/group_wire.py's hand-written
    encoder, which the server answers with, is held to byte for byte (tests/unit/test_group_wire.py)."""
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # not nullable before v7
    fields: dict[str, object] = {
        "error_code": int(result.error),
        "generation_id": result.generation_id,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata,
            )
            for m in result.members
        ],
    }
    if version >= 2:
        fields["throttle_time_ms"] = 0
    if version >= 7:
        fields["protocol_type"] = result.protocol_type
    if version >= 9:
        fields["skip_assignment"] = result.skip_assignment
    return JoinGroupResponse[version](**fields)


# ---------------------------------------------------------------------------------------- SyncGroup


def sync_group_input(req: ApiMessage, version: int) -> SyncGroupInput:
    return SyncGroupInput(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if version >= 3 else None,
        protocol_type=req.protocol_type if version >= 5 else None,
        protocol_name=req.protocol_name if version >= 5 else None,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
        api_version=version,
    )


def sync_group_response(result: SyncGroupResult, version: int) -> ApiMessage:
    """The reference for protocol/group_wire.py's SyncGroup encoder (see join_group_response)."""
    fields: dict[str, object] = {"error_code": int(result.error), "assignment": result.assignment}
    if version >= 1:
        fields["throttle_time_ms"] = 0
    if version >= 5:
        fields["protocol_type"] = result.protocol_type
        fields["protocol_name"] = result.protocol_name
    return SyncGroupResponse[version](**fields)


# ---------------------------------------------------------------------------------------- Heartbeat


def heartbeat_input(req: ApiMessage, version: int) -> HeartbeatInput:
    return HeartbeatInput(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if version >= 3 else None,
        api_version=version,
    )


def heartbeat_response(error: Errors, version: int) -> ApiMessage:
    if version >= 1:
        return HeartbeatResponse[version](throttle_time_ms=0, error_code=int(error))
    return HeartbeatResponse[0](error_code=int(error))


# --------------------------------------------------------------------------------------- LeaveGroup


def leave_group_input(req: ApiMessage, version: int) -> LeaveGroupInput:
    if version <= 2:
        members: tuple[LeaveMember, ...] = (LeaveMember(member_id=req.member_id, group_instance_id=None),)
    else:
        members = tuple(
            LeaveMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                reason=m.reason if version >= 5 else None,
            )
            for m in req.members
        )
    return LeaveGroupInput(group_id=req.group_id, members=members, api_version=version)


def folded_leave_error(result: LeaveGroupResult) -> Errors:
    """v0-2 have no per-member errors: the top-level error if set, else the first non-NONE member error."""
    if result.error != Errors.NONE:
        return result.error
    for member in result.members:
        if member.error != Errors.NONE:
            return member.error
    return Errors.NONE


def leave_group_response(result: LeaveGroupResult, version: int) -> ApiMessage:
    if version <= 2:
        error = folded_leave_error(result)
        if version == 0:
            return LeaveGroupResponse[0](error_code=int(error))
        return LeaveGroupResponse[version](throttle_time_ms=0, error_code=int(error))
    return LeaveGroupResponse[version](
        throttle_time_ms=0,
        error_code=int(result.error),
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=int(m.error),
            )
            for m in result.members
        ],
    )
