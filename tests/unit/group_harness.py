"""Drives the coordinator core with no event loop: domain verbs over a manual clock.

Monotonic and wall time start far apart, so any mix-up between them shows at once. Appends are kept in
`self.durable` once completed; `hold_appends()` keeps them pending so a test can look in between, and
`fail_appends(error)` makes the next ones fail.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from coordinator_server.group.api import (
    CommitPartition,
    HeartbeatInput,
    JoinGroupInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    LeaveMember,
    OffsetCommitInput,
    OffsetDeleteInput,
    OffsetFetchInput,
    OffsetFetchResult,
    PendingAppend,
    SyncGroupInput,
    SyncGroupResult,
)
from coordinator_server.group.consumer.api import ConsumerGroupHeartbeatInput
from coordinator_server.group.consumer.settings import ConsumerGroupConfig
from coordinator_server.group.consumer.topics import StaticTopicsImage
from coordinator_server.group.coordinator import GroupConfig, GroupCoordinator
from coordinator_server.group.group import GroupMetadata
from coordinator_server.group.records import CoordinatorRecord, GroupMetadataRecord
from coordinator_server.purgatory import Timer
from protocol.errors import Errors

START_MONOTONIC_MS = 5_000
WALL_OFFSET_MS = 1_700_000_000_000
DEFAULT_PROTOCOLS = (("range", b"range-meta"), ("roundrobin", b"rr-meta"))


@dataclass
class Reply:
    """A response that may arrive now or later."""

    value: Any = None
    count: int = 0

    def __call__(self, value: Any) -> None:
        self.value = value
        self.count += 1

    @property
    def done(self) -> bool:
        return self.count > 0


@dataclass
class Harness:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2_147_483_647
    group_max_pending_members: int = 10_000
    partitions: int = 50
    now: int = START_MONOTONIC_MS
    durable: list[CoordinatorRecord] = field(default_factory=list)
    pending: list[PendingAppend] = field(default_factory=list)
    holding: bool = False
    failing: Errors | None = None
    topics: dict[str, int] = field(default_factory=dict)  # the topic store KIP-848 consumer groups see
    consumer_config: ConsumerGroupConfig | None = None

    def __post_init__(self) -> None:
        ids = itertools.count(1)
        self.timer = Timer(self.now)
        self.image = StaticTopicsImage(self.topics)
        self.coordinator = GroupCoordinator(
            GroupConfig(
                min_session_timeout_ms=self.min_session_timeout_ms,
                max_session_timeout_ms=self.max_session_timeout_ms,
                initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
                group_max_size=self.group_max_size,
                group_max_pending_members=self.group_max_pending_members,
            ),
            self.partitions,
            self.timer,
            member_id_factory=lambda prefix: f"{prefix}-{next(ids):08d}",
            wall_offset_ms=WALL_OFFSET_MS,
            topics=self.image,
            consumer_config=self.consumer_config,
        )
        for p in range(self.partitions):
            self.coordinator.load_partition(p, [], self.now)

    # -- verbs ---------------------------------------------------------------------------------------

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        version: int = 9,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        client_id: str = "client",
        protocol_type: str = "consumer",
        reason: str | None = None,
    ) -> Reply:
        reply = Reply()
        self.coordinator.handle_join_group(
            JoinGroupInput(group, member_id, instance, session_ms, rebalance_ms, protocol_type, protocols,
                           version, client_id, "/127.0.0.1", reason),
            self.now, reply,
        )
        self._after_call()
        return reply

    def join_new_member(self, group: str = "g", **kwargs: Any) -> Reply:
        """The KIP-394 round trip: MEMBER_ID_REQUIRED, then the real join with the given id."""
        first = self.join(group, **kwargs)
        assert first.value.error is Errors.MEMBER_ID_REQUIRED, first.value
        return self.join(group, member_id=first.value.member_id, **kwargs)

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        version: int = 5,
    ) -> Reply:
        reply = Reply()
        self.coordinator.handle_sync_group(
            SyncGroupInput(group, generation, member_id, instance, protocol_type, protocol_name,
                           tuple((assignments or {}).items()), version),
            self.now, reply,
        )
        self._after_call()
        return reply

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str | None = None) -> Errors:
        error = self.coordinator.handle_heartbeat(HeartbeatInput(group, generation, member_id, instance, 4), self.now)
        self._after_call()
        return error

    def consumer_heartbeat(self, group: str, member_id: str, epoch: int, **kwargs: Any) -> Reply:
        """A KIP-848 ConsumerGroupHeartbeat; joining (epoch 0) fills in what a first request must carry."""
        if epoch == 0:
            kwargs.setdefault("rebalance_timeout_ms", 300_000)
            kwargs.setdefault("owned_partitions", ())
            if "subscribed_topic_regex" not in kwargs:
                kwargs.setdefault("subscribed_topic_names", tuple(self.topics))
        reply = Reply()
        self.coordinator.handle_consumer_group_heartbeat(
            ConsumerGroupHeartbeatInput(group, member_id, epoch, client_id="client", client_host="/127.0.0.1",
                                        **kwargs), self.now, reply)
        self._after_call()
        return reply

    def leave(self, group: str, *members: tuple[str, str | None], version: int = 5) -> LeaveGroupResult:
        result = self.coordinator.handle_leave_group(
            LeaveGroupInput(group, tuple(LeaveMember(m, i, None) for m, i in members), version), self.now
        )
        self._after_call()
        return result

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str | None = "",
        retention_ms: int = -1,
        version: int = 8,
        commit_timestamp_ms: int = -1,
    ) -> Reply:
        reply = Reply()
        partitions = tuple(CommitPartition(t, p, o, -1, metadata, commit_timestamp_ms) for (t, p), o in offsets.items())
        self.coordinator.handle_offset_commit(
            OffsetCommitInput(group, generation, member_id, instance, retention_ms, partitions, version), self.now, reply
        )
        self._after_call()
        return reply

    def fetch(self, group: str, partitions: list[tuple[str, int]] | None = None, version: int = 8,
              member_id: str | None = None, member_epoch: int = -1) -> OffsetFetchResult:
        result = self.coordinator.handle_offset_fetch(
            OffsetFetchInput(group, None if partitions is None else tuple(partitions), False, version, member_id,
                             member_epoch), self.now
        )
        self._after_call()
        return result

    def delete_offsets(self, group: str, *partitions: tuple[str, int]) -> Reply:
        reply = Reply()
        self.coordinator.handle_offset_delete(OffsetDeleteInput(group, tuple(partitions)), self.now, reply)
        self._after_call()
        return reply

    def committed(self, group: str, topic: str, partition: int) -> int:
        [fetched] = self.fetch(group, [(topic, partition)]).offsets
        return fetched.offset

    def sleep(self, ms: int) -> None:
        """Let time pass in 1 ms steps is too slow; jump, letting the wheel fire everything due."""
        self.now += ms
        self.coordinator.advance_clock(self.now)
        self._after_call()

    def settle(self, group_id: str = "g") -> None:
        """Let a join phase run its course (the initial delay may wait several times)."""
        for _ in range(50):
            if self.group(group_id).state.value != "PreparingRebalance":
                return
            self.sleep(max(self.initial_rebalance_delay_ms, 1))
        raise AssertionError(f"group {group_id} never left PreparingRebalance")

    # -- appends -------------------------------------------------------------------------------------

    def hold_appends(self) -> None:
        self.holding = True

    def fail_appends(self, error: Errors) -> None:
        self.failing = error

    def release_appends(self, error: Errors = Errors.NONE) -> None:
        self.holding = False
        pending, self.pending = self.pending, []
        for append in pending:
            self._complete(append, error)
        self._after_call()

    def _after_call(self) -> None:
        # As the runtime does: timers made due by the call run right after it, never inside it.
        self.coordinator.advance_clock(self.now)
        self.pending.extend(self.coordinator.take_appends())
        while not self.holding and self.pending:
            append = self.pending.pop(0)
            self._complete(append, self.failing or Errors.NONE)
            self.pending.extend(self.coordinator.take_appends())

    def _complete(self, append: PendingAppend, error: Errors) -> None:
        if error is Errors.NONE:
            self.durable.extend(append.records)
        append.complete(error, self.now)

    # -- looking -------------------------------------------------------------------------------------

    def group(self, group_id: str = "g") -> GroupMetadata:
        group = self.coordinator.classic_group(group_id)
        assert group is not None, f"no group {group_id}"
        return group

    def group_records(self, group_id: str = "g") -> list[GroupMetadataRecord]:
        return [r for r in self.durable if isinstance(r, GroupMetadataRecord) and r.group_id == group_id]

    def form_group(self, n: int, group: str = "g", **kwargs: Any) -> list[JoinGroupResult]:
        """n dynamic members join, the join completes, the leader syncs: a Stable group. Returns join results."""
        replies = [self.join_new_member(group, **kwargs) for _ in range(n)]
        for _ in range(20):
            if all(r.done for r in replies):
                break
            self.sleep(self.initial_rebalance_delay_ms or 1)
        results = [r.value for r in replies]
        assert all(r.error is Errors.NONE for r in results), results
        leader = next(r for r in results if r.members)
        assignments = {r.member_id: f"assignment-{r.member_id}".encode() for r in results}
        syncs = [self.sync(group, r.member_id, r.generation_id,
                           assignments if r.member_id == leader.member_id else None) for r in results]
        assert all(s.done and s.value.error is Errors.NONE for s in syncs), [s.value for s in syncs]
        return results


def sync_result(reply: Reply) -> SyncGroupResult:
    assert reply.done, "SyncGroup not answered"
    return reply.value  # type: ignore[no-any-return]


def join_result(reply: Reply) -> JoinGroupResult:
    assert reply.done, "JoinGroup not answered"
    return reply.value  # type: ignore[no-any-return]
