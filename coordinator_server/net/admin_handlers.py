"""DescribeGroups, ListGroups and DeleteGroups: decode → runtime → encode (kafka-semantics.md §2.8-§2.10)."""
from __future__ import annotations

from typing import Any, Protocol

from coordinator_server.group.api import DeletedGroup, GroupDescription, ListedGroup
from protocol import admin_messages as am
from protocol.errors import Errors


class AdminRuntime(Protocol):
    async def describe_groups(self, group_ids: list[str | None], api_version: int) -> list[GroupDescription]: ...
    async def list_groups(self, states: list[str], types: list[str]) -> tuple[Errors, list[ListedGroup]]: ...
    async def delete_groups(self, group_ids: list[str | None]) -> list[DeletedGroup]: ...


class AdminHandlers:
    def __init__(self, runtime: AdminRuntime) -> None:
        self.runtime = runtime

    async def describe_groups(self, req: Any, version: int) -> Any:
        return am.describe_groups_response(await self.runtime.describe_groups(list(req.groups), version), version)

    async def list_groups(self, req: Any, version: int) -> Any:
        states, types = am.list_groups_filters(req, version)
        error, groups = await self.runtime.list_groups(states, types)
        return am.list_groups_response(error, groups, version)

    async def delete_groups(self, req: Any, version: int) -> Any:
        return am.delete_groups_response(await self.runtime.delete_groups(list(req.groups_names)), version)
