"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and retention."""
from __future__ import annotations

from coordinator_server.group.records import GroupMetadataRecord, OffsetCommitRecord
from coordinator_server.group.state import EMPTY
from protocol.errors import Errors
from tests.unit.group_harness import Harness, Reply

DAY_MS = 24 * 60 * 60 * 1000


def errors(reply: Reply) -> list[Errors]:
    assert reply.done, "OffsetCommit not answered"
    return [p.error for p in reply.value.partitions]


def test_simple_consumer_commit_creates_an_empty_group_without_protocol_type() -> None:
    h = Harness()
    assert errors(h.commit("simple", {("t", 0): 5, ("t", 1): 7})) == [Errors.NONE, Errors.NONE]
    group = h.group("simple")
    assert group.state is EMPTY and group.protocol_type is None
    assert h.committed("simple", "t", 1) == 7


def test_commit_is_answered_only_once_durable_and_visible_only_then() -> None:
    h = Harness()
    h.hold_appends()
    reply = h.commit("g", {("t", 0): 5})
    assert not reply.done
    assert h.committed("g", "t", 0) == -1
    h.release_appends()
    assert errors(reply) == [Errors.NONE]
    assert h.committed("g", "t", 0) == 5
    record = [r for r in h.durable if isinstance(r, OffsetCommitRecord)][-1]
    assert (record.topic, record.partition, record.value.offset) == ("t", 0, 5)  # type: ignore[union-attr]


def test_v1_commit_timestamp_is_kept_and_minus_one_means_now() -> None:
    """OffsetCommit v1 (Sarama's default) names each partition's commit time; Kafka's
    OffsetAndMetadata.fromRequest keeps it, and -1 (DEFAULT_TIMESTAMP) means the time of the commit."""
    h = Harness()
    assert errors(h.commit("g", {("t", 0): 5}, version=1, commit_timestamp_ms=1_234)) == [Errors.NONE]
    assert errors(h.commit("g", {("t", 1): 6}, version=1)) == [Errors.NONE]
    values = {(r.topic, r.partition): r.value for r in h.durable if isinstance(r, OffsetCommitRecord)}
    assert values[("t", 0)].commit_timestamp_ms == 1_234  # type: ignore[union-attr]
    assert values[("t", 1)].commit_timestamp_ms == h.coordinator.wall_ms  # type: ignore[union-attr]


def test_empty_string_group_id_is_legal_for_commit_and_fetch_but_not_null() -> None:
    h = Harness()
    assert errors(h.commit("", {("t", 0): 1})) == [Errors.NONE]
    assert h.committed("", "t", 0) == 1
    reply = Reply()
    from coordinator_server.group.api import OffsetCommitInput

    h.coordinator.handle_offset_commit(OffsetCommitInput(None, -1, "", None, -1, (), 8), h.now, reply)
    assert reply.value.partitions == []


def test_member_commit_with_generation_on_unknown_group_is_illegal_generation_or_group_id_not_found_v9() -> None:
    h = Harness()
    assert errors(h.commit("nope", {("t", 0): 1}, generation=1, member_id="m", version=8)) == [Errors.ILLEGAL_GENERATION]
    assert errors(h.commit("nope", {("t", 0): 1}, generation=1, member_id="m", version=9)) == [Errors.GROUP_ID_NOT_FOUND]


def test_simple_commit_into_a_group_with_members_is_unknown_member_id() -> None:
    h = Harness()
    h.form_group(1)
    assert errors(h.commit("g", {("t", 0): 1})) == [Errors.UNKNOWN_MEMBER_ID]


def test_generation_minus_one_on_an_empty_group_skips_member_checks() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    assert errors(h.commit("g", {("t", 0): 3}, member_id="whoever", instance="any")) == [Errors.NONE]


def test_member_commit_checks_member_then_generation() -> None:
    h = Harness()
    [a] = h.form_group(1)
    assert errors(h.commit("g", {("t", 0): 1}, generation=1, member_id="stranger")) == [Errors.UNKNOWN_MEMBER_ID]
    assert errors(h.commit("g", {("t", 0): 1}, generation=9, member_id=a.member_id)) == [Errors.ILLEGAL_GENERATION]
    assert errors(h.commit("g", {("t", 0): 1}, generation=1, member_id=a.member_id)) == [Errors.NONE]


def test_static_member_commit_with_wrong_member_id_is_fenced() -> None:
    h = Harness()
    reply = h.join(instance="i-1")
    h.settle()
    member_id = reply.value.member_id
    h.sync("g", member_id, 1, {member_id: b""})
    assert errors(h.commit("g", {("t", 0): 1}, 1, "other", instance="i-1")) == [Errors.FENCED_INSTANCE_ID]
    assert errors(h.commit("g", {("t", 0): 1}, 1, member_id, instance="i-1")) == [Errors.NONE]


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    reply = h.join_new_member()
    h.settle()
    assert errors(h.commit("g", {("t", 0): 1}, 1, reply.value.member_id)) == [Errors.REBALANCE_IN_PROGRESS]


def test_commit_during_preparing_rebalance_is_stored_with_the_old_generation_and_counts_as_heartbeat() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000, rebalance_ms=60_000)
    h.join(member_id=a.member_id, session_ms=10_000, rebalance_ms=60_000)  # PreparingRebalance
    for i in range(3):
        h.sleep(5_000)
        assert errors(h.commit("g", {("t", 0): i}, 1, b.member_id)) == [Errors.NONE]
    assert h.group().has(b.member_id)  # 15 s with no heartbeat: the commits kept it alive
    assert h.committed("g", "t", 0) == 2


def test_metadata_over_the_limit_is_offset_metadata_too_large_for_that_partition_only() -> None:
    h = Harness()
    reply = Reply()
    from coordinator_server.group.api import CommitPartition, OffsetCommitInput

    parts = (CommitPartition("t", 0, 1, -1, "x" * 4097), CommitPartition("t", 1, 2, -1, "x" * 4096))
    h.coordinator.handle_offset_commit(OffsetCommitInput("g", -1, "", None, -1, parts, 8), h.now, reply)
    h._after_call()
    assert errors(reply) == [Errors.OFFSET_METADATA_TOO_LARGE, Errors.NONE]
    assert h.committed("g", "t", 0) == -1 and h.committed("g", "t", 1) == 2


def test_null_metadata_is_stored_as_empty_string() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1}, metadata=None)
    [fetched] = h.fetch("g", [("t", 0)]).offsets
    assert fetched.metadata == ""


def test_failed_commit_write_answers_not_coordinator_and_stores_nothing() -> None:
    h = Harness()
    h.fail_appends(Errors.KAFKA_STORAGE_ERROR)
    assert errors(h.commit("g", {("t", 0): 1})) == [Errors.NOT_COORDINATOR]
    assert h.committed("g", "t", 0) == -1


def test_fetch_of_unknown_group_or_partition_answers_minus_one_without_error() -> None:
    h = Harness()
    result = h.fetch("nope", [("t", 0)])
    assert result.error is Errors.NONE
    assert [(o.offset, o.leader_epoch, o.metadata, o.error) for o in result.offsets] == [(-1, -1, "", Errors.NONE)]
    assert h.fetch("nope").offsets == []


def test_fetch_all_returns_every_committed_offset() -> None:
    h = Harness()
    h.commit("g", {("a", 0): 1, ("b", 2): 3})
    assert [(o.topic, o.partition, o.offset) for o in h.fetch("g").offsets] == [("a", 0, 1), ("b", 2, 3)]


def test_fetch_does_not_depend_on_group_state() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 4})
    [a] = h.form_group(1)
    h.join(member_id=a.member_id)
    assert h.committed("g", "t", 0) == 4


def test_restart_restores_committed_offsets() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 11})
    fresh = Harness(now=h.now + 1000)
    fresh.coordinator.load_partition(fresh.coordinator.partition_for("g"), list(h.durable), fresh.now)
    assert fresh.committed("g", "t", 0) == 11


def test_offset_delete_on_empty_group_deletes_every_requested_partition_with_tombstones() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1, ("t", 1): 2})
    reply = h.delete_offsets("g", ("t", 0), ("u", 9))
    assert reply.value.error is Errors.NONE
    assert [p.error for p in reply.value.partitions] == [Errors.NONE, Errors.NONE]
    assert h.committed("g", "t", 0) == -1 and h.committed("g", "t", 1) == 2
    assert OffsetCommitRecord("g", "t", 0, None) in h.durable


def test_offset_delete_errors_group_level() -> None:
    h = Harness()
    assert h.delete_offsets("").value.error is Errors.INVALID_GROUP_ID
    assert h.delete_offsets("nope", ("t", 0)).value.error is Errors.GROUP_ID_NOT_FOUND
    h.join_new_member(group="conn", protocol_type="connect")
    h.settle("conn")
    assert h.delete_offsets("conn", ("t", 0)).value.error is Errors.NON_EMPTY_GROUP


def test_offset_delete_refuses_subscribed_topics_of_an_active_consumer_group() -> None:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    sub = ConsumerProtocolSubscription(version=0, topics=["orders"], user_data=None).encode()
    h = Harness()
    h.commit("g", {("orders", 0): 1, ("old", 0): 2})
    h.form_group(1, protocols=(("range", sub),))
    reply = h.delete_offsets("g", ("orders", 0), ("old", 0))
    assert [p.error for p in reply.value.partitions] == [Errors.GROUP_SUBSCRIBED_TO_TOPIC, Errors.NONE]
    assert h.committed("g", "orders", 0) == 1 and h.committed("g", "old", 0) == -1


def test_offsets_of_an_empty_group_expire_after_retention_and_the_group_is_removed() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.commit("g", {("t", 0): 1}, 1, a.member_id)
    h.leave("g", (a.member_id, None))
    h.sleep(7 * DAY_MS - 600_000)
    assert h.committed("g", "t", 0) == 1
    h.sleep(1_200_000)  # the next cleanup run after 7 days
    assert h.coordinator.classic_group("g") is None
    assert OffsetCommitRecord("g", "t", 0, None) in h.durable
    assert GroupMetadataRecord("g", None) in h.durable


def test_offsets_of_a_stable_consumer_group_expire_only_for_unsubscribed_topics() -> None:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    sub = ConsumerProtocolSubscription(version=0, topics=["orders"], user_data=None).encode()
    h = Harness()
    [a] = h.form_group(1, protocols=(("range", sub),), session_ms=1_800_000)
    h.commit("g", {("orders", 0): 1, ("old", 0): 2}, 1, a.member_id)
    for _ in range(8 * 24 * 3):  # eight days, heartbeating every 20 minutes
        h.sleep(1_200_000)
        assert h.heartbeat("g", a.member_id, 1) is Errors.NONE
    assert h.committed("g", "orders", 0) == 1
    assert h.committed("g", "old", 0) == -1


def test_explicit_retention_time_v2_to_v4_sets_an_expire_timestamp() -> None:
    h = Harness()
    h.commit("simple", {("t", 0): 1}, retention_ms=60_000, version=2)
    record = [r for r in h.durable if isinstance(r, OffsetCommitRecord)][-1]
    assert record.value is not None
    assert record.value.expire_timestamp_ms == record.value.commit_timestamp_ms + 60_000
    h.sleep(600_000)  # first cleanup run: past the explicit expiry
    assert h.committed("simple", "t", 0) == -1


def test_empty_group_without_offsets_is_removed_at_the_next_cleanup() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    h.sleep(600_000)
    assert h.coordinator.classic_group("g") is None
    assert h.group_records()[-1].value is None


def test_commit_whose_record_is_too_large_answers_invalid_commit_offset_size() -> None:
    h = Harness()
    h.fail_appends(Errors.MESSAGE_TOO_LARGE)
    assert errors(h.commit("g", {("t", 0): 1})) == [Errors.INVALID_COMMIT_OFFSET_SIZE]
    assert h.committed("g", "t", 0) == -1
