"""DescribeGroups (0-6), ListGroups (0-5) and DeleteGroups (0-2): core results to responses. No I/O."""
from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse

from coordinator_server.group.api import DeletedGroup, GroupDescription, ListedGroup
from protocol.errors import Errors

# kafka-python models AuthorizedOperations as a bit set; None encodes Kafka's INT32_MIN, "not requested".
AUTHORIZED_OPERATIONS_OMITTED = None

_DescribedGroup = DescribeGroupsResponse.DescribedGroup
_DescribedMember = _DescribedGroup.DescribedGroupMember
_ListedGroup = ListGroupsResponse.ListedGroup
_DeletableGroupResult = DeleteGroupsResponse.DeletableGroupResult


def describe_groups_response(descriptions: list[GroupDescription], version: int,
                             authorized_operations: list[frozenset[int] | None] | None = None) -> Any:
    """`authorized_operations`, one per description when the request asked for them (v3+): the operation
    codes the caller may do on that group, or None for a group not described (an error)."""
    operations = authorized_operations or [AUTHORIZED_OPERATIONS_OMITTED] * len(descriptions)
    groups = [
        _DescribedGroup(
            error_code=int(d.error),
            error_message=None if d.error is Errors.NONE else d.error_message or d.error.message,
            group_id=d.group_id,
            group_state=d.state,
            protocol_type=d.protocol_type,
            protocol_data=d.protocol_data,
            members=[
                _DescribedMember(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                                 client_host=m.client_host, member_metadata=m.metadata,
                                 member_assignment=m.assignment)
                for m in d.members
            ],
            authorized_operations=ops,
        )
        for d, ops in zip(descriptions, operations, strict=True)
    ]
    return DescribeGroupsResponse[version](throttle_time_ms=0, groups=groups)


def list_groups_filters(req: Any, version: int) -> tuple[list[str], list[str]]:
    states = list(req.states_filter or []) if version >= 4 else []
    types = list(req.types_filter or []) if version >= 5 else []
    return states, types


def list_groups_response(error: Errors, groups: list[ListedGroup], version: int) -> Any:
    return ListGroupsResponse[version](
        throttle_time_ms=0,
        error_code=int(error),
        groups=[_ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                             group_type=g.group_type) for g in groups],
    )


def delete_groups_response(results: list[DeletedGroup], version: int) -> Any:
    return DeleteGroupsResponse[version](
        throttle_time_ms=0,
        results=[_DeletableGroupResult(group_id=r.group_id, error_code=int(r.error)) for r in results],
    )
