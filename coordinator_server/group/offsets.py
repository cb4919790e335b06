"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and retention.

An offset is visible only once its record is durable: a commit is applied to the group in the append's
completion, and until then the partition counts as a pending commit (never expired meanwhile). Because
the shell holds the group's lock across that append, a fetch that takes the same lock waits behind earlier
commits — which is what RequireStable asks for, and what the new coordinator does instead of answering
UNSTABLE_OFFSET_COMMIT (only transactional commits would, and this server has no transactions).

Like the new coordinator's OffsetMetadataManager, the offset manager does not reach into the group side:
it gets a narrow view of it (`OffsetGroups`: a group lookup, the gate and member validation, the commit-as-
heartbeat) and an append function. The façade (coordinator.py) provides both and imports this module;
nothing here imports the façade.
"""
from __future__ import annotations

from typing import Final, Protocol

from protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from protocol.errors import Errors

from .api import (
    AppendRecords,
    FetchedOffset,
    OffsetCommitCallback,
    OffsetCommitInput,
    OffsetCommitResult,
    OffsetDeleteCallback,
    OffsetDeleteInput,
    OffsetDeleteResult,
    OffsetFetchInput,
    OffsetFetchResult,
    PartitionResult,
)
from .consumer.errors import ConsumerGroupError
from .consumer.group import ConsumerGroup
from .consumer.offsets import validate_offset_commit, validate_offset_fetch
from .group import GroupMetadata
from .member import MemberMetadata
from .records import OffsetCommitRecord, OffsetCommitValue
from .settings import OFFSETS_RETENTION_MS
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .write_errors import OFFSET_COMMIT_WRITE_ERRORS

# Read once: each `Errors.NONE` in compiled code is a lookup through the enum's metaclass (its
# `__getattr__` hook), and a durable commit's callbacks test it on every append.
_NONE: Final = Errors.NONE


class OffsetGroups(Protocol):
    """The group side as the offset manager sees it."""

    @property
    def wall_ms(self) -> int: ...

    def classic_group(self, group_id: str) -> GroupMetadata | None:
        """The classic group of that id, if it is one (the id space is shared with consumer groups)."""
        ...

    def create_simple_group(self, group_id: str) -> GroupMetadata: ...

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None: ...

    def validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
    ) -> Errors | None: ...

    def complete_and_schedule_next_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None: ...

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The KIP-848 consumer group of that id, if it is one (it shares the id space)."""
        ...


class OffsetHolder(Protocol):
    """Where a group's committed offsets live: a classic group or a consumer group."""

    @property
    def group_id(self) -> str: ...

    @property
    def offsets(self) -> dict[tuple[str, int], OffsetCommitValue]: ...

    @property
    def pending_offset_commits(self) -> dict[tuple[str, int], int]: ...

    @property
    def removed(self) -> bool: ...


class OffsetManager:
    def __init__(
        self,
        core: OffsetGroups,
        append: AppendRecords,
        offset_metadata_max_bytes: int = 4096,
        retention_ms: int = OFFSETS_RETENTION_MS,
    ) -> None:
        self.core = core
        self.append = append
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.retention_ms = retention_ms

    # -- OffsetCommit --------------------------------------------------------------------------------

    def handle_offset_commit(self, inp: OffsetCommitInput, respond: OffsetCommitCallback) -> None:
        def all_fail(error: Errors) -> None:
            respond(OffsetCommitResult([PartitionResult(p.topic, p.partition, error) for p in inp.partitions]))

        core = self.core
        error = core.validate_group_status(inp.group_id, allow_empty=True)
        if error is not None:
            all_fail(error)
            return
        assert inp.group_id is not None
        group = core.classic_group(inp.group_id)
        if group is None:
            consumer = core.consumer_group(inp.group_id)
            if consumer is not None:
                self._commit_to_consumer_group(consumer, inp, respond)
                return
            if inp.generation_id >= 0:
                # A member of a group this coordinator does not know: v9+ says so (new coordinator).
                all_fail(Errors.GROUP_ID_NOT_FOUND if inp.api_version >= 9 else Errors.ILLEGAL_GENERATION)
                return
            group = core.create_simple_group(inp.group_id)
        error = self._validate_commit(group, inp)
        if error is not None:
            all_fail(error)
            return
        if group.state in (STABLE, PREPARING_REBALANCE) and group.has(inp.member_id):
            # A commit from a member counts as a heartbeat.
            core.complete_and_schedule_next_heartbeat(group, group.get(inp.member_id))
        self._store_offsets(group, inp, respond)

    def _validate_commit(self, group: GroupMetadata, inp: OffsetCommitInput) -> Errors | None:
        if group.is_state(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if inp.generation_id < 0 and group.is_state(EMPTY):
            return None  # simple consumers and admin tools: no member checks at all
        if inp.generation_id >= 0 or inp.member_id or inp.group_instance_id is not None:
            error = self.core.validate_current_member(group, inp.member_id, inp.group_instance_id, "offset-commit")
            if error is not None:
                return error
            if inp.generation_id != group.generation_id:
                return Errors.ILLEGAL_GENERATION
        else:
            return Errors.UNKNOWN_MEMBER_ID  # a simple commit into a group that has members
        if group.is_state(COMPLETING_REBALANCE):
            return Errors.REBALANCE_IN_PROGRESS
        return None

    def _commit_to_consumer_group(self, group: ConsumerGroup, inp: OffsetCommitInput,
                                  respond: OffsetCommitCallback) -> None:
        """KIP-848: the generation field carries the member epoch, which must be the member's current one."""
        try:
            validate_offset_commit(group, inp.member_id, inp.generation_id, inp.api_version)
        except ConsumerGroupError as e:
            respond(OffsetCommitResult([PartitionResult(p.topic, p.partition, e.error) for p in inp.partitions]))
            return
        self._store_offsets(group, inp, respond)

    def _store_offsets(self, group: OffsetHolder, inp: OffsetCommitInput, respond: OffsetCommitCallback) -> None:
        wall_ms = self.core.wall_ms
        expire_ms = wall_ms + inp.retention_time_ms if inp.retention_time_ms != -1 else -1
        commit = _PendingCommit(group, inp, respond)
        records = []
        for p in inp.partitions:
            metadata = p.metadata if p.metadata is not None else ""
            key = (p.topic, p.partition)
            if len(metadata) > self.offset_metadata_max_bytes:
                commit.results[key] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            committed_ms = p.commit_timestamp_ms if p.commit_timestamp_ms != -1 else wall_ms
            value = OffsetCommitValue(p.offset, p.leader_epoch, metadata, committed_ms, expire_ms)
            commit.to_write.append((key, value))
            records.append(OffsetCommitRecord(group.group_id, p.topic, p.partition, value))
        if not records:
            commit.answer()
            return
        pending = group.pending_offset_commits
        for key, _ in commit.to_write:
            pending[key] = pending.get(key, 0) + 1
        self.append(group.group_id, tuple(records), commit.written)

    # -- OffsetFetch ---------------------------------------------------------------------------------

    def handle_offset_fetch(self, inp: OffsetFetchInput) -> OffsetFetchResult:
        error = self.core.validate_group_status(inp.group_id, allow_empty=True)
        if error is not None:
            return OffsetFetchResult(error, [])
        assert inp.group_id is not None
        group = self.core.classic_group(inp.group_id)
        offsets = {} if group is None or group.is_state(DEAD) else group.offsets
        consumer = self.core.consumer_group(inp.group_id) if group is None else None
        if consumer is not None:
            try:
                validate_offset_fetch(consumer, inp.member_id, inp.member_epoch)
            except ConsumerGroupError as e:
                return OffsetFetchResult(e.error, [])
            offsets = consumer.offsets
        if inp.partitions is None:
            return OffsetFetchResult(Errors.NONE, [
                FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata) for (t, p), v in sorted(offsets.items())
            ])
        fetched = []
        for topic, partition in inp.partitions:
            value = offsets.get((topic, partition))
            if value is None:
                fetched.append(FetchedOffset(topic, partition, -1, -1, ""))
            else:
                fetched.append(FetchedOffset(topic, partition, value.offset, value.leader_epoch, value.metadata))
        return OffsetFetchResult(Errors.NONE, fetched)

    # -- OffsetDelete --------------------------------------------------------------------------------

    def handle_offset_delete(self, inp: OffsetDeleteInput, callback: OffsetDeleteCallback) -> None:
        error = self.core.validate_group_status(inp.group_id)
        if error is not None:
            callback(OffsetDeleteResult(error, []))
            return
        assert inp.group_id is not None
        group = self.core.classic_group(inp.group_id)
        consumer = self.core.consumer_group(inp.group_id) if group is None else None
        if consumer is not None:
            self._delete_consumer_group_offsets(consumer, inp, callback)
            return
        if group is None or group.is_state(DEAD):
            callback(OffsetDeleteResult(Errors.GROUP_ID_NOT_FOUND, []))
            return
        if not group.is_state(EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            callback(OffsetDeleteResult(Errors.NON_EMPTY_GROUP, []))
            return
        subscribed = None if group.is_state(EMPTY) else group.subscribed_topics
        results: list[PartitionResult] = []
        deleted: list[tuple[str, int]] = []
        for topic, partition in inp.partitions:
            if not group.is_state(EMPTY) and (subscribed is None or topic in subscribed):
                results.append(PartitionResult(topic, partition, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
            else:
                results.append(PartitionResult(topic, partition, Errors.NONE))
                deleted.append((topic, partition))
        tombstones = [OffsetCommitRecord(group.group_id, t, p, None) for t, p in deleted if (t, p) in group.offsets]
        for key in deleted:
            group.offsets.pop(key, None)
        if not tombstones:
            callback(OffsetDeleteResult(Errors.NONE, results))
            return
        self.append(
            group.group_id, tuple(tombstones),
            lambda error: callback(OffsetDeleteResult(Errors.NONE, results)),
        )

    def _delete_consumer_group_offsets(self, group: ConsumerGroup, inp: OffsetDeleteInput,
                                       callback: OffsetDeleteCallback) -> None:
        """Kafka's rule for every modern group: any state, but not the offsets of a subscribed topic."""
        subscribed = group.subscribed_topic_names()
        results: list[PartitionResult] = []
        deleted: list[tuple[str, int]] = []
        for topic, partition in inp.partitions:
            if topic in subscribed:
                results.append(PartitionResult(topic, partition, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
            else:
                results.append(PartitionResult(topic, partition, Errors.NONE))
                deleted.append((topic, partition))
        tombstones = tuple(OffsetCommitRecord(group.group_id, t, p, None) for t, p in deleted if (t, p) in group.offsets)
        for key in deleted:
            group.offsets.pop(key, None)
        if not tombstones:
            callback(OffsetDeleteResult(Errors.NONE, results))
            return
        self.append(group.group_id, tombstones, lambda error: callback(OffsetDeleteResult(Errors.NONE, results)))

    # -- retention -----------------------------------------------------------------------------------

    def cleanup_expired_offsets(self, group: GroupMetadata, wall_ms: int) -> list[OffsetCommitRecord]:
        """Drop the group's offsets past retention; returns their tombstones (the new coordinator's
        cleanupExpiredOffsets). Whether the group goes too is the group side's call (the façade's
        `cleanup_group_metadata`)."""
        expired = self._expired_offsets(group, wall_ms)
        for key in expired:
            del group.offsets[key]
        return [OffsetCommitRecord(group.group_id, t, p, None) for t, p in expired]

    def cleanup_expired_consumer_group_offsets(self, group: ConsumerGroup, wall_ms: int) -> list[OffsetCommitRecord]:
        """A consumer group's offsets expire from their commit time, never while a topic is subscribed
        (Kafka's OffsetExpirationCondition of modern groups)."""
        subscribed = group.subscribed_topic_names()
        expired = []
        for key, value in group.offsets.items():
            if key[0] in subscribed or key in group.pending_offset_commits:
                continue
            deadline = value.expire_timestamp_ms if value.expire_timestamp_ms != -1 else \
                value.commit_timestamp_ms + self.retention_ms
            if wall_ms >= deadline:
                expired.append(key)
        for key in expired:
            del group.offsets[key]
        return [OffsetCommitRecord(group.group_id, t, p, None) for t, p in expired]

    def _expired_offsets(self, group: GroupMetadata, wall_ms: int) -> list[tuple[str, int]]:
        if group.protocol_type is not None and group.is_state(EMPTY):
            since = group.state_timestamp_ms

            def base(value: OffsetCommitValue) -> int:
                return since if since >= 0 else value.commit_timestamp_ms

            subscribed: set[str] = set()
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics is not None and group.is_state(STABLE):
            subscribed = group.subscribed_topics

            def base(value: OffsetCommitValue) -> int:
                return value.commit_timestamp_ms
        elif group.protocol_type is None:
            subscribed = set()

            def base(value: OffsetCommitValue) -> int:
                return value.commit_timestamp_ms
        else:
            return []
        expired = []
        for key, value in group.offsets.items():
            if key[0] in subscribed or key in group.pending_offset_commits:
                continue
            if value.expire_timestamp_ms != -1:
                if wall_ms >= value.expire_timestamp_ms:
                    expired.append(key)
            elif wall_ms - base(value) >= self.retention_ms:
                expired.append(key)
        return expired


class _PendingCommit:
    """One OffsetCommit's records on their way to the log: once written (or not), the offsets are applied
    and the request answered per partition. An object rather than closures: this runs per commit."""

    __slots__ = ("group", "inp", "respond", "results", "to_write")

    def __init__(self, group: OffsetHolder, inp: OffsetCommitInput, respond: OffsetCommitCallback) -> None:
        self.group = group
        self.inp = inp
        self.respond = respond
        self.results: dict[tuple[str, int], Errors] = {}
        self.to_write: list[tuple[tuple[str, int], OffsetCommitValue]] = []

    def written(self, error: Errors) -> None:
        group = self.group
        pending = group.pending_offset_commits
        apply = error is _NONE and not group.removed
        outcome = OFFSET_COMMIT_WRITE_ERRORS.get(error, error)
        results = self.results
        for key, value in self.to_write:
            remaining = pending.get(key, 1) - 1
            if remaining <= 0:
                pending.pop(key, None)
            else:
                pending[key] = remaining
            if apply:
                group.offsets[key] = value
            results[key] = outcome
        self.answer()

    def answer(self) -> None:
        results = self.results
        self.respond(OffsetCommitResult([
            PartitionResult(p.topic, p.partition, results[(p.topic, p.partition)]) for p in self.inp.partitions
        ]))
