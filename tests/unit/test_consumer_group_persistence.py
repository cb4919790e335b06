"""KIP-848 records on disk: what a consumer group wrote, replayed from the segment files (the start-up
fast path) — before and after compaction has kept only the newest record per key and dropped the
tombstones — loads to the same groups as the live coordinator holds."""
from __future__ import annotations

from pathlib import Path

from coordinator_server.group.consumer.group import ConsumerGroup
from coordinator_server.storage import PartitionLog, encode_record
from coordinator_server.storage.compaction import clean, snapshot, swap_in
from coordinator_server.storage.replay import LatestRecords
from protocol.errors import Errors
from tests.unit.group_harness import Harness
from tests.unit.test_consumer_group_facade import consumer_group

NOW_MS = 1_800_000_000_000


def same(a: ConsumerGroup | None, b: ConsumerGroup | None) -> None:
    assert a is not None and b is not None
    assert a.members == b.members
    assert (a.group_epoch, a.assignment_epoch, a.state) == (b.group_epoch, b.assignment_epoch, b.state)
    assert a.target_assignment == b.target_assignment
    assert a.partition_owners == b.partition_owners
    assert a.subscription_metadata == b.subscription_metadata
    assert a.offsets == b.offsets


def busy_group() -> Harness:
    """Members join, commit, one leaves, one restarts as a static member, one more joins: many records,
    most of them superseded."""
    h = Harness(topics={"orders": 6, "payments": 2})
    (m0, e0), (m1, _e1) = consumer_group(h, 2)
    h.commit("cg", {("orders", 0): 10}, generation=e0, member_id=m0, version=9)
    for member_id, epoch, instance in ((m1, -1, None), ("s-1", 0, "static"), ("s-1", -2, "static"),
                                       ("s-2", 0, "static")):
        assert h.consumer_heartbeat("cg", member_id, epoch, instance_id=instance).value.error is Errors.NONE
    consumer_group(h, 1)
    group = h.coordinator.consumer_group("cg")
    assert group is not None and set(group.members) == {"m0", "s-2"} and group.offsets
    return h


def write(h: Harness, path: Path) -> int:
    partition = h.coordinator.partition_for("cg")
    plog = PartitionLog.open(path, partition, 600)
    for record in h.durable:
        plog.append([encode_record(record)], NOW_MS - 10 * 86_400_000)
    plog.sync()
    plog.close()
    return partition


def loaded(path: Path, partition: int) -> Harness:
    """What start-up loads (CoordinatorLog.replay_latest): the newest value per key, decoded once."""
    plog = PartitionLog.open(path, partition, 600)
    latest = LatestRecords(partition)
    latest.add_batches(plog.checked_batches())
    plog.close()
    fresh = Harness(topics={"orders": 6, "payments": 2})
    fresh.coordinator.load_partition(partition, list(latest.records()), fresh.now)
    return fresh


def test_replayed_segments_load_the_same_group(tmp_path: Path) -> None:
    h = busy_group()
    partition = write(h, tmp_path)
    same(loaded(tmp_path, partition).coordinator.consumer_group("cg"), h.coordinator.consumer_group("cg"))


def test_compaction_keeps_the_group_the_same(tmp_path: Path) -> None:
    h = busy_group()
    partition = write(h, tmp_path)
    plog = PartitionLog.open(tmp_path, partition, 600)
    snap = snapshot(plog)
    assert snap is not None
    result = clean(snap, NOW_MS, 86_400_000, plog.segment_bytes)  # tombstones older than a day go too
    assert result.bytes_after < result.bytes_before
    swap_in(plog, result)
    plog.close()
    same(loaded(tmp_path, partition).coordinator.consumer_group("cg"), h.coordinator.consumer_group("cg"))
