"""DescribeGroups, ListGroups and DeleteGroups: what operators see of the
groups, and the one way to remove an Empty group with its offsets.

The operations see the group side through `AdminGroups` (the group table to read, the gate, and the one
call that forgets a group) and write through an append function; the façade (coordinator.py) provides
both and imports this module, never the reverse.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Protocol

import structlog

from protocol.errors import Errors

from .api import (
    AppendRecords,
    DeletedGroup,
    DeleteGroupsCallback,
    GroupDescription,
    ListedGroup,
    MemberDescription,
)
from .consumer import admin as consumer_admin
from .consumer.group import GROUP_TYPE_CONSUMER, ConsumerGroup, ConsumerGroupState
from .group import GroupMetadata
from .records import CoordinatorRecord, GroupMetadataRecord, OffsetCommitRecord
from .state import DEAD, EMPTY, STABLE
from .table import Group
from .write_errors import write_error

log = structlog.get_logger("coordinator_server.group.admin")

GROUP_TYPE_CLASSIC = "classic"


class AdminGroups(Protocol):
    """The group side as the admin operations see it."""

    @property
    def active(self) -> bool: ...

    @property
    def groups(self) -> Mapping[str, Group]:
        """Every group by id, of any type (table.py)."""
        ...

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None: ...

    def remove_group(self, group: GroupMetadata) -> None: ...

    def remove_consumer_group(self, group: ConsumerGroup, reason: str) -> None: ...


class GroupAdmin:
    def __init__(self, core: AdminGroups, append: AppendRecords) -> None:
        self.core = core
        self.append = append

    def describe_groups(self, group_ids: list[str | None], api_version: int) -> list[GroupDescription]:
        return [self._describe(group_id, api_version) for group_id in group_ids]

    def _describe(self, group_id: str | None, api_version: int) -> GroupDescription:
        error = self.core.validate_group_status(group_id, allow_empty=True)
        if error is not None:
            return GroupDescription(group_id or "", error, "", "", "")
        assert group_id is not None
        group = self.core.groups.get(group_id)
        if group is not None and not isinstance(group, GroupMetadata):
            # Kafka's classicGroup lookup: DescribeGroups v6 says why; older versions only see a Dead group.
            if api_version >= 6:
                return GroupDescription(group_id, Errors.GROUP_ID_NOT_FOUND, str(DEAD), "", "",
                                        error_message=f"Group {group_id} is not a classic group.")
            return GroupDescription(group_id, Errors.NONE, str(DEAD), "", "")
        if not isinstance(group, GroupMetadata) or group.is_state(DEAD):
            if api_version >= 6:
                return GroupDescription(group_id, Errors.GROUP_ID_NOT_FOUND, str(DEAD), "", "",
                                        error_message=f"Group {group_id} not found.")
            return GroupDescription(group_id, Errors.NONE, str(DEAD), "", "")
        stable = group.is_state(STABLE)
        protocol = group.protocol_name
        members = tuple(
            MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                # The metadata is shown for a settled generation only; the assignment is the member's
                # last one in every state, as Kafka describes a rebalancing group.
                m.metadata(protocol) if stable and protocol is not None else b"",
                m.assignment,
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id, Errors.NONE, str(group.state), group.protocol_type or "",
            protocol if stable and protocol is not None else "", members,
        )

    def list_groups(self, states_filter: list[str], types_filter: list[str]) -> tuple[Errors, list[ListedGroup]]:
        if not self.core.active:
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        # Share and streams groups do not exist here: a filter on those types alone lists nothing.
        consumer = not types or GROUP_TYPE_CONSUMER in types
        classic = not types or GROUP_TYPE_CLASSIC in types
        listed: list[ListedGroup] = []
        for group in self.core.groups.values():
            entry: ListedGroup | None = None
            if isinstance(group, ConsumerGroup):
                entry = consumer_admin.listed(group) if consumer else None
            elif isinstance(group, GroupMetadata) and classic and not group.is_state(DEAD):
                entry = ListedGroup(group.group_id, group.protocol_type or "", str(group.state))
            if entry is not None and (not states or entry.state.lower() in states):
                listed.append(entry)
        return Errors.NONE, listed

    def delete_groups(self, group_ids: list[str | None], respond: DeleteGroupsCallback) -> None:
        results: list[DeletedGroup] = []
        records_by_group: list[tuple[str, tuple[CoordinatorRecord, ...]]] = []
        seen: set[str | None] = set()
        for group_id in group_ids:
            if group_id in seen:
                continue  # duplicates are removed, as the API layer does
            seen.add(group_id)
            error = self._delete_one(group_id, records_by_group)
            results.append(DeletedGroup(group_id or "", error))
        if not records_by_group:
            respond(results)
            return
        # One append per group (groups live in different partitions); answer once all are written.
        outstanding = len(records_by_group)
        failed: dict[str, Errors] = {}

        def on_written(group_id: str, error: Errors) -> None:
            nonlocal outstanding
            if error is not Errors.NONE:
                failed[group_id] = write_error(error)
            outstanding -= 1
            if outstanding == 0:
                respond([DeletedGroup(r.group_id, failed.get(r.group_id, r.error)) for r in results])

        for group_id, records in records_by_group:
            self.append(group_id, records, functools.partial(on_written, group_id))

    def _delete_one(self, group_id: str | None, out: list[tuple[str, tuple[CoordinatorRecord, ...]]]) -> Errors:
        error = self.core.validate_group_status(group_id, allow_empty=True)
        if error is not None:
            return error
        assert group_id is not None
        group = self.core.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return self._delete_consumer_group(group, out)
        if not isinstance(group, GroupMetadata) or group.is_state(DEAD):
            return Errors.GROUP_ID_NOT_FOUND
        if not group.is_state(EMPTY):
            return Errors.NON_EMPTY_GROUP
        records: list[CoordinatorRecord] = [OffsetCommitRecord(group_id, t, p, None) for t, p in sorted(group.offsets)]
        records.append(GroupMetadataRecord(group_id, None))
        group.offsets.clear()
        self.core.remove_group(group)
        log.info("group_deleted", group_id=group_id, offsets=len(records) - 1)
        out.append((group_id, tuple(records)))
        return Errors.NONE


    def _delete_consumer_group(self, group: ConsumerGroup, out: list[tuple[str, tuple[CoordinatorRecord, ...]]]) -> Errors:
        if group.state is not ConsumerGroupState.EMPTY:
            return Errors.NON_EMPTY_GROUP
        records: list[CoordinatorRecord] = [OffsetCommitRecord(group.group_id, t, p, None) for t, p in sorted(group.offsets)]
        offsets = len(records)
        records.extend(consumer_admin.group_tombstones(group))
        group.offsets.clear()
        self.core.remove_consumer_group(group, "DeleteGroups")
        log.info("group_deleted", group_id=group.group_id, offsets=offsets)
        out.append((group.group_id, tuple(records)))
        return Errors.NONE

