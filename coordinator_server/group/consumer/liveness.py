"""The consumer groups of the shard's one group table and their members' liveness (KIP-848; Kafka's
GroupMetadataManager for consumer groups): loading, removing and describing groups, applying records, the
members' session, rebalance and classic join/sync timeouts on the shard's keyed-timer service, and fencing
members out. The table is the host's (`ConsumerGroupsHost.groups`, every group type under its id): this
part looks its groups up by type, and only adds or removes entries that are consumer groups.

`ConsumerGroupManager` (manager.py) is this class with the heartbeat on top: the heartbeat decides, this
part keeps time and removes. Every timer re-checks the group when it fires (the member may be gone, or at
another epoch).
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

import structlog

from coordinator_server.purgatory import Timer
from protocol.errors import Errors
from protocol.kafka_uuid import random_kafka_uuid_string

from ..api import AppendRecords
from ..records import CoordinatorRecord, OffsetCommitValue
from ..table import Group
from ..timers import KeyedTimer, TimerKey
from ..write_errors import write_error
from . import admin
from .api import ConsumerGroupDescription
from .assignors import ASSIGNORS
from .group import ConsumerGroup
from .member import ConsumerGroupMember, MemberState
from .records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
)
from .settings import ConsumerGroupConfig
from .target import subscribed_topics
from .topics import StaticTopicsImage, TopicsImage

log = structlog.get_logger("coordinator_server.group.consumer")

class ConsumerGroupsHost(Protocol):
    """What the manager needs of the façade (coordinator.py): the clock, the gate, the timer, the one group
    table, the classic groups sharing the group-id namespace, and the append queue."""

    @property
    def groups(self) -> dict[str, Group]:
        """Every group of the shard by id, of any type (table.py)."""
        ...

    @property
    def now_ms(self) -> int: ...

    @property
    def wall_ms(self) -> int: ...

    @property
    def timer(self) -> Timer: ...

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None: ...

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        """None: no classic group of that id; True: one without members (a consumer group may take it)."""
        ...

    def take_over_classic_group(self, group_id: str) -> tuple[dict[tuple[str, int], OffsetCommitValue], CoordinatorRecord]:
        """Remove the empty classic group; its committed offsets and the tombstone that deletes it."""
        ...

    def upgrade_classic_group(self, group_id: str
                              ) -> tuple[list[CoordinatorRecord], dict[tuple[str, int], OffsetCommitValue]] | None:
        """Remove the classic group (with members) if it may become a consumer group: the records that
        delete it and create the consumer group, and its offsets; None if it may not."""
        ...

    def downgrade_consumer_group(self, group: ConsumerGroup, remaining: list[ConsumerGroupMember]
                                 ) -> list[CoordinatorRecord] | None:
        """Make the classic group this consumer group becomes when only `remaining` (all classic members)
        are left, and start its rebalance: the records that write it; None if it stays a consumer group."""
        ...


class ConsumerGroupEvents:
    """What the manager reports for metrics (the shell passes an implementation; this one does nothing)."""

    def on_group_epoch_bump(self, group_id: str, reason: str) -> None:
        """The group epoch moved: a rebalance of the consumer protocol started."""

    def on_member_fenced(self, group_id: str, reason: str, kind: str) -> None:
        """A member was removed; `kind` is one of FENCE_KINDS (a bounded label), `reason` says more."""


def default_member_id() -> str:
    return random_kafka_uuid_string()


class ConsumerGroupLiveness:
    def __init__(self, host: ConsumerGroupsHost, append: AppendRecords, config: ConsumerGroupConfig | None = None,
                 topics: TopicsImage | None = None, new_member_id: Callable[[], str] = default_member_id,
                 events: ConsumerGroupEvents | None = None, timers: KeyedTimer | None = None) -> None:
        self.host = host
        self.append = append
        self.config = config or ConsumerGroupConfig()
        self.topics: TopicsImage = topics if topics is not None else StaticTopicsImage()
        self.new_member_id = new_member_id
        self.events = events or ConsumerGroupEvents()
        # The host's table itself, not a copy: a conversion between the protocols replaces the one entry.
        self.groups: dict[str, Group] = host.groups
        # Keyed per member and kind, on the shard's one keyed-timer service.
        self.timers = timers if timers is not None else KeyedTimer(host.timer)
        unknown = [a for a in self.config.assignors if a not in ASSIGNORS]
        if unknown or not self.config.assignors:
            raise ValueError(f"unknown consumer group assignors {unknown}; known: {', '.join(ASSIGNORS)}")

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id; None if there is none or the id holds a group of another type."""
        group = self.groups.get(group_id)
        return group if isinstance(group, ConsumerGroup) else None

    @staticmethod
    def write_error(error: Errors) -> Errors:
        """A failed write as the request that caused it reports it."""
        return write_error(error)

    # -- leaving and fencing ------------------------------------------------------------------------------

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember, reason: str, kind: str
               ) -> list[CoordinatorRecord]:
        return self.fence_members(group, [member], reason, kind)

    def fence_members(self, group: ConsumerGroup, members: list[ConsumerGroupMember], reason: str, kind: str
                      ) -> list[CoordinatorRecord]:
        """Remove the members and bump the group epoch once; the records are applied here and returned.
        If only classic members remain, the group may become a classic group instead (KIP-848's downgrade)."""
        leaving = {m.member_id for m in members}
        remaining = [m for m in group.members.values() if m.member_id not in leaving]
        downgrade = self.host.downgrade_consumer_group(group, remaining)
        for member in members:
            self._cancel_timers(group.group_id, member.member_id)
            log.info("consumer_member_removed", group_id=group.group_id, member_id=member.member_id,
                     group_instance_id=member.instance_id, reason=reason,
                     group_epoch=None if downgrade is not None else group.group_epoch + 1)
            self.events.on_member_fenced(group.group_id, reason, kind)
        if downgrade is not None:
            records: list[CoordinatorRecord] = [*admin.group_tombstones(group), *downgrade]
            self.remove_group(group, "downgraded to a classic group: only classic protocol members remain")
            return records
        records = []
        regexes_left = dict(group.subscribed_regexes)
        for member in members:
            records.extend(member_tombstones(group.group_id, member.member_id))
            regex = member.subscribed_topic_regex
            if regex:
                regexes_left[regex] = regexes_left.get(regex, 0) - 1
                if regexes_left[regex] == 0:
                    records.append(ConsumerGroupRegularExpressionRecord(group.group_id, regex, None))
        resolved = {r: v for r, v in group.resolved_regexes.items() if regexes_left.get(r, 0) > 0}
        names: set[str] = set()
        for other in remaining:
            names |= subscribed_topics(other, resolved)
        metadata = {n: t for n in names if (t := self.topics.topic(n)) is not None}
        if metadata != group.subscription_metadata:
            records.append(ConsumerGroupPartitionMetadataRecord(group.group_id, tuple(sorted(
                metadata.values(), key=lambda t: t.name))))
        epoch = group.group_epoch + 1
        records.append(ConsumerGroupMetadataRecord(group.group_id, epoch))
        if not remaining:
            # The empty group's (empty) target assignment is at the new epoch too, as Kafka writes it: an
            # empty group's two epochs are equal.
            records.append(ConsumerGroupTargetAssignmentMetadataRecord(group.group_id, epoch))
        self._apply(group, records)
        group.metadata_version = self.topics.version
        removed = ", ".join(m.member_id for m in members)
        log.info("consumer_group_epoch_bumped", group_id=group.group_id, group_epoch=epoch,
                 reason=f"member {removed} removed: {reason}")
        self.events.on_group_epoch_bump(group.group_id, f"member removed: {reason}")
        return records

    def fence_from_timer(self, group_id: str, member_id: str, reason: str, epoch: int | None,
                         kind: str = "session_expiry") -> None:
        """A member's session or rebalance timeout fired: fence it if it is still there (at `epoch`)."""
        group = self.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return
        if epoch is not None and member.member_epoch != epoch:
            return  # it moved on to another epoch since the timer was set
        records = self._fence(group, member, reason, kind)
        # Like Kafka's timer-driven writes: a lost one is simply redone when the member is fenced again.
        self.append(group_id, tuple(records), lambda error: None)

    # -- the group table: loading, unloading, removing, describing ---------------------------------------

    def on_loaded(self, group: ConsumerGroup) -> None:
        """A group replayed from the log takes its id's entry; every member gets a fresh session timeout
        (and a rebalance timeout if it still has partitions to revoke), as Kafka's onLoaded does."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self.schedule_session_timeout(group.group_id, member.member_id)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group.group_id, member)

    def remove_group(self, group: ConsumerGroup, reason: str) -> None:
        """Forget the group (deleted, expired or unloaded); its tombstones are the caller's to write."""
        group.dead = True
        for member_id in list(group.members):
            self._cancel_timers(group.group_id, member_id)
        if self.groups.get(group.group_id) is group:
            # Only its own entry: a downgrade has already put the classic group in its place.
            del self.groups[group.group_id]
        log.info("consumer_group_removed", group_id=group.group_id, members=len(group.members), reason=reason)

    def describe_groups(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe: each group as the coordinator sees it, or why it cannot say."""
        out = []
        for group_id in group_ids:
            error = self.host.validate_group_status(group_id)
            if error is not None:
                out.append(ConsumerGroupDescription(group_id, error))
                continue
            group = self.group(group_id)
            if group is None:
                if self.host.classic_group_is_empty(group_id) is not None:
                    out.append(admin.not_found(group_id, f"Group {group_id} is not a consumer group."))
                else:
                    out.append(admin.not_found(group_id, f"Group {group_id} not found."))
                continue
            out.append(admin.describe(group, self.config.default_assignor, self._topic_name))
        return out

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.topics.topic_by_id(topic_id)
        return None if topic is None else topic.name

    # -- applying records ---------------------------------------------------------------------------------

    def _apply(self, group: ConsumerGroup, records: Iterable[CoordinatorRecord]) -> None:
        if self.groups.get(group.group_id) is not group:
            # A new group takes its id's entry (an upgraded or replaced classic group has left it already).
            self.groups[group.group_id] = group
        for record in records:
            if isinstance(record, CONSUMER_GROUP_RECORD_TYPES):
                group.apply(record)

    # -- timers ------------------------------------------------------------------------------------------

    def note_heartbeat_arrival(self, group_id: str, member_id: str, member_epoch: int, arrival_ms: int) -> None:
        """A ConsumerGroupHeartbeat that arrived at `arrival_ms` restarts its member's session from then,
        before it waits its turn behind the group's other requests: a member is judged by when it spoke,
        not by when the coordinator got to it. Only a member known at that epoch (or its previous one, which
        the heartbeat accepts too) is touched, so a stale or unknown sender keeps nobody alive."""
        if member_epoch <= 0:
            return
        group = self.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or member_epoch not in (member.member_epoch, member.previous_member_epoch):
            return
        self.schedule_session_timeout(group_id, member_id, arrival_ms)

    def schedule_session_timeout(self, group_id: str, member_id: str, from_ms: int | None = None) -> None:
        """A classic member inside the group keeps the session timeout it joined with."""
        group = self.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        classic = member.classic_member_metadata if member is not None else None
        timeout_ms = classic.session_timeout_ms if classic is not None else self.config.session_timeout_ms
        start_ms = self.host.now_ms if from_ms is None else from_ms
        self.timers.schedule(_timer_key(group_id, member_id, "session"), timeout_ms, start_ms,
                             lambda: self.fence_from_timer(group_id, member_id, "the member session expired", None))

    def schedule_classic_timeout(self, group_id: str, member: ConsumerGroupMember, kind: str) -> None:
        """A classic member must rejoin ("join") or sync ("sync") within its rebalance timeout; a join
        timeout already running is left alone (Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent)."""
        member_id = member.member_id
        key = _timer_key(group_id, member_id, kind)
        reason = _CLASSIC_TIMEOUT_REASONS[kind]

        def fire() -> None:
            self.fence_from_timer(group_id, member_id, reason, None, f"{kind}_timeout")

        delay_ms = max(member.rebalance_timeout_ms, 0)
        if kind == "join":
            self.timers.schedule_if_absent(key, delay_ms, self.host.now_ms, fire)
        else:
            self.timers.schedule(key, delay_ms, self.host.now_ms, fire)

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        delay_ms = max(member.rebalance_timeout_ms, 0)
        reason = f"it failed to transition from epoch {epoch} within {delay_ms}ms"
        self.timers.schedule(_timer_key(group_id, member_id, "rebalance"), delay_ms, self.host.now_ms,
                             lambda: self.fence_from_timer(group_id, member_id, reason, epoch, "rebalance_timeout"))

    def cancel_timer(self, group_id: str, member_id: str, kind: str) -> None:
        self.timers.cancel(_timer_key(group_id, member_id, kind))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for kind in _TIMER_KINDS:
            self.cancel_timer(group_id, member_id, kind)

    def scheduled_timers(self) -> dict[tuple[str, str, str], int]:
        """(group, member, kind) -> deadline, for tests and metrics."""
        return {(key[1], key[2], key[3]): deadline for key, deadline in self.timers.scheduled(_TIMER_OWNER).items()}


_TIMER_OWNER = "consumer"
_TIMER_KINDS = ("session", "rebalance", "join", "sync")
# Why members are removed, as metrics label them.
FENCE_KINDS = ("leave", "session_expiry", "rebalance_timeout", "join_timeout", "sync_timeout")
_CLASSIC_TIMEOUT_REASONS = {
    "join": "the classic member failed to rejoin within its rebalance timeout",
    "sync": "the classic member failed to sync within its rebalance timeout",
}


def _timer_key(group_id: str, member_id: str, kind: str) -> TimerKey:
    return (_TIMER_OWNER, group_id, member_id, kind)


def member_tombstones(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """A member's tombstones, in Kafka's order: current assignment, target, then metadata."""
    return [
        ConsumerGroupCurrentMemberAssignmentRecord(group_id, member_id, None),
        ConsumerGroupTargetAssignmentMemberRecord(group_id, member_id, None),
        ConsumerGroupMemberMetadataRecord(group_id, member_id, None),
    ]

