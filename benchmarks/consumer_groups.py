"""KIP-848 consumer groups, measured in process (the core is synchronous: its cost is CPU, no I/O).

- assignor: the server-side assignors' time for one assignment against group size (a fresh one, and the
  sticky one after one member joins a settled group), beside the baseline measured in the same run:
  kafka-python's range assignor, which a classic group's leader runs on the client for the same group.
  Kafka reports its uniform assignor at about 1.7 ms for 5,000 members (KIP-848); ours is stated beside it.
- converge: a settled group of N members over P partitions, one member joins; every member then heartbeats
  once per round, with the partitions it owns, until every member is reconciled to the new target and
  every partition owned. Reported: the rounds (each is one heartbeat interval in real life: 5 s by
  default), the heartbeats and the core's CPU time over all of them.
"""
from __future__ import annotations

import time
import uuid
from collections import namedtuple
from typing import Any

from coordinator_server.group.consumer.api import ConsumerGroupHeartbeatInput, ConsumerGroupHeartbeatResult
from coordinator_server.group.consumer.assignors import ASSIGNORS, MemberSpec
from coordinator_server.group.consumer.group import ConsumerGroup
from coordinator_server.group.consumer.manager import ConsumerGroupManager
from coordinator_server.group.consumer.member import ConsumerGroupMember, MemberState
from coordinator_server.group.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    CurrentAssignmentValue,
    TopicMetadata,
)
from coordinator_server.group.consumer.topics import StaticTopicsImage
from coordinator_server.purgatory import Timer
from protocol.errors import Errors

GROUP = "bench"
TOPIC = "events"
KAFKA_UNIFORM_5000_MS = 1.7  # KIP-848's figure for Kafka's uniform assignor, 5,000 members


def _best_of(fn: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def assignor(sizes: list[int], partitions: int, repeats: int = 3) -> list[dict[str, Any]]:
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    topic_id = uuid.uuid4()
    topics = {topic_id: TopicMetadata(topic_id, TOPIC, partitions)}
    ClassicMember = namedtuple("ClassicMember", "member_id group_instance_id metadata")
    Subscription = namedtuple("Subscription", "topics")

    class Cluster:
        @staticmethod
        def partitions_for_topic(topic: str) -> set[int]:
            return set(range(partitions))

    rows = []
    for n in sizes:
        specs = {f"member-{i:06d}": MemberSpec(frozenset({topic_id}), {}) for i in range(n)}
        row: dict[str, Any] = {"members": n, "partitions": partitions}
        for name in ("uniform", "range"):
            settled = ASSIGNORS[name](specs, topics)
            joined = {m: MemberSpec(frozenset({topic_id}), settled.get(m, {})) for m in specs}
            joined["member-zz-new"] = MemberSpec(frozenset({topic_id}), {})
            row[f"{name}_fresh_ms"] = _best_of(lambda a=ASSIGNORS[name], s=specs: a(s, topics), repeats) * 1000
            row[f"{name}_join_ms"] = _best_of(lambda a=ASSIGNORS[name], s=joined: a(s, topics), repeats) * 1000
        classic = [ClassicMember(m, None, Subscription([TOPIC])) for m in specs]
        row["kafka_python_range_ms"] = _best_of(lambda c=classic: RangePartitionAssignor.assign(Cluster, c),
                                                repeats) * 1000
        row["uniform_join_vs_kafka_python_range"] = row["uniform_join_ms"] / row["kafka_python_range_ms"]
        rows.append(row)
    return rows


class _Host:
    """The façade as the manager needs it: one owned partition, no classic groups, a clock we move."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.wall_ms = 1_700_000_000_000
        self.timer = Timer(0)
        self.groups: dict[str, Any] = {}  # the shard's one group table

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None:
        return None

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        return None

    def take_over_classic_group(self, group_id: str) -> Any:
        raise AssertionError("no classic groups here")

    def upgrade_classic_group(self, group_id: str) -> None:
        return None

    def downgrade_consumer_group(self, group: Any, remaining: Any) -> None:
        return None


def _settled_group(members: int, image: StaticTopicsImage) -> ConsumerGroup:
    """A Stable group at epoch 1, built from the records a coordinator would have written for it."""
    topic = image.topic(TOPIC)
    assert topic is not None
    ids = [f"member-{i:06d}" for i in range(members)]
    specs = {m: MemberSpec(frozenset({topic.topic_id}), {}) for m in ids}
    target = ASSIGNORS["uniform"](specs, {topic.topic_id: topic})
    template = ConsumerGroupMember("", client_id="bench", client_host="/127.0.0.1",
                                   subscribed_topic_names=frozenset({TOPIC}), rebalance_timeout_ms=300_000)
    records: list[ConsumerGroupRecord] = []
    for m in ids:
        records.append(ConsumerGroupMemberMetadataRecord(GROUP, m, template.metadata_value()))
    records.append(ConsumerGroupPartitionMetadataRecord(GROUP, (topic,)))
    records.append(ConsumerGroupMetadataRecord(GROUP, 1))
    for m in ids:
        records.append(ConsumerGroupTargetAssignmentMemberRecord(GROUP, m, target.get(m, {})))
    records.append(ConsumerGroupTargetAssignmentMetadataRecord(GROUP, 1))
    for m in ids:
        records.append(ConsumerGroupCurrentMemberAssignmentRecord(
            GROUP, m, CurrentAssignmentValue(1, 0, int(MemberState.STABLE), target.get(m, {}), {})))
    group = ConsumerGroup(GROUP)
    group.apply_all(records)
    return group


def converge(members: int, partitions: int, max_rounds: int = 20) -> dict[str, Any]:
    image = StaticTopicsImage({TOPIC: partitions})
    host = _Host()
    manager = ConsumerGroupManager(host, lambda group_id, records, done: done(Errors.NONE), topics=image)  # type: ignore[arg-type]
    group = _settled_group(members, image)
    manager.on_loaded(group)
    group.metadata_version = image.version
    owned: dict[str, dict[uuid.UUID, tuple[int, ...]]] = {
        m.member_id: {t: tuple(sorted(p)) for t, p in m.assigned_partitions.items()} for m in group.members.values()}
    epochs = {m.member_id: m.member_epoch for m in group.members.values()}
    replies: list[ConsumerGroupHeartbeatResult] = []

    def heartbeat(member_id: str) -> None:
        epoch = epochs[member_id]
        joining = epoch == 0
        inp = ConsumerGroupHeartbeatInput(
            GROUP, member_id, epoch, rebalance_timeout_ms=300_000 if joining else -1,
            subscribed_topic_names=(TOPIC,) if joining else None,
            owned_partitions=() if joining else tuple(owned[member_id].items()), client_id="bench",
            client_host="/127.0.0.1")
        manager.handle_heartbeat(inp, replies.append)
        result = replies.pop()
        assert result.error is Errors.NONE, result
        epochs[member_id] = result.member_epoch
        if result.assignment is not None:
            owned[member_id] = {t: tuple(sorted(p)) for t, p in result.assignment.items()}

    cpu0 = time.process_time()
    newcomer = "member-zz-new"
    epochs[newcomer], owned[newcomer] = 0, {}
    heartbeat(newcomer)
    join_cpu_s = time.process_time() - cpu0
    heartbeats, rounds = 1, 0
    while rounds < max_rounds:
        rounds += 1
        for member_id in list(epochs):
            heartbeat(member_id)
            heartbeats += 1
        if group.state.value == "Stable" and sum(len(p) for o in owned.values() for p in o.values()) == partitions:
            break
    cpu_s = time.process_time() - cpu0
    held = sorted(len(p) for o in owned.values() for p in o.values())
    return {"members": members + 1, "partitions": partitions, "rounds": rounds, "heartbeats": heartbeats,
            "core_cpu_s": cpu_s, "join_heartbeat_cpu_s": join_cpu_s, "converged": group.state.value == "Stable",
            "share_min": held[0] if held else 0, "share_max": held[-1] if held else 0,
            "seconds_at_default_interval": rounds * 5.0}


def run(quick: bool) -> dict[str, Any]:
    sizes = [100, 1000] if quick else [100, 1000, 5000]
    partitions = 2_000 if quick else 10_000
    return {"assignor": assignor(sizes, partitions, repeats=1 if quick else 3),
            "converge": converge(1_000 if quick else 5_000, partitions),
            "kafka_uniform_5000_ms": KAFKA_UNIFORM_5000_MS}
