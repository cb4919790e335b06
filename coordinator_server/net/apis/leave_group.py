"""LeaveGroup (api key 13), v0-5: decoded by kafka-python (a member leaves once, so there is no hand parser),
answered through the runtime without a task.

Versions (Kafka's LeaveGroupRequest/Response specs): v0-2 carry one member id, normalized into one
LeaveMember (LeaveGroupRequest.normalizedData), and their response folds member errors into the top-level
code (LeaveGroupResponse's constructor); v1 adds the throttle time, v3 a batch of members with group
instance ids (KIP-345) and per-member errors, v4 is flexible, v5 a reason per member (KIP-800).
"""
from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import LeaveGroupResponse

from coordinator_server.group.api import LeaveGroupInput, LeaveGroupResult, LeaveMember
from coordinator_server.net.request_decode import decode_request
from protocol.errors import Errors

from .answer import FramedAnswer
from .context import ApiContext


def serve(payload: bytes, api: ApiContext) -> asyncio.Future[bytes]:
    header, req = decode_request(payload, api.note_client_id)
    inp = leave_group_input(req, header.api_version)
    answer = FramedAnswer("LeaveGroup", header.api_version, header.correlation_id, leave_group_response)
    if api.access.group("READ", inp.group_id):
        api.runtime.leave_group(inp, answer.result, answer.failed)
    else:
        answer.result(LeaveGroupResult(Errors.GROUP_AUTHORIZATION_FAILED))
    return answer.future


def leave_group_input(req: Any, version: int) -> LeaveGroupInput:
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
