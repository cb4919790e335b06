"""DescribeGroups, ListGroups and DeleteGroups: decode → runtime → encode.
Authorization as Kafka's API layer does it: DESCRIBE per described group (GROUP_AUTHORIZATION_FAILED, 30, in
that group's entry), ListGroups shows only describable groups unless the caller may DESCRIBE the cluster, DELETE
per deleted group (30 in its entry)."""
from __future__ import annotations

from typing import Any, Protocol

from coordinator_server.group.api import DeletedGroup, GroupDescription, ListedGroup
from coordinator_server.security.authorizer import Access
from protocol import admin_messages as am
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
        return am.describe_groups_response(out, version, operations)

    async def list_groups(self, req: Any, version: int, access: Access) -> Any:
        states, types = am.list_groups_filters(req, version)
        error, groups = await self.runtime.list_groups(states, types)
        if not access.cluster("DESCRIBE"):
            groups = [g for g in groups if access.group("DESCRIBE", g.group_id)]
        return am.list_groups_response(error, groups, version)

    async def delete_groups(self, req: Any, version: int, access: Access) -> Any:
        ids = list(req.groups_names)
        allowed = [g for g in ids if access.group("DELETE", g)]
        results = await self.runtime.delete_groups(allowed) if allowed or not ids else []
        denied = dict.fromkeys(g for g in ids if g not in allowed)  # once each, as Kafka dedupes
        results += [DeletedGroup(g or "", Errors.GROUP_AUTHORIZATION_FAILED) for g in denied]
        return am.delete_groups_response(results, version)
