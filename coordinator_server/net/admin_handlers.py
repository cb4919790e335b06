"""DescribeGroups (0-6), ListGroups (0-5) and DeleteGroups (0-2): decode → runtime → encode.
Authorization as Kafka's API layer does it: DESCRIBE per described group (GROUP_AUTHORIZATION_FAILED, 30, in
that group's entry), ListGroups shows only describable groups unless the caller may DESCRIBE the cluster, DELETE
per deleted group (30 in its entry)."""
from __future__ import annotations

from typing import Any, Protocol

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse

from coordinator_server.group.api import DeletedGroup, GroupDescription, ListedGroup
from coordinator_server.security.authorizer import Access
from protocol.errors import Errors


class AdminRuntime(Protocol):
    async def describe_groups(self, group_ids: list[str | None], api_version: int) -> list[GroupDescription]: ...
    async def list_groups(self, states: list[str], types: list[str]) -> tuple[Errors, list[ListedGroup]]: ...
    async def delete_groups(self, group_ids: list[str | None]) -> list[DeletedGroup]: ...


class AdminHandlers:
    def __init__(self, runtime: AdminRuntime) -> None:
        self.runtime = runtime

    async def describe_groups(self, req: Any, version: int, access: Access) -> Any:
        ids = list(req.groups)
        allowed = [g for g in ids if access.group("DESCRIBE", g)]
        described = iter(await self.runtime.describe_groups(allowed, version) if allowed or not ids else [])
        out = [next(described) if access.group("DESCRIBE", g) else
               GroupDescription(g or "", Errors.GROUP_AUTHORIZATION_FAILED, "", "", "") for g in ids]
        operations = None
        if version >= 3 and req.include_authorized_operations:
            # As Kafka: only a group answered without an error says what the caller may do to it.
            operations = [access.group_operations(d.group_id) if d.error is Errors.NONE else None for d in out]
        return describe_groups_response(out, version, operations)

    async def list_groups(self, req: Any, version: int, access: Access) -> Any:
        states, types = list_groups_filters(req, version)
        error, groups = await self.runtime.list_groups(states, types)
        if not access.cluster("DESCRIBE"):
            groups = [g for g in groups if access.group("DESCRIBE", g.group_id)]
        return list_groups_response(error, groups, version)

    async def delete_groups(self, req: Any, version: int, access: Access) -> Any:
        ids = list(req.groups_names)
        allowed = [g for g in ids if access.group("DELETE", g)]
        results = await self.runtime.delete_groups(allowed) if allowed or not ids else []
        denied = dict.fromkeys(g for g in ids if g not in allowed)  # once each, as Kafka dedupes
        results += [DeletedGroup(g or "", Errors.GROUP_AUTHORIZATION_FAILED) for g in denied]
        return delete_groups_response(results, version)


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
