"""The classic group coordinator: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Theory of operation. Synchronous and single-threaded: every entry point takes the current monotonic time
and runs to completion; parked JoinGroup/SyncGroup requests are answered later through their callbacks,
from whichever call completes them (another member's request, a timer in `advance_clock`, or the
completion of a durable append). The core never touches the disk: records it wants durable go to
`take_appends()`, and the shell calls `PendingAppend.complete` once they are written. Soft state
(parked callbacks, liveness) changes directly; hard state (assignments) changes only once its record is
durable. Timers are delayed operations in two purgatories on one timing wheel; each re-checks the group
when it fires, because the group may have moved on.

The cut, after Kafka's GroupCoordinatorShard: this façade owns the group table, the gate and the
partition state, and composes the parts; every arrow runs from here outwards. The rebalance mechanics
(rebalance.py) are its base class; the delayed operations (delayed.py) call back through their own
`RebalanceCallbacks` protocol; the offset manager (offsets.py) and the admin operations (admin.py) see
this class only through the narrow protocols they define (`OffsetGroups`, `AdminGroups`) and get
`emit_append` as a plain function. settings.py is a leaf.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Final

import structlog
from mypy_extensions import mypyc_attr

from coordinator_server.purgatory import DelayedOperationPurgatory, Timer, TimerTask
from protocol.errors import Errors

from . import delayed
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
    PendingAppend,
    SyncCallback,
    SyncGroupInput,
    SyncGroupResult,
)
from .consumer import admin as consumer_admin
from .consumer.api import ConsumerGroupDescription, ConsumerGroupHeartbeatInput, HeartbeatCallback
from .consumer.classic_members import ClassicMembers
from .consumer.errors import ConsumerGroupError
from .consumer.group import ConsumerGroup, ConsumerGroupState
from .consumer.loader import ConsumerGroupLoader
from .consumer.manager import ConsumerGroupEvents, ConsumerGroupManager
from .consumer.member import ConsumerGroupMember
from .consumer.records import CONSUMER_GROUP_RECORD_TYPES
from .consumer.settings import ConsumerGroupConfig
from .consumer.topics import TopicsImage
from .group import GroupMetadata
from .loader import GroupLoader
from .member import MemberMetadata
from .migration import (
    MalformedConsumerProtocol,
    classic_group_from_consumer,
    consumer_group_records,
    downgrade_refusal,
    upgrade_refusal,
)
from .offsets import OffsetManager
from .partitioner import partition_for
from .rebalance import GroupEvents, RebalanceMechanics, map_group_write_error
from .rebalance_trace import RebalanceTrigger
from .records import CoordinatorRecord, GroupMetadataRecord, OffsetCommitValue
from .settings import GroupConfig
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE

log = structlog.get_logger("coordinator_server.group")

# A heartbeat's usual answers as C statics (Final, compiled): reading an attribute of the Errors enum goes
# through its metaclass on every call.
_HEARTBEAT_OK: Final = Errors.NONE
_HEARTBEAT_REBALANCING: Final = Errors.REBALANCE_IN_PROGRESS


def default_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


# The runtime's tests drive it with a scripted core (tests/unit/test_runtime_appends.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class GroupCoordinator(RebalanceMechanics):
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
        self.config = config
        self.events = events or GroupEvents()
        self.partitions = partitions
        self.timer = timer
        self.member_id_factory = member_id_factory
        # wall clock = monotonic + offset; the shell refreshes the offset, the core never reads a clock.
        self.wall_offset_ms = wall_offset_ms
        self.now_ms = 0
        self.groups: dict[str, GroupMetadata] = {}
        self.heartbeat_purgatory: DelayedOperationPurgatory[delayed.DelayedHeartbeat] = DelayedOperationPurgatory(
            "Heartbeat", timer
        )
        self.rebalance_purgatory: DelayedOperationPurgatory[delayed.DelayedOperation] = DelayedOperationPurgatory(
            "Rebalance", timer
        )
        self.active = True
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        # The leader epoch each held (owned or loading) partition was taken at (0 on one node).
        self.partition_epochs: dict[int, int] = {}
        self._appends: list[PendingAppend] = []
        self.offsets = OffsetManager(
            self, self.emit_append, config.offset_metadata_max_bytes, config.offsets_retention_ms
        )
        self.admin = GroupAdmin(self, self.emit_append)
        # KIP-848 consumer groups share the group-id space, the gate, the clock and the appends.
        self.consumer = ConsumerGroupManager(self, self.emit_append, consumer_config, topics, events=consumer_events)
        # KIP-848 migration: classic members inside consumer groups (consumer/classic_members.py).
        self.classic_members = ClassicMembers(self.consumer)
        self._cleanup = _OffsetsCleanup(self)

    # -- time and effects ----------------------------------------------------------------------------

    def _tick(self, now_ms: int) -> None:
        if now_ms > self.now_ms:
            self.now_ms = now_ms

    @property
    def wall_ms(self) -> int:
        return self.now_ms + self.wall_offset_ms

    def tick(self, now_ms: int) -> None:
        """Move the clock with nothing due (the caller checked `next_expiration_ms`)."""
        self._tick(now_ms)

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

    def has_appends(self) -> bool:
        return bool(self._appends)

    def take_appends(self) -> list[PendingAppend]:
        appends, self._appends = self._appends, []
        return appends

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def remove_group(self, group: GroupMetadata) -> None:
        """Mark the group Dead and forget it; its tombstone is the caller's to write."""
        group.transition_to(DEAD, self.wall_ms)
        del self.groups[group.group_id]

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
        consumer_loader = ConsumerGroupLoader()
        for record in records:
            if isinstance(record, CONSUMER_GROUP_RECORD_TYPES):
                consumer_loader.apply(record)
            else:
                loader.apply(record)
        loaded = self.consumer.load(consumer_loader.groups.values())
        for group in loader.build(self.wall_ms):
            consumer_group = consumer_loader.groups.get(group.group_id)
            if consumer_group is not None:
                # Offsets load as a simple group when no classic group record names them: they are the
                # consumer group's (a classic record left next to live consumer records is stale).
                if group.members or group.protocol_type is not None:
                    log.warning("classic_group_record_ignored", group_id=group.group_id,
                                reason="the group is a consumer group")
                consumer_group.offsets = group.offsets
                continue
            self.groups[group.group_id] = group
            loaded += 1
            for member in list(group.members.values()):
                self.complete_and_schedule_next_heartbeat(group, member)
            if group.size() > self.config.group_max_size:
                self._prepare_rebalance(group, "group_max_size", "group is over group.max.size after loading",
                                        trigger="group_loaded")
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
            del self.groups[group.group_id]
            unloaded += 1
        for consumer_group in [g for g in self.consumer.groups.values() if self.partition_for(g.group_id) == partition]:
            self.consumer.remove_group(consumer_group, reason)
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
            self._unload_group(group)
        self.groups.clear()
        for consumer_group in list(self.consumer.groups.values()):
            self.consumer.remove_group(consumer_group, "coordinator shutdown")

    def _unload_group(self, group: GroupMetadata, reason: str = "coordinator shutdown") -> None:
        previous = group.state
        group.transition_to(DEAD, self.wall_ms)
        log.info("group_unloaded", group_id=group.group_id, generation=group.generation_id,
                 previous_state=str(previous), reason=reason)
        self.events.on_rebalance_abandoned(group.group_id)
        if previous is PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(
                    member, JoinGroupResult(Errors.NOT_COORDINATOR, member_id=member.member_id)
                )
            self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))
        elif previous in (STABLE, COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync_callback(member, SyncGroupResult(Errors.NOT_COORDINATOR))
                self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member.member_id))
        self._remove_sync_expiration(group)

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
            records.extend(self.offsets.cleanup_expired_offsets(group, wall_ms))
            expired_total += len(records)
            if group.is_state(EMPTY) and not group.offsets and not group.pending_offset_commits:
                self.remove_group(group)
                records.append(GroupMetadataRecord(group.group_id, None))
                removed_groups += 1
                log.info("group_removed", group_id=group.group_id, reason="empty with no committed offsets")
            if records:
                # Like Kafka's acks=0 tombstones: a lost one is simply reissued at the next cleanup.
                self.emit_append(group.group_id, tuple(records), lambda error: None)
        for consumer_group in list(self.consumer.groups.values()):
            records = list(self.offsets.cleanup_expired_consumer_group_offsets(consumer_group, wall_ms))
            expired_total += len(records)
            if (consumer_group.state is ConsumerGroupState.EMPTY and not consumer_group.offsets
                    and not consumer_group.pending_offset_commits):
                records.extend(consumer_admin.group_tombstones(consumer_group))
                self.consumer.remove_group(consumer_group, "empty with no committed offsets")
                removed_groups += 1
            if records:
                self.emit_append(consumer_group.group_id, tuple(records), lambda error: None)
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

    def handle_consumer_group_describe(self, group_ids: list[str], now_ms: int) -> list[ConsumerGroupDescription]:
        self._tick(now_ms)
        return self.consumer.describe_groups(group_ids)

    @property
    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        return self.consumer.groups

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer.groups.get(group_id)

    def remove_consumer_group(self, group: ConsumerGroup, reason: str) -> None:
        self.consumer.remove_group(group, reason)

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        group = self.groups.get(group_id)
        return None if group is None else group.is_state(EMPTY)

    def take_over_classic_group(self, group_id: str) -> tuple[dict[tuple[str, int], OffsetCommitValue], CoordinatorRecord]:
        group = self.groups[group_id]
        self.remove_group(group)
        return group.offsets, GroupMetadataRecord(group_id, None)

    # -- KIP-848 migration between the protocols (migration.py) ----------------------------------------

    def upgrade_classic_group(self, group_id: str
                              ) -> tuple[list[CoordinatorRecord], dict[tuple[str, int], OffsetCommitValue]] | None:
        group = self.groups[group_id]
        config = self.consumer.config
        refusal = upgrade_refusal(group, config.migration_policy, config.max_size)
        if refusal is not None:
            log.info("classic_group_not_upgraded", group_id=group_id, reason=refusal)
            return None
        try:
            records = consumer_group_records(group, self._topic_id)
        except MalformedConsumerProtocol as e:
            log.warning("classic_group_not_upgraded", group_id=group_id, reason=str(e))
            raise ConsumerGroupError(Errors.GROUP_ID_NOT_FOUND,
                                     f"Cannot upgrade the classic group {group_id} to consumer group because the "
                                     f"embedded consumer protocol is malformed.") from None
        self._retire_classic_group(group, "upgraded to a consumer group")
        return [GroupMetadataRecord(group_id, None), *records], group.offsets

    def downgrade_consumer_group(self, group: ConsumerGroup, remaining: list[ConsumerGroupMember]
                                 ) -> list[CoordinatorRecord] | None:
        refusal = downgrade_refusal(remaining, self.consumer.config.migration_policy, self.config.group_max_size)
        if refusal is not None:
            if remaining and all(m.uses_classic_protocol for m in remaining):
                log.info("consumer_group_not_downgraded", group_id=group.group_id, reason=refusal)
            return None
        classic = classic_group_from_consumer(group, remaining, self._topic_name, self.wall_ms)
        classic.offsets = group.offsets
        self.groups[classic.group_id] = classic
        assignment = {m.member_id: m.assignment for m in classic.members.values()}
        record = GroupMetadataRecord(classic.group_id, self.group_metadata_value(classic, assignment))
        log.info("consumer_group_downgraded", group_id=classic.group_id, generation=classic.generation_id,
                 members=classic.size(), protocol=classic.protocol_name,
                 reason="only classic protocol members remain")
        for member in classic.members.values():
            self.complete_and_schedule_next_heartbeat(classic, member)
        self._prepare_rebalance(classic, "leave", f"Downgrade group {classic.group_id} from consumer to classic.",
                                trigger="protocol_migration")
        return [record]

    def _retire_classic_group(self, group: GroupMetadata, reason: str) -> None:
        """The classic group leaves the coordinator's table for another form: its parked requests learn that
        a new rebalance started, its timers find it Dead."""
        previous = group.state
        group.transition_to(DEAD, self.wall_ms)
        del self.groups[group.group_id]
        log.info("group_unloaded", group_id=group.group_id, generation=group.generation_id,
                 previous_state=str(previous), reason=reason)
        self.events.on_rebalance_abandoned(group.group_id)
        for member in list(group.members.values()):
            group.maybe_invoke_join_callback(member, JoinGroupResult(Errors.REBALANCE_IN_PROGRESS,
                                                                     member_id=member.member_id))
            group.maybe_invoke_sync_callback(member, SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
            self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member.member_id))
        self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))
        self._remove_sync_expiration(group)

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.consumer.topics.topic(name)
        return None if topic is None else topic.topic_id

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.consumer.topics.topic_by_id(topic_id)
        return None if topic is None else topic.name

    def _maybe_replace_empty_consumer_group(self, group_id: str) -> Errors | None:
        """A classic JoinGroup for an empty consumer group: it gives way, keeping its offsets (Kafka)."""
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is None:
            return None
        self.emit_append(group_id, tuple(consumer_admin.group_tombstones(consumer_group)), lambda error: None)
        self.consumer.remove_group(consumer_group, "a classic protocol member joined the empty consumer group")
        group = self._create_group(group_id)
        group.offsets = consumer_group.offsets
        return None

    # -- the gate ------------------------------------------------------------------------------------

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None:
        """The checks every group request passes first: a group id (offset commits and fetches accept "", the
        rest reject it), then this node coordinating the group, loaded."""
        if group_id is None or (group_id == "" and not allow_empty):
            return Errors.INVALID_GROUP_ID
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self.loading_partitions:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return Errors.NOT_COORDINATOR
        return None

    def validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
    ) -> Errors | None:
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return Errors.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("static_member_fenced", group_id=group.group_id, member_id=member_id,
                         group_instance_id=group_instance_id, current_member_id=current, operation=operation)
                return Errors.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return Errors.UNKNOWN_MEMBER_ID
        return None

    # -- JoinGroup -----------------------------------------------------------------------------------

    def handle_join_group(self, inp: JoinGroupInput, now_ms: int, respond: JoinCallback) -> None:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            respond(JoinGroupResult(error, member_id=inp.member_id))
            return
        if not self.config.min_session_timeout_ms <= inp.session_timeout_ms <= self.config.max_session_timeout_ms:
            respond(JoinGroupResult(Errors.INVALID_SESSION_TIMEOUT, member_id=inp.member_id))
            return
        is_unknown_member = inp.member_id == ""
        consumer_group = self.consumer.groups.get(inp.group_id)
        if consumer_group is not None and consumer_group.state is not ConsumerGroupState.EMPTY:
            # KIP-848 migration: a classic member inside a consumer group, assigned by the coordinator.
            self.classic_members.join(consumer_group, inp, respond)
            return
        if consumer_group is not None:
            error = self._maybe_replace_empty_consumer_group(inp.group_id)
            if error is not None:
                respond(JoinGroupResult(error, member_id=inp.member_id))
                return
        group = self.groups.get(inp.group_id)
        if group is None:
            if not is_unknown_member:
                respond(JoinGroupResult(Errors.UNKNOWN_MEMBER_ID, member_id=inp.member_id))
                return
            group = self._create_group(inp.group_id)
        if not self._accept_joining_member(group, inp.member_id):
            self._reject_over_capacity(group, inp.member_id)
            respond(JoinGroupResult(Errors.GROUP_MAX_SIZE_REACHED, member_id=""))
        elif is_unknown_member:
            self._do_new_member_join(group, inp, respond)
        else:
            self._do_current_member_join(group, inp, respond)
        if group.is_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(delayed.join_key(group.group_id))

    def create_simple_group(self, group_id: str) -> GroupMetadata:
        """A group created by an offset commit with no generation: Empty, no protocol type, in memory
        only — its offset records are what make it known after a restart."""
        group = GroupMetadata(group_id, self.wall_ms)
        self.groups[group_id] = group
        return group

    def _create_group(self, group_id: str) -> GroupMetadata:
        group = GroupMetadata(group_id, self.wall_ms)
        self.groups[group_id] = group
        # As the new coordinator does: a group created by JoinGroup is recorded at once (gen 0, Empty),
        # so that it is known after a restart even if nothing else is written for it.
        self._store_group(group, {}, lambda error: None)
        return group

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.state is PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_members_awaiting_join < max_size
        return group.has(member_id) or group.size() < max_size

    def _reject_over_capacity(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None:
            # Only a member not parked in this join phase can be refused, so nothing of it is parked.
            self._remove_member(group, member, "group_max_size", "group.max.size reached")
        elif group.is_pending_member(member_id):
            log.info("pending_member_removed", group_id=group.group_id, member_id=member_id,
                     reason="group.max.size reached")
            group.pending_members.pop(member_id, None)
            self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member_id))

    def _do_new_member_join(self, group: GroupMetadata, inp: JoinGroupInput, respond: JoinCallback) -> None:
        if group.is_state(DEAD):
            respond(JoinGroupResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id=""))
            return
        if not group.supports_protocols(inp.protocol_type, {name for name, _ in inp.protocols}):
            respond(JoinGroupResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=""))
            return
        prefix = inp.group_instance_id if inp.group_instance_id is not None else inp.client_id
        new_member_id = self.member_id_factory(prefix)
        if inp.group_instance_id is not None:
            old_member_id = group.current_static_member_id(inp.group_instance_id)
            if old_member_id is not None:
                log.info("static_member_replaced", group_id=group.group_id, group_instance_id=inp.group_instance_id,
                         old_member_id=old_member_id, member_id=new_member_id, generation=group.generation_id,
                         state=str(group.state), client_id=inp.client_id,
                         old_client_id=group.get(old_member_id).client_id)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, inp, respond)
            else:
                self._add_member_and_rebalance(group, new_member_id, inp, respond)
        elif inp.api_version >= 4:
            # KIP-394: hand out the id and wait for the member to come back with it.
            if len(group.pending_members) >= self.config.group_max_pending_members:
                self._evict_oldest_pending_member(group)
            group.pending_members[new_member_id] = None
            self.heartbeat_purgatory.try_complete_else_watch(
                delayed.DelayedHeartbeat(self, group, new_member_id, True, inp.session_timeout_ms),
                (delayed.member_key(group.group_id, new_member_id),),
                self.now_ms,
            )
            respond(JoinGroupResult(Errors.MEMBER_ID_REQUIRED, member_id=new_member_id))
        else:
            self._add_member_and_rebalance(group, new_member_id, inp, respond)

    def _evict_oldest_pending_member(self, group: GroupMetadata) -> None:
        """A flood of JoinGroups without a member id must not grow a group without bound; forgetting the
        oldest id rather than refusing the new one keeps the group open to real joiners (one whose id was
        forgotten gets UNKNOWN_MEMBER_ID and joins again)."""
        oldest = next(iter(group.pending_members))
        del group.pending_members[oldest]
        self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, oldest))
        group.pending_evictions += 1
        self.events.on_pending_member_evicted(group.group_id)
        if group.pending_evictions & (group.pending_evictions - 1) == 0:  # 1, 2, 4, 8...: a flood logs little
            log.warning("pending_members_evicted", group_id=group.group_id, evicted=group.pending_evictions,
                        max_pending_members=self.config.group_max_pending_members)

    def _do_current_member_join(self, group: GroupMetadata, inp: JoinGroupInput, respond: JoinCallback) -> None:
        member_id = inp.member_id
        if group.is_state(DEAD):
            respond(JoinGroupResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return
        if not group.supports_protocols(inp.protocol_type, {name for name, _ in inp.protocols}):
            respond(JoinGroupResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            return
        if group.is_pending_member(member_id):
            # A pending member never carries an instance id: ids of static members are not handed out first.
            self._add_member_and_rebalance(group, member_id, inp, respond)
            return
        error = self.validate_current_member(group, member_id, inp.group_instance_id, "join-group")
        if error is not None:
            respond(JoinGroupResult(error, member_id=member_id))
            return
        member = group.get(member_id)
        state = group.state
        if state is PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, inp, respond, "member rejoining during PreparingRebalance",
                                              "member_joined")  # no new rebalance: the trigger is unused
        elif state is COMPLETING_REBALANCE:
            if member.matches(inp.protocols):
                # A retry of a lost JoinGroup response: answer the current generation again.
                respond(self._current_join_result(group, member_id, include_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, inp, respond, "member metadata changed",
                                                  "metadata_changed")
        elif state is STABLE:
            if group.is_leader(member_id):
                # The leader rejoins to trigger a rebalance for changes the metadata doesn't show.
                self._update_member_and_rebalance(
                    group, member, inp, respond, "leader rejoined",
                    "leader_rejoined" if member.matches(inp.protocols) else "metadata_changed")
            elif not member.matches(inp.protocols):
                self._update_member_and_rebalance(group, member, inp, respond, "member metadata changed",
                                                  "metadata_changed")
            else:
                respond(self._current_join_result(group, member_id, include_members=False))
        else:
            respond(JoinGroupResult(Errors.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, inp: JoinGroupInput, respond: JoinCallback
    ) -> None:
        member = MemberMetadata(
            member_id, inp.group_instance_id, inp.client_id, inp.client_host, inp.rebalance_timeout_ms,
            inp.session_timeout_ms, inp.protocol_type, inp.protocols,
        )
        member.is_new = True
        member.join_api_version = inp.api_version
        member.awaiting_join = respond
        if group.is_state(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member)
        log.info("member_added", group_id=group.group_id, member_id=member_id, generation=group.generation_id,
                 group_instance_id=inp.group_instance_id, client_id=inp.client_id, reason=inp.reason or "not provided")
        # A new member cannot heartbeat yet and its socket is muted while it waits, so it gets the
        # new-member join timeout instead of its session timeout.
        self._complete_and_schedule_next_expiration(group, member, self.config.new_member_join_timeout_ms)
        self._note_join_arrival(group, member)
        self._maybe_prepare_rebalance(group, "join", f"adding new member {member_id}", "member_joined", member)

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, inp: JoinGroupInput, respond: JoinCallback, reason: str,
        trigger: RebalanceTrigger,
    ) -> None:
        self._supersede_parked_join(member)
        group.update_member(member, inp.protocols, inp.rebalance_timeout_ms, inp.session_timeout_ms, respond)
        member.join_api_version = inp.api_version
        self._note_join_arrival(group, member)
        self._maybe_prepare_rebalance(
            group, "join", f"{reason} ({member.member_id}); client reason: {inp.reason or 'not provided'}",
            trigger, member,
        )

    def _supersede_parked_join(self, member: MemberMetadata) -> None:
        # A second JoinGroup for a member already parked (the client retried on a new connection): the
        # first one would otherwise hold its connection forever.
        old = member.awaiting_join
        if old is not None:
            old(JoinGroupResult(Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id))

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, new_member_id: str, inp: JoinGroupInput, respond: JoinCallback
    ) -> None:
        assert inp.group_instance_id is not None
        current_leader = group.leader_id
        member = group.replace_static_member(inp.group_instance_id, old_member_id, new_member_id)
        old_protocols = member.supported_protocols
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        old_client = (member.client_id, member.client_host)
        member.client_id, member.client_host = inp.client_id, inp.client_host
        # The old id's heartbeat expires harmlessly (the id is gone); the new id gets its own.
        self.complete_and_schedule_next_heartbeat(group, member)
        group.update_member(member, inp.protocols, inp.rebalance_timeout_ms, inp.session_timeout_ms, respond)
        member.join_api_version = inp.api_version
        state = group.state
        if state is STABLE:
            if group.protocol_name == group.select_protocol():
                self._persist_static_replacement(
                    group, member, old_member_id, current_leader,
                    (old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms, old_client),
                )
            else:
                self._maybe_prepare_rebalance(
                    group, "static_replacement", f"static member {new_member_id} rejoined with a protocol change",
                    member=member,
                )
        elif state is COMPLETING_REBALANCE:
            # The old id may already be in the leader's assignment: only a new rebalance is safe.
            self._maybe_prepare_rebalance(
                group, "static_replacement", f"static member {new_member_id} rejoined during CompletingRebalance",
                member=member,
            )
        elif state is PREPARING_REBALANCE:
            self._note_join_arrival(group, member)  # it simply waits with the others
        else:
            raise AssertionError(f"static member of group {group.group_id} in state {state}")

    def _persist_static_replacement(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        old_member_id: str,
        current_leader: str | None,
        old: tuple[tuple[tuple[str, bytes], ...], int, int, tuple[str, str]],
    ) -> None:
        new_member_id = member.member_id
        generation = group.generation_id
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        instance_id = member.group_instance_id
        assert instance_id is not None

        def on_stored(error: Errors) -> None:
            if group.state is not STABLE or group.generation_id != generation or not group.has(new_member_id):
                # The group moved on while we were writing; the parked join was dealt with there.
                return
            if error is not Errors.NONE:
                log.warning("static_member_replacement_failed", group_id=group.group_id,
                            member_id=new_member_id, error=error.name)
                protocols, rebalance_ms, session_ms, client = old
                callback = member.awaiting_join
                group.update_member(member, protocols, rebalance_ms, session_ms, None)
                member.client_id, member.client_host = client
                reverted = group.replace_static_member(instance_id, new_member_id, old_member_id)
                self.complete_and_schedule_next_heartbeat(group, reverted)
                if callback is not None:
                    callback(JoinGroupResult(
                        map_group_write_error(error), generation_id=group.generation_id,
                        protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                        leader=current_leader or "", member_id="",
                    ))
                return
            is_leader = group.is_leader(new_member_id)
            if member.join_api_version >= 9:
                # KIP-814: the leader learns it leads but skips the assignor; the group stays Stable.
                result = self._current_join_result(group, new_member_id, include_members=is_leader)
                result.skip_assignment = is_leader
            else:
                # Older leaders would run the assignor and their sync would be ignored in Stable, so they
                # are told the old leader id and don't think they lead.
                result = self._current_join_result(group, new_member_id, include_members=False)
                result.leader = current_leader or ""
            group.maybe_invoke_join_callback(member, result)

        self._store_group(group, assignment, on_stored)

    # -- SyncGroup -----------------------------------------------------------------------------------

    def handle_sync_group(self, inp: SyncGroupInput, now_ms: int, respond: SyncCallback) -> None:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            respond(SyncGroupResult(error))
            return
        group = self.groups.get(inp.group_id)
        if group is None:
            consumer_group = self.consumer.groups.get(inp.group_id)
            if consumer_group is not None:
                self.classic_members.sync(consumer_group, inp, respond)
                return
            respond(SyncGroupResult(Errors.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync_group(group, inp)
        if error is not None:
            respond(SyncGroupResult(error))
            return
        state = group.state
        if state is EMPTY:
            respond(SyncGroupResult(Errors.UNKNOWN_MEMBER_ID))
        elif state is PREPARING_REBALANCE:
            respond(SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
        elif state is COMPLETING_REBALANCE:
            member = group.get(inp.member_id)
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = respond
            self._remove_pending_sync_member(group, inp.member_id)
            if group.is_leader(inp.member_id):
                self._store_leader_assignment(group, inp)
        elif state is STABLE:
            self._remove_pending_sync_member(group, inp.member_id)
            member = group.get(inp.member_id)
            respond(SyncGroupResult(Errors.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self.complete_and_schedule_next_heartbeat(group, member)
        else:
            raise AssertionError(f"SyncGroup reached group {group.group_id} in state {state}")

    def _validate_sync_group(self, group: GroupMetadata, inp: SyncGroupInput) -> Errors | None:
        if group.is_state(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = self.validate_current_member(group, inp.member_id, inp.group_instance_id, "sync-group")
        if error is not None:
            return error
        if inp.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        if inp.protocol_type is not None and inp.protocol_type != group.protocol_type:
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        if inp.protocol_name is not None and inp.protocol_name != group.protocol_name:
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _store_leader_assignment(self, group: GroupMetadata, inp: SyncGroupInput) -> None:
        given = dict(inp.assignments)
        # Members the leader left out get an empty assignment; ids that are not members are ignored.
        assignment = {member_id: given.get(member_id, b"") for member_id in group.members}
        missing = [m for m in group.members if m not in given]
        log.info("assignment_received", group_id=group.group_id, generation=group.generation_id,
                 leader=inp.member_id, members=group.size(), missing=len(missing))
        generation = group.generation_id

        def on_stored(error: Errors) -> None:
            # Another member may have joined meanwhile: act only if this generation is still completing.
            if not (group.is_state(COMPLETING_REBALANCE) and group.generation_id == generation):
                return
            if error is not Errors.NONE:
                self._reset_and_propagate_assignment_error(group, map_group_write_error(error))
                self._maybe_prepare_rebalance(group, "storage_error", f"error {error.name} storing the group assignment")
                return
            for member in group.members.values():
                member.assignment = assignment.get(member.member_id, b"")
            self._propagate_assignment(group, Errors.NONE)
            group.transition_to(STABLE, self.wall_ms)
            trace, group.rebalance_trace = group.rebalance_trace, None
            log.info("group_stable", group_id=group.group_id, generation=group.generation_id,
                     reason="leader's assignment is durable", leader=group.leader_id, members=group.size(),
                     **({} if trace is None else trace.on_stable(self.now_ms)), state_time_ms=group.state_timestamp_ms)
            self.events.on_stable(group.group_id, self.now_ms)

        self._store_group(group, assignment, on_stored)

    # -- Heartbeat -----------------------------------------------------------------------------------

    def handle_heartbeat(self, inp: HeartbeatInput, now_ms: int) -> Errors:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            # A loading coordinator answers blindly: the member will learn the truth once it has loaded.
            return _HEARTBEAT_OK if error is Errors.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.groups.get(inp.group_id)
        if group is None:
            consumer_group = self.consumer.groups.get(inp.group_id)
            if consumer_group is not None:
                return self.classic_members.heartbeat(consumer_group, inp.member_id, inp.group_instance_id,
                                                       inp.generation_id)
            return Errors.UNKNOWN_MEMBER_ID
        if group.is_state(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = self.validate_current_member(group, inp.member_id, inp.group_instance_id, "heartbeat")
        if error is not None:
            return error
        if inp.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        state = group.state
        if state is EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        self.complete_and_schedule_next_heartbeat(group, group.get(inp.member_id))
        if state is PREPARING_REBALANCE:
            return _HEARTBEAT_REBALANCING
        return _HEARTBEAT_OK

    # -- LeaveGroup ----------------------------------------------------------------------------------

    def handle_leave_group(self, inp: LeaveGroupInput, now_ms: int) -> LeaveGroupResult:
        self._tick(now_ms)
        error = self.validate_group_status(inp.group_id)
        if error is not None:
            return LeaveGroupResult(error)
        group = self.groups.get(inp.group_id)
        consumer_group = self.consumer.groups.get(inp.group_id) if group is None else None
        if consumer_group is not None:
            return self.classic_members.leave(consumer_group, inp)
        if group is None:
            return LeaveGroupResult(Errors.NONE, [
                LeaveMemberResult(m.member_id, m.group_instance_id, Errors.UNKNOWN_MEMBER_ID) for m in inp.members
            ])
        if group.is_state(DEAD):
            return LeaveGroupResult(Errors.COORDINATOR_NOT_AVAILABLE)
        results = []
        for leaving in inp.members:
            reason = f"LeaveGroup; client reason: {leaving.reason or 'not provided'}"
            results.append(LeaveMemberResult(
                leaving.member_id, leaving.group_instance_id, self._leave_one(group, leaving.member_id,
                                                                              leaving.group_instance_id, reason)
            ))
        return LeaveGroupResult(Errors.NONE, results)

    def _leave_one(self, group: GroupMetadata, member_id: str, group_instance_id: str | None, reason: str) -> Errors:
        if member_id == "":
            # Admin removal of a static member by instance id (KIP-345).
            current = group.current_static_member_id(group_instance_id) if group_instance_id is not None else None
            if current is None:
                return Errors.UNKNOWN_MEMBER_ID
            self._remove_member(group, group.get(current), "leave", reason)
            return Errors.NONE
        if group.is_pending_member(member_id):
            self._remove_pending_member_and_update_group(group, member_id)
            self.heartbeat_purgatory.check_and_complete(delayed.member_key(group.group_id, member_id))
            log.info("pending_member_left", group_id=group.group_id, member_id=member_id)
            return Errors.NONE
        error = self.validate_current_member(group, member_id, group_instance_id, "leave-group")
        if error is not None:
            return error
        self._remove_member(group, group.get(member_id), "leave", reason)
        return Errors.NONE


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
