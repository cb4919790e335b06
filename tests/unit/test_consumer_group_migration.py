"""KIP-848's migration through the coordinator façade, on a fake clock: a classic group becomes a consumer
group when a consumer-protocol member joins (upgrade), classic members are then served inside it with
assignments computed by the coordinator, and it becomes a classic group again when the last
consumer-protocol member goes (downgrade) — each following group.consumer.migration.policy, with Kafka's
records, and replayed to the same groups after a restart."""
from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from coordinator_server.group.consumer.group import ConsumerGroupState
from coordinator_server.group.consumer.records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ConsumerGroupMetadataRecord,
)
from coordinator_server.group.consumer.settings import ConsumerGroupConfig
from coordinator_server.group.records import GroupMetadataRecord
from coordinator_server.group.state import PREPARING_REBALANCE, STABLE
from coordinator_server.storage.codec import decode, encode_record
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result, sync_result

TOPICS = {"orders": 6}
GROUP = "mixed"
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(owned: dict[str, list[int]] | None = None, version: int = 1) -> bytes:
    tp = ConsumerProtocolSubscription.TopicPartition
    return bytes(ConsumerProtocolSubscription(
        version=version, topics=["orders"], user_data=None,
        owned_partitions=[tp(topic=t, partitions=p) for t, p in (owned or {}).items()]).encode(version=version))


def assignment(partitions: list[int]) -> bytes:
    tp = ConsumerProtocolAssignment.TopicPartition
    return bytes(ConsumerProtocolAssignment(version=1, user_data=None, assigned_partitions=[
        tp(topic="orders", partitions=partitions)]).encode(version=1))


def partitions_of(raw: bytes) -> set[int]:
    decoded = ConsumerProtocolAssignment.decode(raw)
    return {p for tp in decoded.assigned_partitions for p in tp.partitions}


def protocols(owned: dict[str, list[int]] | None = None) -> tuple[tuple[str, bytes], ...]:
    return (("range", subscription(owned)), ("roundrobin", subscription(owned)))


def harness(policy: str = "bidirectional") -> Harness:
    return Harness(topics=TOPICS, initial_rebalance_delay_ms=0,
                   consumer_config=ConsumerGroupConfig(migration_policy=policy))


def classic_group(h: Harness) -> tuple[list[str], int]:
    """Two classic members (kafka-python-like: range first) split `orders`; returns (ids, generation)."""
    kwargs = dict(protocols=protocols(), session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS)
    a = join_result(h.join_new_member(GROUP, **kwargs)).member_id  # alone: generation 1 at once
    b = h.join_new_member(GROUP, **kwargs)  # parked until a rejoins
    rejoined = join_result(h.join(GROUP, member_id=a, **kwargs))
    ids = sorted({a, join_result(b).member_id})
    generation, leader = rejoined.generation_id, rejoined.leader
    plan = {ids[0]: assignment([0, 1, 2]), ids[1]: assignment([3, 4, 5])}
    for member_id in ids:
        reply = h.sync(GROUP, member_id, generation, plan if member_id == leader else None)
        if member_id == leader:
            assert sync_result(reply).error is Errors.NONE
    group = h.coordinator.classic_group(GROUP)
    assert group is not None and group.is_state(STABLE)
    return ids, generation


def topic_id(h: Harness) -> uuid.UUID:
    topic = h.image.topic("orders")
    assert topic is not None
    return topic.topic_id


def test_a_consumer_member_upgrades_the_classic_group_keeping_every_assignment() -> None:
    h = harness()
    (a, b), generation = classic_group(h)
    h.commit(GROUP, {("orders", 0): 7}, generation=generation, member_id=a)
    reply = h.consumer_heartbeat(GROUP, "c1", 0)
    assert reply.value.error is Errors.NONE, reply.value
    assert h.coordinator.classic_group(GROUP) is None
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None and set(group.members) == {a, b, "c1"}
    # The classic members keep their partitions at epoch = the generation until they rejoin.
    tid = topic_id(h)
    assert group.members[a].assigned_partitions == {tid: frozenset({0, 1, 2})}
    assert group.members[a].member_epoch == generation and group.members[a].uses_classic_protocol
    assert group.members[a].classic_member_metadata.session_timeout_ms == SESSION_MS  # type: ignore[union-attr]
    assert group.group_epoch == generation + 1
    # Kafka's order: the classic group's tombstone, then the consumer group's records.
    written = h.durable[h.durable.index(GroupMetadataRecord(GROUP, None)):]
    assert isinstance(written[1], CONSUMER_GROUP_RECORD_TYPES)
    assert ConsumerGroupMetadataRecord(GROUP, generation) in written
    assert h.committed(GROUP, "orders", 0) == 7
    # The classic members learn of the rebalance at their next heartbeat.
    assert h.heartbeat(GROUP, a, generation) is Errors.REBALANCE_IN_PROGRESS


def settle(h: Harness, classic: list[str], consumer: list[str]) -> dict[str, set[int]]:
    """Rounds of classic rejoins (eager: owning nothing when they join) and consumer heartbeats until
    the group is Stable; returns who holds what."""
    tid = topic_id(h)
    held: dict[str, set[int]] = {}
    epochs: dict[str, int] = {}
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None
    for _ in range(8):
        for member_id in classic:
            member = group.members[member_id]
            if h.heartbeat(GROUP, member_id, member.member_epoch) is Errors.REBALANCE_IN_PROGRESS:
                joined = join_result(h.join(GROUP, member_id=member_id, protocols=protocols(),
                                            session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS))
                assert joined.error is Errors.NONE, joined
                assert (joined.leader, joined.members, joined.protocol_name) == ("", [], "range")
                synced = sync_result(h.sync(GROUP, member_id, joined.generation_id, protocol_type="consumer",
                                            protocol_name="range"))
                assert synced.error is Errors.NONE, synced
                held[member_id] = partitions_of(synced.assignment)
        for member_id in consumer:
            member = group.members[member_id]
            owned = ((tid, tuple(sorted(held.get(member_id, set())))),)
            result = h.consumer_heartbeat(GROUP, member_id, member.member_epoch, owned_partitions=owned).value
            assert result.error is Errors.NONE, result
            epochs[member_id] = result.member_epoch
            if result.assignment is not None:
                held[member_id] = set(result.assignment.get(tid, ()))
        every = [p for member_partitions in held.values() for p in member_partitions]
        assert len(every) == len(set(every)), f"a partition held twice: {held}"
        if group.state is ConsumerGroupState.STABLE and sorted(every) == list(range(6)):
            return held
    raise AssertionError(f"the mixed group did not settle: {held}, {group.state}")


def mixed_group(h: Harness) -> tuple[str, str]:
    """The classic group upgraded by consumer member c1, and settled: the two classic members' ids."""
    (a, b), _generation = classic_group(h)
    assert h.consumer_heartbeat(GROUP, "c1", 0).value.error is Errors.NONE
    settle(h, [a, b], ["c1"])
    return a, b


def test_classic_members_are_assigned_by_the_coordinator_and_never_overlap() -> None:
    h = harness()
    (a, b), _generation = classic_group(h)
    h.consumer_heartbeat(GROUP, "c1", 0)
    held = settle(h, [a, b], ["c1"])
    assert sorted(len(p) for p in held.values()) == [2, 2, 2]
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None and len({m.member_epoch for m in group.members.values()}) == 1


def test_the_last_consumer_member_leaving_downgrades_the_group_and_a_rebalance_follows() -> None:
    h = harness()
    a, b = mixed_group(h)
    consumer = h.coordinator.consumer_group(GROUP)
    assert consumer is not None
    epoch, targets = consumer.group_epoch, {m: consumer.member_target(m) for m in (a, b)}
    h.consumer_heartbeat(GROUP, "c1", -1)
    assert h.coordinator.consumer_group(GROUP) is None
    group = h.coordinator.classic_group(GROUP)
    assert group is not None and group.is_state(PREPARING_REBALANCE)
    record = h.durable[-1]
    assert isinstance(record, GroupMetadataRecord) and record.value is not None
    assert (record.value.generation, record.value.protocol) == (epoch, "range")
    tid = topic_id(h)
    for m in record.value.members:  # the classic assignment is the consumer group's target
        assert partitions_of(m.assignment) == set(targets[m.member_id].get(tid, ()))
    # The members rejoin as a classic group; the leader assigns, as the classic protocol does.
    assert h.heartbeat(GROUP, a, epoch) is Errors.REBALANCE_IN_PROGRESS
    ja = h.join(GROUP, member_id=a, protocols=protocols(), session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS)
    jb = h.join(GROUP, member_id=b, protocols=protocols(), session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS)
    assert join_result(ja).error is Errors.NONE and join_result(jb).generation_id == epoch + 1
    assert join_result(ja).leader in (a, b)


def test_a_consumer_member_whose_session_expires_downgrades_the_group() -> None:
    h = harness()
    a, b = mixed_group(h)
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None
    for _ in range(6):  # the classic members keep heartbeating; c1 is silent past its 45 s session
        h.sleep(8_000)
        for member_id in (a, b):
            h.heartbeat(GROUP, member_id, group.members[member_id].member_epoch if member_id in group.members else 0)
    assert h.coordinator.consumer_group(GROUP) is None
    assert h.coordinator.classic_group(GROUP) is not None


@pytest.mark.parametrize("policy", ["downgrade", "disabled"])
def test_no_upgrade_unless_the_policy_allows_it(policy: str) -> None:
    h = harness(policy)
    classic_group(h)
    reply = h.consumer_heartbeat(GROUP, "c1", 0)
    assert (reply.value.error, reply.value.error_message) == (Errors.GROUP_ID_NOT_FOUND,
                                                              f"Group {GROUP} is not a consumer group.")
    assert h.coordinator.classic_group(GROUP) is not None


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_no_downgrade_unless_the_policy_allows_it(policy: str) -> None:
    h = harness("bidirectional")
    a, b = mixed_group(h)
    h.coordinator.consumer.config = ConsumerGroupConfig(migration_policy=policy)
    h.consumer_heartbeat(GROUP, "c1", -1)
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None and set(group.members) == {a, b} and h.coordinator.classic_group(GROUP) is None


def test_a_classic_group_of_another_protocol_type_is_not_upgraded() -> None:
    h = harness()
    h.join_new_member(GROUP, protocol_type="connect", session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS)
    h.sleep(1)
    reply = h.consumer_heartbeat(GROUP, "c1", 0)
    assert reply.value.error is Errors.GROUP_ID_NOT_FOUND


def test_classic_member_errors_inside_a_consumer_group() -> None:
    h = harness()
    (a, _b), generation = classic_group(h)
    h.consumer_heartbeat(GROUP, "c1", 0)
    assert h.heartbeat(GROUP, a, generation + 5) is Errors.ILLEGAL_GENERATION
    assert h.heartbeat(GROUP, "nobody", generation) is Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat(GROUP, "c1", 1) is Errors.UNKNOWN_MEMBER_ID  # a consumer-protocol member
    assert sync_result(h.sync(GROUP, a, generation + 5)).error is Errors.ILLEGAL_GENERATION
    # A newer group epoch: SyncGroup says rejoin.
    assert sync_result(h.sync(GROUP, a, generation)).error is Errors.REBALANCE_IN_PROGRESS
    # Commits at the member epoch (the generation the classic member knows), ILLEGAL_GENERATION otherwise.
    stale = h.commit(GROUP, {("orders", 1): 3}, generation=generation + 1, member_id=a)
    assert [p.error for p in stale.value.partitions] == [Errors.ILLEGAL_GENERATION]
    current = h.commit(GROUP, {("orders", 1): 3}, generation=generation, member_id=a)
    assert [p.error for p in current.value.partitions] == [Errors.NONE] and h.committed(GROUP, "orders", 1) == 3
    other = join_result(h.join(GROUP, member_id=a, protocols=(("sticky", subscription()),),
                               session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS))
    assert other.error is Errors.INCONSISTENT_GROUP_PROTOCOL  # b supports only range and roundrobin


def test_a_classic_member_that_does_not_rejoin_is_fenced_at_its_rebalance_timeout() -> None:
    h = harness()
    (a, _b), generation = classic_group(h)
    h.consumer_heartbeat(GROUP, "c1", 0)
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None
    assert h.heartbeat(GROUP, a, generation) is Errors.REBALANCE_IN_PROGRESS
    for _ in range(4):  # a keeps heartbeating (its session lives) but never rejoins
        h.sleep(REBALANCE_MS // 4 + 1)
        h.heartbeat(GROUP, a, generation)
        h.consumer_heartbeat(GROUP, "c1", group.members["c1"].member_epoch)
    assert a not in group.members


def test_a_classic_member_leaving_bumps_the_epoch_once() -> None:
    h = harness()
    (a, b), _generation = classic_group(h)
    h.consumer_heartbeat(GROUP, "c1", 0)
    group = h.coordinator.consumer_group(GROUP)
    assert group is not None
    epoch = group.group_epoch
    result = h.leave(GROUP, (a, None), (b, None), ("nobody", None))
    assert [r.error for r in result.members] == [Errors.NONE, Errors.NONE, Errors.UNKNOWN_MEMBER_ID]
    assert set(group.members) == {"c1"} and group.group_epoch == epoch + 1


def test_a_restart_replays_the_mixed_group_and_the_downgraded_group() -> None:
    h = harness()
    a, b = mixed_group(h)
    before = h.coordinator.consumer_group(GROUP)
    assert before is not None

    def replay(source: Harness) -> Harness:
        fresh = harness()
        records = [decode(*encode_record(r)) for r in source.durable]
        fresh.coordinator.load_partition(fresh.coordinator.partition_for(GROUP), records, fresh.now)  # type: ignore[arg-type]
        return fresh

    mixed = replay(h).coordinator.consumer_group(GROUP)
    assert mixed is not None and mixed.members == before.members and mixed.group_epoch == before.group_epoch
    h.consumer_heartbeat(GROUP, "c1", -1)
    downgraded = replay(h)
    assert downgraded.coordinator.consumer_group(GROUP) is None
    group = downgraded.coordinator.classic_group(GROUP)
    assert group is not None and set(group.members) == {a, b}
