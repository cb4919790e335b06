"""What goes into and comes out of the coordinator core, independent of wire versions.

The protocol layer turns each decoded request (any version) into one of these inputs and each result
back into the response of the request's version. Version-dependent *behaviour* (MEMBER_ID_REQUIRED from
JoinGroup v4, SkipAssignment from v9, ...) is decided in the core from `api_version`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from protocol.errors import Errors
from protocol.value_class import ValueClass

from .records import CoordinatorRecord


@dataclass(frozen=True, slots=True)
class JoinGroupInput:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int  # v0: the protocol layer passes the session timeout
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    api_version: int
    client_id: str
    client_host: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResult:
    error: Errors
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupInput:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None  # v5+, None when absent
    protocol_name: str | None  # v5+, None when absent
    assignments: tuple[tuple[str, bytes], ...]  # (member id, assignment); empty from followers
    api_version: int


@dataclass(slots=True)
class SyncGroupResult:
    error: Errors
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class HeartbeatInput(ValueClass):
    """Immutable like the other inputs, but a ValueClass rather than a frozen dataclass: one is built per
    heartbeat, the hottest request (protocol/value_class.py says why)."""

    __slots__ = ("api_version", "generation_id", "group_id", "group_instance_id", "member_id")

    def __init__(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                 api_version: int) -> None:
        self.group_id: Final = group_id
        self.generation_id: Final = generation_id
        self.member_id: Final = member_id
        self.group_instance_id: Final = group_instance_id
        self.api_version: Final = api_version

    def _fields(self) -> tuple[str, int, str, str | None, int]:
        return self.group_id, self.generation_id, self.member_id, self.group_instance_id, self.api_version


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupInput:
    group_id: str
    members: tuple[LeaveMember, ...]  # v0-2 are normalized into one entry
    api_version: int


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: Errors


@dataclass(slots=True)
class LeaveGroupResult:
    error: Errors
    members: list[LeaveMemberResult] = field(default_factory=list)


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]
AppendCallback = Callable[[Errors, int], None]  # (error of the write, now_ms when it finished)


class PendingAppend:
    """Records the core wants durable before it acts further.

    The shell writes `records` to `__consumer_offsets` partition `partition` (one batch), and once the
    write is durable per policy — or has failed — calls `complete(error, now_ms)`. Appends of one
    partition must be written in the order the core emitted them. A plain class, not a dataclass: one is
    built per commit, and a dataclass's generated `__init__` runs interpreted even when compiled.
    """

    __slots__ = ("completed", "group_id", "on_complete", "partition", "records")

    def __init__(self, group_id: str, partition: int, records: tuple[CoordinatorRecord, ...],
                 on_complete: AppendCallback) -> None:
        self.group_id: Final = group_id
        self.partition: Final = partition
        self.records: Final = records
        self.on_complete: Final = on_complete
        self.completed = False

    def __repr__(self) -> str:
        return (f"PendingAppend(group_id={self.group_id!r}, partition={self.partition}, records={self.records!r}, "
                f"completed={self.completed})")

    def complete(self, error: Errors, now_ms: int) -> None:
        if self.completed:
            raise RuntimeError("append completed twice")
        self.completed = True
        self.on_complete(error, now_ms)


# How a part of the core hands records to the shell: (group id, records, on_done with the write's error).
# The façade's `emit_append` is one; offsets and admin get it as a plain function, not the whole façade.
AppendRecords = Callable[[str, tuple[CoordinatorRecord, ...], Callable[[Errors], None]], None]


# -- committed offsets ---------------------------------------------------------------------------------


class CommitPartition(ValueClass):
    """One partition's commit; a ValueClass, built per commit."""

    __slots__ = ("commit_timestamp_ms", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self, topic: str, partition: int, offset: int,
        leader_epoch: int, metadata: str | None, commit_timestamp_ms: int = -1,
    ) -> None:
        self.topic: Final = topic
        self.partition: Final = partition
        self.offset: Final = offset
        self.leader_epoch: Final = leader_epoch  # -1 = none
        self.metadata: Final = metadata
        # OffsetCommit v1 alone carries one per partition; -1 (every later version) = now
        self.commit_timestamp_ms: Final = commit_timestamp_ms

    def _fields(self) -> tuple[str, int, int, int, str | None, int]:
        return (
            self.topic, self.partition, self.offset, self.leader_epoch, self.metadata,
            self.commit_timestamp_ms
        )


class OffsetCommitInput(ValueClass):
    """An OffsetCommit as the core takes it; a ValueClass, built per commit."""

    __slots__ = (
        "api_version", "generation_id", "group_id", "group_instance_id", "member_id", "partitions",
        "retention_time_ms"
    )

    def __init__(
        self, group_id: str | None, generation_id: int, member_id: str,
        group_instance_id: str | None, retention_time_ms: int, partitions: tuple[CommitPartition, ...],
        api_version: int,
    ) -> None:
        self.group_id: Final = group_id
        self.generation_id: Final = generation_id  # generation, or -1 for simple consumers and admin tools
        self.member_id: Final = member_id
        self.group_instance_id: Final = group_instance_id
        self.retention_time_ms: Final = retention_time_ms  # v2-4; -1 = the broker's retention
        self.partitions: Final = partitions  # only partitions that exist: the API layer answers the rest
        self.api_version: Final = api_version

    def _fields(self) -> tuple[str | None, int, str, str | None, int, tuple[CommitPartition, ...], int]:
        return (
            self.group_id, self.generation_id, self.member_id, self.group_instance_id,
            self.retention_time_ms, self.partitions, self.api_version
        )


class PartitionResult(ValueClass):
    """One partition's answer to a commit; a ValueClass, built per commit."""

    __slots__ = ("error", "partition", "topic")

    def __init__(self, topic: str, partition: int, error: Errors) -> None:
        self.topic: Final = topic
        self.partition: Final = partition
        self.error: Final = error

    def _fields(self) -> tuple[str, int, Errors]:
        return self.topic, self.partition, self.error


class OffsetCommitResult(ValueClass):
    """The core's answer to an OffsetCommit; a ValueClass, built per commit."""

    __slots__ = ("partitions",)

    def __init__(self, partitions: list[PartitionResult]) -> None:
        self.partitions: Final = partitions

    def _fields(self) -> tuple[list[PartitionResult]]:
        return (self.partitions,)


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1 = nothing committed
    leader_epoch: int
    metadata: str
    error: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchInput:
    group_id: str | None
    partitions: tuple[tuple[str, int], ...] | None  # None = every committed offset of the group
    require_stable: bool
    api_version: int
    member_id: str | None = None  # v9+: a consumer group member fetching at its epoch (KIP-848)
    member_epoch: int = -1


@dataclass(slots=True)
class OffsetFetchResult:
    error: Errors  # group-level; where it goes on the wire depends on the version
    offsets: list[FetchedOffset]


@dataclass(frozen=True, slots=True)
class OffsetDeleteInput:
    group_id: str | None
    partitions: tuple[tuple[str, int], ...]


@dataclass(slots=True)
class OffsetDeleteResult:
    error: Errors
    partitions: list[PartitionResult]


OffsetCommitCallback = Callable[[OffsetCommitResult], None]
OffsetDeleteCallback = Callable[[OffsetDeleteResult], None]


# -- group administration ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: Errors
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...] = ()
    error_message: str | None = None  # None: the error's default message


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error: Errors


DeleteGroupsCallback = Callable[[list[DeletedGroup]], None]
