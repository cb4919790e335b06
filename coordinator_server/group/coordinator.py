"""The group coordinator's façade: the shard the runtime and the tests call.

Theory of operation. Synchronous and single-threaded: every entry point takes the current monotonic time,
moves the shard's clock and routes the request to the manager of the group's type — the classic group
manager (classic_manager.py) or the KIP-848 consumer group manager (consumer/manager.py) — or to the offset
manager (offsets.py) and the admin operations (admin.py). The core never touches the disk: records it
wants durable go to `take_appends()`, and the shell calls `PendingAppend.complete` once they are written.

The cut, after Kafka's GroupCoordinatorShard: the shared state (clock, timer, the one group table of every
type, gate, appends) is the base class (shard.py); this class adds loading (one replay of a partition's
records into groups of every type, loader.py) and unloading of partitions, the retention sweep, the routing
by the group's type (groups of both kinds share the id space, one type per id: table.py) and KIP-848's
migration between them. Every arrow runs from here outwards: the offset manager and the admin operations see this class only
through the narrow protocols they define (`OffsetGroups`, `AdminGroups`), the consumer manager through
`ConsumerGroupsHost`, and they get `emit_append` as a plain function. settings.py is a leaf.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Final

import structlog
from mypy_extensions import mypyc_attr

from coordinator_server.purgatory import Timer, TimerTask
from protocol.errors import Errors

from .admin import GroupAdmin
from .api import (
    DeleteGroupsCallback,
    GroupDescription,
    HeartbeatInput,
    JoinCallback,
    JoinGroupInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    LeaveMemberResult,
    ListedGroup,
    OffsetCommitCallback,
    OffsetCommitInput,
    OffsetDeleteCallback,
    OffsetDeleteInput,
    OffsetFetchInput,
    OffsetFetchResult,
    SyncCallback,
    SyncGroupInput,
    SyncGroupResult,
)
from .classic_manager import ClassicGroupManager
from .consumer import admin as consumer_admin
from .consumer.api import ConsumerGroupDescription, ConsumerGroupHeartbeatInput, HeartbeatCallback
from .consumer.classic_members import ClassicMembers
from .consumer.errors import ConsumerGroupError
from .consumer.group import ConsumerGroup, ConsumerGroupState
from .consumer.manager import ConsumerGroupEvents, ConsumerGroupManager
from .consumer.member import ConsumerGroupMember
from .consumer.settings import ConsumerGroupConfig
from .consumer.topics import TopicsImage
from .group import GroupMetadata
from .loader import GroupLoader
from .member import MemberMetadata
from .migration import MalformedConsumerProtocol
from .offsets import OffsetManager
from .rebalance import GroupEvents
from .records import CoordinatorRecord, GroupMetadataRecord, OffsetCommitValue
from .settings import GroupConfig
from .shard import CoordinatorShard
from .state import EMPTY
from .table import Group

log = structlog.get_logger("coordinator_server.group")

# A C static (Final, compiled): reading an attribute of the Errors enum goes through its metaclass.
_HEARTBEAT_OK: Final = Errors.NONE


def default_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


# The runtime's tests drive it with a scripted core (tests/unit/test_runtime_appends.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class GroupCoordinator(CoordinatorShard):
    def __init__(
        self,
        config: GroupConfig,
        partitions: int,
        timer: Timer,
        member_id_factory: Callable[[str], str] = default_member_id,
        wall_offset_ms: int = 0,
        events: GroupEvents | None = None,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: TopicsImage | None = None,
        consumer_events: ConsumerGroupEvents | None = None,
    ) -> None:
        super().__init__(partitions, timer, wall_offset_ms)
        self.config = config
        self.member_id_factory = member_id_factory
        self.classic = ClassicGroupManager(self, config, events or GroupEvents(), member_id_factory)
        # The delayed operations' purgatories, as the shell and the metrics see them.
        self.heartbeat_purgatory = self.classic.heartbeat_purgatory
        self.rebalance_purgatory = self.classic.rebalance_purgatory
        self.offsets = OffsetManager(
            self, self.emit_append, config.offset_metadata_max_bytes, config.offsets_retention_ms
        )
        self.admin = GroupAdmin(self, self.emit_append)
        # KIP-848 consumer groups share the group-id space, the gate, the clock and the appends.
        self.consumer = ConsumerGroupManager(self, self.emit_append, consumer_config, topics, events=consumer_events,
                                             timers=self.timers)
        # KIP-848 migration: classic members inside consumer groups (consumer/classic_members.py).
        self.classic_members = ClassicMembers(self.consumer)
        self._cleanup = _OffsetsCleanup(self)

    @property
    def events(self) -> GroupEvents:
        """The classic groups' metrics events (the consumer manager has its own)."""
        return self.classic.events

    @events.setter
    def events(self, events: GroupEvents) -> None:
        self.classic.events = events

    # -- time ----------------------------------------------------------------------------------------

    def advance_clock(self, now_ms: int) -> int:
        """Run every timer due by now_ms; returns how many ran.

        Bucket by bucket, so each expiring operation sees its own expiration as "now": what it schedules
        next (another initial-join wait, a heartbeat deadline) is timed from then, however far the
        caller's clock jumped."""
        ran = 0
        while True:
            next_ms = self.timer.next_expiration_ms()
            if next_ms is None or next_ms > now_ms:
                break
            self._tick(next_ms)
            ran += self.timer.advance_clock(self.now_ms)
        self._tick(now_ms)
        return ran + self.timer.advance_clock(now_ms)

    def next_expiration_ms(self) -> int | None:
        return self.timer.next_expiration_ms()
    def remove_group(self, group: GroupMetadata) -> None:
        """Mark the group Dead and forget it; its tombstone is the caller's to write."""
        self.classic.remove_group(group)

    def create_simple_group(self, group_id: str) -> GroupMetadata:
        return self.classic.create_simple_group(group_id)

    def validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
    ) -> Errors | None:
        return self.classic.validate_current_member(group, member_id, group_instance_id, operation)

    def complete_and_schedule_next_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self.classic.complete_and_schedule_next_heartbeat(group, member)

    # -- loading and unloading ------------------------------------------------------------

    def begin_loading(self, partition: int, leader_epoch: int = 0) -> bool:
        """Mark `partition` as loading for `leader_epoch`: its groups answer COORDINATOR_LOAD_IN_PROGRESS
        until `load_partition`. As Kafka's coordinator runtime, only a newer epoch than the one held (or
        being loaded) starts a load; an older or equal one is ignored and False returned."""
        held = self.partition_epochs.get(partition)
        if held is not None and leader_epoch <= held:
            return False
        if held is not None and partition in self.owned_partitions:
            # Leader again at a newer epoch without having been told it lost the partition: what it holds
            # may be stale (another leader may have written in between), so it is unloaded and re-read.
            self.unload_partition(partition, None, self.now_ms)
        self.partition_epochs[partition] = leader_epoch
        self.loading_partitions.add(partition)
        return True

    def partition_epoch(self, partition: int) -> int | None:
        """The leader epoch of `partition` as this coordinator holds (or is loading) it; None if not held."""
        return self.partition_epochs.get(partition)

    def load_partition(self, partition: int, records: Iterable[CoordinatorRecord], now_ms: int,
                       leader_epoch: int | None = None) -> int:
        """Replay a partition's log; groups with members come back Stable with fresh session deadlines.
        With `leader_epoch`, a load that is no longer current (the partition was unloaded, or a newer
        epoch's load began meanwhile) is dropped and -1 returned."""
        if leader_epoch is not None and (partition not in self.loading_partitions
                                         or self.partition_epochs.get(partition) != leader_epoch):
            log.info("partition_load_superseded", partition=partition, leader_epoch=leader_epoch,
                     current_epoch=self.partition_epochs.get(partition))
            return -1
        self._tick(now_ms)
        if not self._cleanup.scheduled:
            # The first load is when the core first knows the time: start the periodic cleanup.
            self.timer.add(self._cleanup, self.now_ms)
        loader = GroupLoader()
        for record in records:
            loader.apply(record)
        loaded = 0
        for group in loader.build(self.wall_ms).values():
            # Each group joins the one table through the manager of its type, which restarts its timers.
            if isinstance(group, ConsumerGroup):
                self.consumer.on_loaded(group)
            elif isinstance(group, GroupMetadata):
                self.classic.on_loaded(group)
            loaded += 1
        self.loading_partitions.discard(partition)
        self.owned_partitions.add(partition)
        log.debug("partition_loaded", partition=partition, groups=loaded)
        return loaded

    def unload_partition(self, partition: int, leader_epoch: int | None, now_ms: int,
                         reason: str = "coordinator moved") -> int:
        """Stop coordinating the groups of `partition` (this node no longer leads it). Parked
        JoinGroup/SyncGroup requests of its groups are answered NOT_COORDINATOR, and every later request for
        them gets NOT_COORDINATOR from the gate. As Kafka's runtime, only an epoch newer than the one held
        unloads (None: unconditionally, for a lost ZooKeeper session). Returns the groups unloaded, or -1
        when the call was ignored as stale."""
        held = self.partition_epochs.get(partition)
        if leader_epoch is not None and held is not None and leader_epoch <= held:
            return -1
        self._tick(now_ms)
        self.partition_epochs.pop(partition, None)
        self.loading_partitions.discard(partition)
        self.owned_partitions.discard(partition)
        unloaded = 0
        for group in [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]:
            self._unload_group(group, reason)
            unloaded += 1
        log.info("partition_unloaded", partition=partition, leader_epoch=leader_epoch, groups=unloaded,
                 reason=reason)
        return unloaded

    def shutdown(self, now_ms: int) -> None:
        """Unload every group: parked requests get NOT_COORDINATOR so clients rediscover the coordinator."""
        self._tick(now_ms)
        self.active = False
        self._cleanup.cancel()
        for group in list(self.groups.values()):
            self._unload_group(group, "coordinator shutdown")
        self.groups.clear()

    def _unload_group(self, group: Group, reason: str) -> None:
        """The group leaves the table through the manager of its type (parked requests answered, timers
        cancelled); its records stay in the log for whoever loads the partition next."""
        if isinstance(group, GroupMetadata):
            self.classic.unload_group(group, reason)
            del self.groups[group.group_id]
        elif isinstance(group, ConsumerGroup):
            self.consumer.remove_group(group, reason)

    # -- committed offsets (offsets.py) --------------------------------------------------------------

    def handle_offset_commit(self, inp: OffsetCommitInput, now_ms: int, respond: OffsetCommitCallback) -> None:
        self._tick(now_ms)
        self.offsets.handle_offset_commit(inp, respond)

    def handle_offset_fetch(self, inp: OffsetFetchInput, now_ms: int) -> OffsetFetchResult:
        self._tick(now_ms)
        return self.offsets.handle_offset_fetch(inp)

    def handle_offset_delete(self, inp: OffsetDeleteInput, now_ms: int, respond: OffsetDeleteCallback) -> None:
        self._tick(now_ms)
        self.offsets.handle_offset_delete(inp, respond)

    def cleanup_group_metadata(self) -> tuple[int, int]:
        """Expire offsets past retention and remove Empty groups left with none. Returns (offsets, groups).

        Kafka's cleanupGroupMetadata: the offset manager drops a group's expired offsets, then the group
        goes too if it is Empty with nothing committed or in flight; one append per group."""
        wall_ms = self.wall_ms
        expired_total = removed_groups = 0
        for group in list(self.groups.values()):
            records: list[CoordinatorRecord] = []
            if isinstance(group, GroupMetadata):
                records.extend(self.offsets.cleanup_expired_offsets(group, wall_ms))
                expired_total += len(records)
                if group.is_state(EMPTY) and not group.offsets and not group.pending_offset_commits:
                    self.classic.remove_group(group)
                    records.append(GroupMetadataRecord(group.group_id, None))
                    removed_groups += 1
                    log.info("group_removed", group_id=group.group_id, reason="empty with no committed offsets")
            elif isinstance(group, ConsumerGroup):
                records.extend(self.offsets.cleanup_expired_consumer_group_offsets(group, wall_ms))
                expired_total += len(records)
                if (group.state is ConsumerGroupState.EMPTY and not group.offsets
                        and not group.pending_offset_commits):
                    records.extend(consumer_admin.group_tombstones(group))
                    self.consumer.remove_group(group, "empty with no committed offsets")
                    removed_groups += 1
            if records:
                # Like Kafka's acks=0 tombstones: a lost one is simply reissued at the next cleanup.
                self.emit_append(group.group_id, tuple(records), lambda error: None)
        if expired_total or removed_groups:
            log.info("offsets_expired", offsets=expired_total, groups_removed=removed_groups)
        return expired_total, removed_groups

    # -- group administration (admin.py) -------------------------------------------------------------

    def handle_describe_groups(self, group_ids: list[str | None], api_version: int, now_ms: int) -> list[GroupDescription]:
        self._tick(now_ms)
        return self.admin.describe_groups(group_ids, api_version)

    def handle_list_groups(self, states: list[str], types: list[str], now_ms: int) -> tuple[Errors, list[ListedGroup]]:
        self._tick(now_ms)
        return self.admin.list_groups(states, types)

    def handle_delete_groups(self, group_ids: list[str | None], now_ms: int, respond: DeleteGroupsCallback) -> None:
        self._tick(now_ms)
        self.admin.delete_groups(group_ids, respond)

    # -- KIP-848 consumer groups (consumer/) ----------------------------------------------------------

    def handle_consumer_group_heartbeat(self, inp: ConsumerGroupHeartbeatInput, now_ms: int,
                                        respond: HeartbeatCallback) -> None:
        self._tick(now_ms)
        self.consumer.handle_heartbeat(inp, respond)

    def note_consumer_heartbeat_arrival(self, inp: ConsumerGroupHeartbeatInput, arrival_ms: int) -> None:
        """At arrival, before the heartbeat queues behind its group's lock: its member's session runs from now."""
        self.consumer.note_heartbeat_arrival(inp.group_id, inp.member_id, inp.member_epoch, arrival_ms)

    def handle_consumer_group_describe(self, group_ids: list[str], now_ms: int) -> list[ConsumerGroupDescription]:
        self._tick(now_ms)
        return self.consumer.describe_groups(group_ids)

    def remove_consumer_group(self, group: ConsumerGroup, reason: str) -> None:
        self.consumer.remove_group(group, reason)

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        return self.classic.is_empty(group_id)

    def take_over_classic_group(self, group_id: str) -> tuple[dict[tuple[str, int], OffsetCommitValue], CoordinatorRecord]:
        return self.classic.take_over(group_id)

    # -- KIP-848 migration between the protocols (migration.py) ----------------------------------------

    def upgrade_classic_group(self, group_id: str
                              ) -> tuple[list[CoordinatorRecord], dict[tuple[str, int], OffsetCommitValue]] | None:
        config = self.consumer.config
        try:
            return self.classic.upgrade(group_id, config.migration_policy, config.max_size, self._topic_id)
        except MalformedConsumerProtocol as e:
            log.warning("classic_group_not_upgraded", group_id=group_id, reason=str(e))
            raise ConsumerGroupError(Errors.GROUP_ID_NOT_FOUND,
                                     f"Cannot upgrade the classic group {group_id} to consumer group because the "
                                     f"embedded consumer protocol is malformed.") from None

    def downgrade_consumer_group(self, group: ConsumerGroup, remaining: list[ConsumerGroupMember]
                                 ) -> list[CoordinatorRecord] | None:
        return self.classic.downgrade(group, remaining, self.consumer.config.migration_policy, self._topic_name)

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.consumer.topics.topic(name)
        return None if topic is None else topic.topic_id

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.consumer.topics.topic_by_id(topic_id)
        return None if topic is None else topic.name

    def _maybe_replace_empty_consumer_group(self, group_id: str) -> Errors | None:
        """A classic JoinGroup for an empty consumer group: it gives way, keeping its offsets (Kafka)."""
        consumer_group = self.consumer_group(group_id)
        if consumer_group is None:
            return None
        self.emit_append(group_id, tuple(consumer_admin.group_tombstones(consumer_group)), lambda error: None)
        self.consumer.remove_group(consumer_group, "a classic protocol member joined the empty consumer group")
        # The classic group takes the id's entry in the one table, with the offsets.
        group = self.classic.create_group(group_id)
        group.offsets = consumer_group.offsets
        return None

    # -- the classic protocol's requests, routed by the group's type ----------------------------------

    def handle_join_group(self, inp: JoinGroupInput, now_ms: int, respond: JoinCallback) -> None:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            respond(JoinGroupResult(error, member_id=inp.member_id))
            return
        if not self.classic.session_timeout_in_range(inp.session_timeout_ms):
            respond(JoinGroupResult(Errors.INVALID_SESSION_TIMEOUT, member_id=inp.member_id))
            return
        consumer_group = self.consumer_group(inp.group_id)
        if consumer_group is not None and consumer_group.state is not ConsumerGroupState.EMPTY:
            # KIP-848 migration: a classic member inside a consumer group, assigned by the coordinator.
            self.classic_members.join(consumer_group, inp, respond)
            return
        if consumer_group is not None:
            error = self._maybe_replace_empty_consumer_group(inp.group_id)
            if error is not None:
                respond(JoinGroupResult(error, member_id=inp.member_id))
                return
        self.classic.handle_join_group(inp, respond)

    def handle_sync_group(self, inp: SyncGroupInput, now_ms: int, respond: SyncCallback) -> None:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            respond(SyncGroupResult(error))
            return
        group = self.groups.get(inp.group_id)
        if isinstance(group, GroupMetadata):
            self.classic.handle_sync_group(group, inp, respond)
        elif isinstance(group, ConsumerGroup):
            self.classic_members.sync(group, inp, respond)
        else:
            respond(SyncGroupResult(Errors.UNKNOWN_MEMBER_ID))

    def handle_heartbeat(self, inp: HeartbeatInput, now_ms: int) -> Errors:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            # A loading coordinator answers blindly: the member will learn the truth once it has loaded.
            return _HEARTBEAT_OK if error is Errors.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.groups.get(inp.group_id)
        if isinstance(group, GroupMetadata):
            return self.classic.handle_heartbeat(group, inp)
        if isinstance(group, ConsumerGroup):
            return self.classic_members.heartbeat(group, inp.member_id, inp.group_instance_id, inp.generation_id)
        return Errors.UNKNOWN_MEMBER_ID

    def handle_leave_group(self, inp: LeaveGroupInput, now_ms: int) -> LeaveGroupResult:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            return LeaveGroupResult(error)
        group = self.groups.get(inp.group_id)
        if isinstance(group, GroupMetadata):
            return self.classic.handle_leave_group(group, inp)
        if isinstance(group, ConsumerGroup):
            return self.classic_members.leave(group, inp)
        return LeaveGroupResult(Errors.NONE, [
            LeaveMemberResult(m.member_id, m.group_instance_id, Errors.UNKNOWN_MEMBER_ID) for m in inp.members
        ])

class _OffsetsCleanup(TimerTask):
    """Kafka's periodic cleanupGroupMetadata, every offsets.retention.check.interval.ms."""

    __slots__ = ("coordinator",)

    def __init__(self, coordinator: GroupCoordinator) -> None:
        super().__init__(coordinator.config.offsets_retention_check_interval_ms)
        self.coordinator = coordinator

    def run(self) -> None:
        if not self.coordinator.active:
            return
        self.coordinator.cleanup_group_metadata()
        self.coordinator.timer.add(self, self.coordinator.now_ms)

