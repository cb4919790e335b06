"""The one load replay (group/loader.py): a partition's classic and consumer group records, in one pass, into
the one group table — the latest record per key wins, tombstones remove, a consumer group owns its id's
offsets, a stale classic record beside live consumer records is ignored with a warning, and offsets with
no group record make an Empty simple classic group. Then through the façade: load, look up by type, list,
describe and unload groups of both types from the one table."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from structlog.testing import capture_logs

from coordinator_server.group.consumer import admin as consumer_admin
from coordinator_server.group.consumer.group import ConsumerGroup, ConsumerGroupState
from coordinator_server.group.consumer.member import MemberState
from coordinator_server.group.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    CurrentAssignmentValue,
    MemberMetadataValue,
)
from coordinator_server.group.group import GroupMetadata
from coordinator_server.group.loader import GroupLoader
from coordinator_server.group.records import (
    CoordinatorRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.group.state import EMPTY, STABLE
from coordinator_server.group.table import Group
from protocol.errors import Errors
from tests.unit.group_harness import Harness

WALL_MS = 1_700_000_000_000


def classic(group_id: str, *members: str, protocol_type: str = "consumer") -> GroupMetadataRecord:
    records = tuple(MemberRecord(m, None, "client", "/10.0.0.1", 30_000, 10_000, b"sub", b"assigned") for m in members)
    return GroupMetadataRecord(group_id, GroupMetadataValue(protocol_type, 3, "range", members[0] if members else None,
                                                            WALL_MS - 1_000, records))


def offset(group_id: str, partition: int, value: int | None) -> OffsetCommitRecord:
    return OffsetCommitRecord(group_id, "orders", partition,
                              None if value is None else OffsetCommitValue(value, -1, "", WALL_MS - 500, -1))


def consumer(group_id: str, *members: str, epoch: int = 1) -> list[ConsumerGroupRecord]:
    """A settled consumer group at `epoch`: each member reconciled to an empty target."""
    records: list[ConsumerGroupRecord] = []
    for m in members:
        records.append(ConsumerGroupMemberMetadataRecord(group_id, m, MemberMetadataValue(
            None, None, "client", "/10.0.0.2", ("orders",), None, 45_000, None)))
    records.append(ConsumerGroupMetadataRecord(group_id, epoch))
    for m in members:
        records.append(ConsumerGroupTargetAssignmentMemberRecord(group_id, m, {}))
    records.append(ConsumerGroupTargetAssignmentMetadataRecord(group_id, epoch))
    for m in members:
        records.append(ConsumerGroupCurrentMemberAssignmentRecord(
            group_id, m, CurrentAssignmentValue(epoch, epoch - 1, int(MemberState.STABLE), {}, {})))
    return records


def consumer_tombstones(records: list[ConsumerGroupRecord]) -> list[ConsumerGroupRecord]:
    """The records that delete the group those records build, as DeleteGroups or a downgrade writes them."""
    group = ConsumerGroup(records[0].group_id)
    group.apply_all(records)
    return consumer_admin.group_tombstones(group)


def build(records: list[CoordinatorRecord]) -> dict[str, Group]:
    loader = GroupLoader()
    for record in records:
        loader.apply(record)
    return loader.build(WALL_MS)


def ignored_warnings(logs: Sequence[Mapping[str, Any]]) -> list[object]:
    return [e["group_id"] for e in logs if e["event"] == "classic_group_record_ignored"]


# -- the replay --------------------------------------------------------------------------------------------

def test_one_pass_builds_groups_of_both_types_each_with_its_offsets() -> None:
    records: list[CoordinatorRecord] = [
        classic("a", "a-1", "a-2"), offset("c", 0, 7), *consumer("c", "c-1"), offset("a", 0, 5),
        offset("s", 1, 9), offset("a", 1, 6),
    ]
    groups = build(records)
    # Consumer groups first, then classic groups, then simple groups: the order the façade loads them in.
    assert list(groups) == ["c", "a", "s"]
    a, c, s = groups["a"], groups["c"], groups["s"]
    assert isinstance(a, GroupMetadata) and isinstance(c, ConsumerGroup) and isinstance(s, GroupMetadata)
    assert a.state is STABLE and set(a.members) == {"a-1", "a-2"} and a.generation_id == 3
    assert {k: v.offset for k, v in a.offsets.items()} == {("orders", 0): 5, ("orders", 1): 6}
    assert set(c.members) == {"c-1"} and c.group_epoch == 1 and c.state is ConsumerGroupState.STABLE
    assert {k: v.offset for k, v in c.offsets.items()} == {("orders", 0): 7}
    # Offsets with no group record: an Empty simple group, no protocol type.
    assert s.state is EMPTY and s.protocol_type is None and not s.members
    assert {k: v.offset for k, v in s.offsets.items()} == {("orders", 1): 9}


def test_the_latest_record_per_key_wins_and_tombstones_remove() -> None:
    records: list[CoordinatorRecord] = [
        classic("a", "a-1"), classic("a", "a-2"),  # a later group record replaces the earlier one
        offset("a", 0, 1), offset("a", 0, 2), offset("a", 1, 3), offset("a", 1, None),
        classic("gone", "g-1"), offset("gone", 0, 4), offset("gone", 0, None), GroupMetadataRecord("gone", None),
        *consumer("deleted", "d-1"), offset("deleted", 0, 5), offset("deleted", 0, None),
    ]
    records += consumer_tombstones([r for r in records if isinstance(r, ConsumerGroupRecord)])
    groups = build(records)
    assert list(groups) == ["a"]
    a = groups["a"]
    assert isinstance(a, GroupMetadata) and set(a.members) == {"a-2"}
    assert {k: v.offset for k, v in a.offsets.items()} == {("orders", 0): 2}


def test_a_group_upgraded_to_the_consumer_protocol_loads_as_a_consumer_group_with_its_offsets() -> None:
    # The upgrade writes the classic group's tombstone, then the consumer group's records.
    records: list[CoordinatorRecord] = [
        classic("g", "m-1"), offset("g", 0, 11), GroupMetadataRecord("g", None), *consumer("g", "m-1"),
    ]
    with capture_logs() as logs:
        groups = build(records)
    g = groups["g"]
    assert list(groups) == ["g"] and isinstance(g, ConsumerGroup) and set(g.members) == {"m-1"}
    assert {k: v.offset for k, v in g.offsets.items()} == {("orders", 0): 11}
    assert ignored_warnings(logs) == []


def test_a_group_downgraded_to_the_classic_protocol_loads_as_a_classic_group_with_its_offsets() -> None:
    # The downgrade writes the consumer group's tombstones, then the classic group's record.
    live = consumer("g", "m-1", "m-2", epoch=4)
    records: list[CoordinatorRecord] = [*live, offset("g", 2, 21), *consumer_tombstones(live), classic("g", "m-1")]
    groups = build(records)
    g = groups["g"]
    assert list(groups) == ["g"] and isinstance(g, GroupMetadata)
    assert g.state is STABLE and set(g.members) == {"m-1"}
    assert {k: v.offset for k, v in g.offsets.items()} == {("orders", 2): 21}


def test_a_stale_classic_record_beside_live_consumer_records_is_ignored_with_a_warning() -> None:
    records: list[CoordinatorRecord] = [
        classic("before", "x"), *consumer("before", "c-1"),  # the conversion's classic tombstone was lost
        *consumer("after", "c-2"), classic("after", "y"),  # whichever comes first in the log
        *consumer("plain", "c-3"), classic("plain", protocol_type=""),  # no members, no protocol: no warning
        offset("before", 0, 1),
    ]
    with capture_logs() as logs:
        groups = build(records)
    assert all(isinstance(g, ConsumerGroup) for g in groups.values())
    assert list(groups) == ["before", "after", "plain"]
    assert ignored_warnings(logs) == ["before", "after"]
    assert {k: v.offset for k, v in groups["before"].offsets.items()} == {("orders", 0): 1}


# -- through the façade: the one table -----------------------------------------------------------------------

def load(h: Harness, records: list[CoordinatorRecord]) -> int:
    partitions = {h.coordinator.partition_for(r.group_id) for r in records}
    return sum(h.coordinator.load_partition(p, [r for r in records if h.coordinator.partition_for(r.group_id) == p],
                                            h.now) for p in sorted(partitions))


def test_load_puts_groups_of_both_types_in_the_one_table_and_lookups_answer_by_type() -> None:
    h = Harness()
    loaded = load(h, [classic("a", "a-1"), *consumer("c", "c-1"), offset("s", 0, 3), offset("c", 0, 4)])
    assert loaded == 3
    table = h.coordinator.groups
    assert {g: type(group) for g, group in table.items()} == {"a": GroupMetadata, "c": ConsumerGroup,
                                                              "s": GroupMetadata}
    assert h.coordinator.consumer.groups is table  # the consumer manager has no table of its own
    assert h.coordinator.classic_group("a") is table["a"] and h.coordinator.consumer_group("a") is None
    assert h.coordinator.consumer_group("c") is table["c"] and h.coordinator.classic_group("c") is None
    assert h.coordinator.classic_group("nope") is None and h.coordinator.consumer_group("nope") is None
    error, listed = h.coordinator.handle_list_groups([], [], h.now)
    assert error is Errors.NONE
    assert sorted((g.group_id, g.group_type, g.state) for g in listed) == [
        ("a", "classic", "Stable"), ("c", "consumer", "Stable"), ("s", "classic", "Empty")]
    _, consumers = h.coordinator.handle_list_groups([], ["consumer"], h.now)
    assert [g.group_id for g in consumers] == ["c"]
    described = {d.group_id: d for d in h.coordinator.handle_describe_groups(["a", "c"], 6, h.now)}
    assert described["a"].error is Errors.NONE and described["a"].state == "Stable"
    assert described["c"].error is Errors.GROUP_ID_NOT_FOUND
    assert described["c"].error_message == "Group c is not a classic group."
    assert h.committed("c", "orders", 0) == 4


def test_unload_partition_removes_groups_of_both_types_from_the_one_table() -> None:
    h = Harness()
    records: list[CoordinatorRecord] = [classic("a", "a-1"), *consumer("c", "c-1")]
    load(h, records)
    unloaded = sum(h.coordinator.unload_partition(p, None, h.now)
                   for p in {h.coordinator.partition_for("a"), h.coordinator.partition_for("c")})
    assert unloaded == 2 and h.coordinator.groups == {}
    assert h.coordinator.consumer.scheduled_timers() == {}
