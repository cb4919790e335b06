"""kafka-python's own response classes built from the core's results: the reference the hand-written encoders
of coordinator_server/net/apis/ are held to byte for byte (the server answers with those encoders)."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import HeartbeatResponse, JoinGroupResponse, SyncGroupResponse

from coordinator_server.group.api import JoinGroupResult, SyncGroupResult
from protocol.errors import Errors


def join_group_response(result: JoinGroupResult, version: int) -> ApiMessage:
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


def sync_group_response(result: SyncGroupResult, version: int) -> ApiMessage:
    fields: dict[str, object] = {"error_code": int(result.error), "assignment": result.assignment}
    if version >= 1:
        fields["throttle_time_ms"] = 0
    if version >= 5:
        fields["protocol_type"] = result.protocol_type
        fields["protocol_name"] = result.protocol_name
    return SyncGroupResponse[version](**fields)


def heartbeat_response(error: Errors, version: int) -> ApiMessage:
    if version >= 1:
        return HeartbeatResponse[version](throttle_time_ms=0, error_code=int(error))
    return HeartbeatResponse[0](error_code=int(error))
