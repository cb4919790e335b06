"""Drives the KIP-848 consumer group core with no event loop: domain verbs over a manual clock.

`ConsumerHarness` owns a `ConsumerGroupManager` with a fake host (the gate always open, no classic
groups) and a static topics image; appends complete at once unless `holding`, and their records are
kept in `durable`. `Consumer` plays a well-behaved client: it reports what it owns, gives up what the
coordinator no longer assigns it, and takes what it is given.
"""
from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from coordinator_server.group.api import PendingAppend
from coordinator_server.group.consumer.api import ConsumerGroupHeartbeatInput, ConsumerGroupHeartbeatResult
from coordinator_server.group.consumer.group import ConsumerGroup
from coordinator_server.group.consumer.manager import ConsumerGroupManager
from coordinator_server.group.consumer.records import CONSUMER_GROUP_RECORD_TYPES, Assignment
from coordinator_server.group.consumer.settings import ConsumerGroupConfig
from coordinator_server.group.consumer.topics import StaticTopicsImage
from coordinator_server.group.records import CoordinatorRecord
from coordinator_server.group.table import Group
from coordinator_server.purgatory import Timer
from protocol.errors import Errors

START_MONOTONIC_MS = 5_000
WALL_OFFSET_MS = 1_700_000_000_000
GROUP = "cg"


class FakeHost:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.timer = Timer(now_ms)
        self.gate: Errors | None = None
        self.classic: dict[str, dict[tuple[str, int], object]] = {}  # empty classic groups with their offsets
        self.groups: dict[str, Group] = {}  # the shard's one table, here holding the consumer groups only

    @property
    def wall_ms(self) -> int:
        return self.now_ms + WALL_OFFSET_MS

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None:
        if not group_id:
            return Errors.INVALID_GROUP_ID
        return self.gate

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        return True if group_id in self.classic else None

    def take_over_classic_group(self, group_id: str) -> tuple[dict[tuple[str, int], object], CoordinatorRecord]:
        from coordinator_server.group.records import GroupMetadataRecord
        return self.classic.pop(group_id), GroupMetadataRecord(group_id, None)

    # Migration is the façade's (test_consumer_group_migration.py): here no group changes protocol.
    def upgrade_classic_group(self, group_id: str) -> None:
        return None

    def downgrade_consumer_group(self, group: object, remaining: object) -> None:
        return None


@dataclass
class ConsumerHarness:
    topics: dict[str, int] = field(default_factory=lambda: {"orders": 6})
    config: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    holding: bool = False
    failing: Errors | None = None

    def __post_init__(self) -> None:
        self.host = FakeHost(START_MONOTONIC_MS)
        self.image = StaticTopicsImage(self.topics)
        self.durable: list[CoordinatorRecord] = []
        self.pending: list[PendingAppend] = []
        ids = itertools.count(1)
        self.manager = ConsumerGroupManager(self.host, self._append, self.config, self.image,
                                            new_member_id=lambda: f"generated-{next(ids)}")

    # -- effects -----------------------------------------------------------------------------------------

    def _append(self, group_id: str, records: tuple[CoordinatorRecord, ...], on_done) -> None:  # type: ignore[no-untyped-def]
        append = PendingAppend(group_id, 0, records, lambda error, now_ms: on_done(error))
        if self.holding:
            self.pending.append(append)
        else:
            self._complete(append)

    def _complete(self, append: PendingAppend) -> None:
        error = self.failing or Errors.NONE
        if error is Errors.NONE:
            self.durable.extend(append.records)
        append.complete(error, self.host.now_ms)

    def release(self) -> None:
        pending, self.pending = self.pending, []
        for append in pending:
            self._complete(append)

    # -- verbs ---------------------------------------------------------------------------------------------

    def heartbeat(self, member_id: str, member_epoch: int, **kwargs: object) -> ConsumerGroupHeartbeatResult:
        inp = ConsumerGroupHeartbeatInput(GROUP if "group_id" not in kwargs else kwargs.pop("group_id"),  # type: ignore[arg-type]
                                          member_id, member_epoch, client_id="client", client_host="/127.0.0.1",
                                          **kwargs)  # type: ignore[arg-type]
        replies: list[ConsumerGroupHeartbeatResult] = []
        self.manager.handle_heartbeat(inp, replies.append)
        assert len(replies) <= 1
        return replies[0] if replies else None  # type: ignore[return-value]

    def join(self, member_id: str, topics: tuple[str, ...] | None = ("orders",), **kwargs: object) -> ConsumerGroupHeartbeatResult:
        kwargs.setdefault("rebalance_timeout_ms", 300_000)
        kwargs.setdefault("owned_partitions", ())
        return self.heartbeat(member_id, 0, subscribed_topic_names=topics, **kwargs)

    def sleep(self, ms: int) -> None:
        """Advance the clock bucket by bucket, running the timers that come due."""
        target = self.host.now_ms + ms
        timer = self.host.timer
        while True:
            next_ms = timer.next_expiration_ms()
            if next_ms is None or next_ms > target:
                break
            self.host.now_ms = max(self.host.now_ms, next_ms)
            timer.advance_clock(self.host.now_ms)
        self.host.now_ms = target
        timer.advance_clock(target)

    # -- looking -------------------------------------------------------------------------------------------

    @property
    def group(self) -> ConsumerGroup:
        group = self.manager.group(GROUP)
        assert group is not None
        return group

    def topic_id(self, name: str) -> uuid.UUID:
        topic = self.image.topic(name)
        assert topic is not None
        return topic.topic_id

    def tps(self, assignment: Assignment | None) -> set[tuple[str, int]]:
        """An assignment as (topic name, partition) pairs."""
        names = {self.topic_id(n): n for n in self.image.topic_names()}
        return {(names[t], p) for t, ps in (assignment or {}).items() for p in ps}

    def replayed(self, group_id: str = GROUP) -> ConsumerGroup:
        """A fresh group from the durable records of `group_id`: what a restart would load."""
        group = ConsumerGroup(group_id)
        for record in self.durable:
            if isinstance(record, CONSUMER_GROUP_RECORD_TYPES) and record.group_id == group_id:
                group.apply(record)
        return group


class Consumer:
    """A well-behaved member: heartbeats report what it owns; it revokes at once."""

    def __init__(self, harness: ConsumerHarness, member_id: str, topics: tuple[str, ...] = ("orders",),
                 instance_id: str | None = None, regex: str | None = None, assignor: str | None = None) -> None:
        self.h = harness
        self.member_id = member_id
        self.topics = topics
        self.instance_id = instance_id
        self.regex = regex
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.last: ConsumerGroupHeartbeatResult | None = None

    def poll(self) -> ConsumerGroupHeartbeatResult:
        if self.epoch == 0:
            result = self.h.heartbeat(self.member_id, 0, subscribed_topic_names=self.topics if self.regex is None else None,
                                      subscribed_topic_regex=self.regex, instance_id=self.instance_id,
                                      rebalance_timeout_ms=300_000, owned_partitions=(), server_assignor=self.assignor)
        else:
            result = self.h.heartbeat(self.member_id, self.epoch, instance_id=self.instance_id,
                                      owned_partitions=tuple((t, tuple(sorted(p))) for t, p in self.owned.items()))
        self.last = result
        if result is None:
            return result
        if result.error is Errors.NONE:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = {t: frozenset(p) for t, p in result.assignment.items() if p}
        elif result.error in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            self.epoch = 0
            self.owned = {}
        return result

    def leave(self, static: bool = False) -> ConsumerGroupHeartbeatResult:
        result = self.h.heartbeat(self.member_id, -2 if static else -1, instance_id=self.instance_id)
        self.owned = {}
        self.epoch = 0
        return result

    @property
    def partitions(self) -> set[tuple[str, int]]:
        return self.h.tps(self.owned)
