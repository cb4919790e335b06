"""KIP-848 consumer groups through the coordinator façade: the shared group-id space with classic groups,
offsets at the member epoch, ListGroups/DeleteGroups/OffsetDelete rules, retention, and a restart that
replays the ConsumerGroup* records (through Kafka's bytes) to the same groups at the same epochs."""
from __future__ import annotations

from coordinator_server.group.consumer.group import ConsumerGroupState
from coordinator_server.group.consumer.records import CONSUMER_GROUP_RECORD_TYPES
from coordinator_server.group.records import GroupMetadataRecord
from coordinator_server.storage.codec import decode, encode_record
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result

TOPICS = {"orders": 4}


def consumer_group(h: Harness, n: int = 2, group: str = "cg", topics: tuple[str, ...] | None = None) -> list[tuple[str, int]]:
    """n members join and settle; returns (member id, epoch) per member."""
    members = [f"m{i}" for i in range(n)]
    epochs = dict.fromkeys(members, 0)
    owned: dict[str, tuple] = dict.fromkeys(members, ())  # type: ignore[type-arg]
    for _ in range(6):
        for m in members:
            kwargs: dict[str, object] = {"owned_partitions": owned[m]} if epochs[m] else {}
            if epochs[m] == 0 and topics is not None:
                kwargs["subscribed_topic_names"] = topics
            result = h.consumer_heartbeat(group, m, epochs[m], **kwargs).value
            assert result.error is Errors.NONE, result
            epochs[m] = result.member_epoch
            if result.assignment is not None:
                owned[m] = tuple((t, tuple(sorted(p))) for t, p in result.assignment.items())
    assert h.coordinator.consumer_group(group).state is ConsumerGroupState.STABLE  # type: ignore[union-attr]
    return list(epochs.items())


def test_a_consumer_group_settles_and_its_records_survive_kafkas_bytes() -> None:
    h = Harness(topics=TOPICS)
    consumer_group(h, 3)
    consumer_records = [r for r in h.durable if isinstance(r, CONSUMER_GROUP_RECORD_TYPES)]
    assert consumer_records
    for record in consumer_records:
        assert decode(*encode_record(record)) == record


def test_restart_resumes_the_group_at_its_epochs_without_reassignment() -> None:
    h = Harness(topics=TOPICS)
    members = consumer_group(h, 2)
    before = h.coordinator.consumer_group("cg")
    assert before is not None
    fresh = Harness(topics=TOPICS, now=h.now + 10_000)
    partition = fresh.coordinator.partition_for("cg")
    encoded = [encode_record(r) for r in h.durable]
    fresh.coordinator.load_partition(partition, [decode(k, v) for k, v in encoded], fresh.now)  # type: ignore[misc]
    after = fresh.coordinator.consumer_group("cg")
    assert after is not None
    assert after.members == before.members
    assert (after.group_epoch, after.assignment_epoch, after.state) == (before.group_epoch, before.assignment_epoch,
                                                                        ConsumerGroupState.STABLE)
    for member_id, epoch in members:
        owned = tuple((t, tuple(sorted(p))) for t, p in after.members[member_id].assigned_partitions.items())
        result = fresh.consumer_heartbeat("cg", member_id, epoch, owned_partitions=owned).value
        assert (result.error, result.member_epoch, result.assignment) == (Errors.NONE, epoch, None)
    assert fresh.coordinator.consumer_group("cg").group_epoch == before.group_epoch  # type: ignore[union-attr]


def test_loaded_members_get_session_timeouts() -> None:
    h = Harness(topics=TOPICS)
    consumer_group(h, 2)
    fresh = Harness(topics=TOPICS, now=h.now + 10_000)
    fresh.coordinator.load_partition(fresh.coordinator.partition_for("cg"), list(h.durable), fresh.now)
    fresh.sleep(45_000)
    group = fresh.coordinator.consumer_group("cg")
    assert group is not None and group.members == {}


def test_offset_commit_at_the_member_epoch() -> None:
    h = Harness(topics=TOPICS)
    (m0, epoch), _ = consumer_group(h, 2)
    ok = h.commit("cg", {("orders", 0): 5}, generation=epoch, member_id=m0, version=9).value
    assert [p.error for p in ok.partitions] == [Errors.NONE]
    stale = h.commit("cg", {("orders", 0): 6}, generation=epoch - 1, member_id=m0, version=9).value
    assert [p.error for p in stale.partitions] == [Errors.STALE_MEMBER_EPOCH]
    unknown = h.commit("cg", {("orders", 0): 6}, generation=epoch, member_id="nobody", version=9).value
    assert [p.error for p in unknown.partitions] == [Errors.UNKNOWN_MEMBER_ID]
    old_version = h.commit("cg", {("orders", 0): 6}, generation=epoch, member_id=m0, version=8).value
    assert [p.error for p in old_version.partitions] == [Errors.UNSUPPORTED_VERSION]
    admin = h.commit("cg", {("orders", 0): 6}).value  # no member: refused while the group has members
    assert [p.error for p in admin.partitions] == [Errors.UNKNOWN_MEMBER_ID]
    assert h.committed("cg", "orders", 0) == 5


def test_offset_fetch_v9_checks_the_member_epoch() -> None:
    h = Harness(topics=TOPICS)
    (m0, epoch), _ = consumer_group(h, 2)
    h.commit("cg", {("orders", 1): 7}, generation=epoch, member_id=m0, version=9)
    ok = h.fetch("cg", [("orders", 1)], version=9, member_id=m0, member_epoch=epoch)
    assert ok.error is Errors.NONE and ok.offsets[0].offset == 7
    assert h.fetch("cg", [("orders", 1)], version=9, member_id=m0, member_epoch=epoch + 1).error is Errors.STALE_MEMBER_EPOCH
    assert h.fetch("cg", [("orders", 1)], version=9, member_id="x", member_epoch=1).error is Errors.UNKNOWN_MEMBER_ID
    assert h.fetch("cg", [("orders", 1)]).offsets[0].offset == 7  # an admin tool, no member


def test_list_groups_names_the_type_and_filters_by_it() -> None:
    h = Harness(topics=TOPICS)
    consumer_group(h, 1)
    h.commit("simple", {("orders", 0): 1})
    _error, everything = h.coordinator.handle_list_groups([], [], h.now)
    assert {(g.group_id, g.group_type, g.protocol_type, g.state) for g in everything} == {
        ("cg", "consumer", "consumer", "Stable"), ("simple", "classic", "", "Empty")}
    _error, consumers = h.coordinator.handle_list_groups([], ["Consumer"], h.now)
    assert [g.group_id for g in consumers] == ["cg"]
    _error, stable = h.coordinator.handle_list_groups(["stable"], [], h.now)
    assert [g.group_id for g in stable] == ["cg"]


def test_describe_groups_sees_a_consumer_group_as_kafka_does() -> None:
    h = Harness(topics=TOPICS)
    consumer_group(h, 1)
    [described] = h.coordinator.handle_describe_groups(["cg"], 5, h.now)
    assert (described.error, described.state, described.members) == (Errors.NONE, "Dead", ())
    [v6] = h.coordinator.handle_describe_groups(["cg"], 6, h.now)
    assert (v6.error, v6.state, v6.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Dead",
                                                      "Group cg is not a classic group.")


def test_consumer_group_describe() -> None:
    h = Harness(topics=TOPICS)
    consumer_group(h, 2)
    [described, missing] = h.coordinator.handle_consumer_group_describe(["cg", "nope"], h.now)
    assert (described.state, described.group_epoch, described.assignment_epoch, described.assignor_name) == (
        "Stable", 3, 3, "uniform")
    assert sorted(m.member_id for m in described.members) == ["m0", "m1"]
    for member in described.members:
        assert member.member_type == 1 and member.assignment == member.target_assignment
        assert {tp.topic_name for tp in member.assignment} == {"orders"}
    assert (missing.error, missing.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Group nope not found.")


def test_delete_groups_only_when_empty_and_with_every_tombstone() -> None:
    h = Harness(topics=TOPICS)
    (m0, epoch), (m1, _e1) = consumer_group(h, 2)
    h.commit("cg", {("orders", 0): 3}, generation=epoch, member_id=m0, version=9)
    deleted = []
    h.coordinator.handle_delete_groups(["cg"], h.now, deleted.extend)
    assert [d.error for d in deleted] == [Errors.NON_EMPTY_GROUP]
    h.consumer_heartbeat("cg", m0, -1)
    h.consumer_heartbeat("cg", m1, -1)
    deleted = []
    h.coordinator.handle_delete_groups(["cg"], h.now, deleted.extend)
    h._after_call()
    assert [d.error for d in deleted] == [Errors.NONE]
    assert h.coordinator.consumer_group("cg") is None
    fresh = Harness(topics=TOPICS)
    fresh.coordinator.load_partition(fresh.coordinator.partition_for("cg"), list(h.durable), fresh.now)
    assert fresh.coordinator.consumer_group("cg") is None and fresh.coordinator.classic_group("cg") is None


def test_offset_delete_refuses_subscribed_topics() -> None:
    h = Harness(topics={"orders": 2, "old": 1})
    (m0, epoch), = consumer_group(h, 1, topics=("orders",))
    h.commit("cg", {("orders", 0): 1, ("old", 0): 2}, generation=epoch, member_id=m0, version=9)
    result = h.delete_offsets("cg", ("orders", 0), ("old", 0)).value
    assert [(p.topic, p.error) for p in result.partitions] == [
        ("orders", Errors.GROUP_SUBSCRIBED_TO_TOPIC), ("old", Errors.NONE)]


def test_an_empty_classic_group_becomes_a_consumer_group_with_its_offsets() -> None:
    h = Harness(topics=TOPICS)
    h.commit("cg", {("orders", 2): 9})  # a simple classic group: offsets only
    consumer_group(h, 1)
    assert h.coordinator.classic_group("cg") is None
    assert h.committed("cg", "orders", 2) == 9
    assert GroupMetadataRecord("cg", None) in h.durable


def test_classic_join_replaces_an_empty_consumer_group_and_joins_a_live_one() -> None:
    h = Harness(topics=TOPICS)
    (m0, epoch), = consumer_group(h, 1)
    # A live consumer group serves a classic member inside it (test_consumer_group_migration.py), but only
    # one that speaks the embedded consumer protocol.
    refused = join_result(h.join("cg", protocol_type="connect"))
    assert refused.error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert join_result(h.join("cg")).error is Errors.MEMBER_ID_REQUIRED
    h.commit("cg", {("orders", 3): 4}, generation=epoch, member_id=m0, version=9)
    h.consumer_heartbeat("cg", m0, -1)
    first = join_result(h.join("cg"))
    assert first.error is Errors.MEMBER_ID_REQUIRED
    assert h.coordinator.consumer_group("cg") is None and h.committed("cg", "orders", 3) == 4


def test_retention_removes_an_empty_consumer_group_whose_offsets_expired() -> None:
    h = Harness(topics=TOPICS)
    (m0, epoch), = consumer_group(h, 1)
    h.commit("cg", {("orders", 0): 1}, generation=epoch, member_id=m0, version=9)
    h.consumer_heartbeat("cg", m0, -1)
    h.sleep(6 * 24 * 3600 * 1000)
    assert h.coordinator.consumer_group("cg") is not None  # within offsets.retention.minutes (7 days)
    h.sleep(2 * 24 * 3600 * 1000)  # the periodic cleanup expires the offset, then removes the group
    assert h.coordinator.consumer_group("cg") is None
    fresh = Harness(topics=TOPICS)
    fresh.coordinator.load_partition(fresh.coordinator.partition_for("cg"), list(h.durable), fresh.now)
    assert fresh.coordinator.consumer_group("cg") is None and fresh.committed("cg", "orders", 0) == -1


def test_unloading_the_partition_drops_the_group_and_its_timers() -> None:
    h = Harness(topics=TOPICS)
    consumer_group(h, 2)
    partition = h.coordinator.partition_for("cg")
    assert h.coordinator.unload_partition(partition, None, h.now) == 1
    assert h.coordinator.consumer_group("cg") is None
    assert h.coordinator.consumer.scheduled_timers() == {}
    not_coordinator = h.consumer_heartbeat("cg", "m0", 1).value
    assert not_coordinator.error is Errors.NOT_COORDINATOR
