"""Persistence and loading: a group is stored before it is answered; a loaded group comes back Stable with
fresh sessions, and unloads; requests wait at the load gate; records in Kafka's formats."""
from __future__ import annotations

import pytest

from coordinator_server.build_info import compiled
from coordinator_server.group.api import HeartbeatInput, JoinGroupInput
from coordinator_server.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.group.state import DEAD, EMPTY, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result, sync_result


def _restarted(h: Harness) -> Harness:
    """A new coordinator that replays what the first one made durable, some time later."""
    fresh = Harness(partitions=h.partitions, now=h.now + 60_000)
    p = fresh.coordinator.partition_for("g")
    fresh.coordinator.load_partition(p, list(h.durable), fresh.now)
    return fresh


def test_a_group_created_by_join_is_recorded_at_once_with_generation_zero() -> None:
    h = Harness()
    h.join()  # MEMBER_ID_REQUIRED: nothing else would be written
    [record] = h.group_records()
    assert record.value is not None
    assert (record.value.generation, record.value.protocol, record.value.members) == (0, None, ())


def test_nothing_is_written_on_prepare_rebalance_join_completion_or_leave_with_members() -> None:
    h = Harness()
    a, b = h.form_group(2)
    count = len(h.group_records())
    h.join(member_id=a.member_id)
    h.join(member_id=b.member_id)  # completes the join: generation 2, CompletingRebalance
    h.leave("g", (b.member_id, None))
    assert len(h.group_records()) == count


def test_restart_brings_a_stable_group_back_with_its_generation_leader_and_assignments() -> None:
    h = Harness()
    a, b = h.form_group(2)
    fresh = _restarted(h)
    group = fresh.group()
    assert group.state is STABLE and group.generation_id == 1
    assert group.leader_id == h.group().leader_id and group.protocol_name == "range"
    assert sync_result(fresh.sync("g", b.member_id, 1)).assignment == f"assignment-{b.member_id}".encode()
    assert fresh.heartbeat("g", a.member_id, 1) is Errors.NONE


def test_loaded_members_get_fresh_session_deadlines() -> None:
    h = Harness()
    a, b = h.form_group(2, session_ms=10_000)
    fresh = _restarted(h)  # 60 s later: older deadlines would have long passed
    fresh.sleep(9_999)
    assert fresh.group().size() == 2
    fresh.heartbeat("g", a.member_id, 1)
    fresh.sleep(1)
    assert not fresh.group().has(b.member_id)


def test_loaded_member_supports_only_the_selected_protocol_so_a_full_rejoin_rebalances() -> None:
    h = Harness()
    a, b = h.form_group(2)
    follower = a if not a.members else b
    fresh = _restarted(h)
    fresh.join(member_id=follower.member_id)  # full protocol list != the one stored
    assert fresh.group().state.value == "PreparingRebalance"


def test_group_tombstone_removes_the_group_on_load() -> None:
    h = Harness()
    h.form_group(1)
    h.durable.append(GroupMetadataRecord("g", None))
    fresh = _restarted(h)
    assert fresh.coordinator.classic_group("g") is None


def test_latest_group_record_wins_on_load() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    fresh = _restarted(h)
    group = fresh.group()
    assert group.state is EMPTY and group.generation_id == 2 and group.size() == 0


def test_offsets_without_a_group_record_load_as_an_empty_simple_group() -> None:
    h = Harness()
    value = OffsetCommitValue(42, -1, "", 1_700_000_000_000, -1)
    h.durable.append(OffsetCommitRecord("g", "t", 0, value))
    fresh = _restarted(h)
    group = fresh.group()
    assert group.state is EMPTY and group.protocol_type is None
    assert group.offsets == {("t", 0): value}


def test_static_members_are_restored_with_their_instance_ids() -> None:
    h = Harness()
    member = MemberRecord("i-1-abc", "i-1", "cli", "/127.0.0.1", 30_000, 10_000, b"sub", b"asg")
    h.durable.append(GroupMetadataRecord("g", GroupMetadataValue("consumer", 4, "range", "i-1-abc", 1, (member,))))
    fresh = _restarted(h)
    assert fresh.group().static_members == {"i-1": "i-1-abc"}
    result = join_result(fresh.join(instance="i-1"))  # restart of the static member after a failover
    assert result.error is Errors.NONE and result.generation_id == 4
    assert sync_result(fresh.sync("g", result.member_id, 4)).assignment == b"asg"


def test_gate_answers_not_coordinator_for_a_partition_not_owned() -> None:
    h = Harness()
    p = h.coordinator.partition_for("g")
    h.coordinator.owned_partitions.discard(p)
    assert join_result(h.join()).error is Errors.NOT_COORDINATOR
    assert h.heartbeat("g", "m", 1) is Errors.NOT_COORDINATOR


def test_gate_while_loading_answers_load_in_progress_and_heartbeat_none() -> None:
    h = Harness()
    h.coordinator.begin_loading(h.coordinator.partition_for("g"))
    assert join_result(h.join()).error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert sync_result(h.sync("g", "m", 1)).error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert h.heartbeat("g", "m", 1) is Errors.NONE
    assert h.leave("g", ("m", None)).error is Errors.COORDINATOR_LOAD_IN_PROGRESS


def test_shutdown_answers_parked_joins_and_syncs_with_not_coordinator() -> None:
    h = Harness()
    a, _b = h.form_group(2)
    ja = h.join(member_id=a.member_id)
    h.coordinator.shutdown(h.now)
    assert join_result(ja).error is Errors.NOT_COORDINATOR
    h2 = Harness()
    x = h2.join_new_member()
    y = h2.join_new_member()
    h2.settle()
    rx, ry = join_result(x), join_result(y)
    follower = rx if not rx.members else ry
    parked = h2.sync("g", follower.member_id, 1)
    h2.coordinator.shutdown(h2.now)
    assert sync_result(parked).error is Errors.NOT_COORDINATOR
    assert h2.heartbeat("g", follower.member_id, 1) is Errors.COORDINATOR_NOT_AVAILABLE


def test_dead_group_answers_coordinator_not_available() -> None:
    h = Harness()
    [a] = h.form_group(1)
    group = h.group()
    group.transition_to(DEAD, 0)
    assert h.heartbeat("g", a.member_id, 1) is Errors.COORDINATOR_NOT_AVAILABLE
    assert sync_result(h.sync("g", a.member_id, 1)).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert join_result(h.join(member_id=a.member_id)).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert h.leave("g", (a.member_id, None)).error is Errors.COORDINATOR_NOT_AVAILABLE


def test_core_inputs_are_plain_values() -> None:
    # The core is driven by values, not wire objects: every input type is immutable (a frozen dataclass,
    # or for the hot HeartbeatInput a class whose attributes are Final), and compares by value.
    assert JoinGroupInput.__dataclass_params__.frozen  # type: ignore[attr-defined]
    if compiled():  # Final attributes are read-only at run time once compiled; without it, mypy enforces them
        with pytest.raises(AttributeError):
            HeartbeatInput("g", 1, "m", None, 4).generation_id = 2  # type: ignore[misc]
    assert HeartbeatInput("g", 1, "m", None, 4) == HeartbeatInput("g", 1, "m", None, 4)
    assert HeartbeatInput("g", 1, "m", None, 4) != HeartbeatInput("g", 2, "m", None, 4)


# -- leadership moves (issue 12): epochs decide loads and unloads, as Kafka's coordinator runtime


def test_unload_partition_answers_parked_joins_not_coordinator_and_later_requests_too() -> None:
    h = Harness()
    p = h.coordinator.partition_for("g")
    h.coordinator.begin_loading(p, 3)
    h.coordinator.load_partition(p, [], h.now, leader_epoch=3)
    a, _b = h.form_group(2)
    parked = h.join(member_id=a.member_id)
    assert h.coordinator.unload_partition(p, 4, h.now) == 1
    assert join_result(parked).error is Errors.NOT_COORDINATOR
    assert h.coordinator.classic_group("g") is None
    assert h.heartbeat("g", a.member_id, 1) is Errors.NOT_COORDINATOR
    assert join_result(h.join()).error is Errors.NOT_COORDINATOR


def test_unload_of_another_partition_leaves_a_group_alone() -> None:
    h = Harness()
    [a] = h.form_group(1)
    other = (h.coordinator.partition_for("g") + 1) % h.partitions
    h.coordinator.unload_partition(other, None, h.now)
    assert h.heartbeat("g", a.member_id, 1) is Errors.NONE


def test_unload_and_load_for_an_epoch_not_newer_than_the_held_one_are_ignored() -> None:
    h = Harness()
    p = h.coordinator.partition_for("g")
    assert h.coordinator.begin_loading(p, 5)
    h.coordinator.load_partition(p, [], h.now, leader_epoch=5)
    [a] = h.form_group(1)
    assert h.coordinator.unload_partition(p, 5, h.now) == -1  # the epoch it leads at: not a move away
    assert h.coordinator.unload_partition(p, 4, h.now) == -1
    assert not h.coordinator.begin_loading(p, 5)
    assert h.heartbeat("g", a.member_id, 1) is Errors.NONE


def test_a_load_overtaken_by_an_unload_is_dropped() -> None:
    h = Harness()
    p = h.coordinator.partition_for("g")
    h.coordinator.unload_partition(p, None, h.now)
    h.coordinator.begin_loading(p, 2)
    h.coordinator.unload_partition(p, 3, h.now)  # leadership moved on while the log was being read
    value = OffsetCommitValue(42, -1, "", 1_700_000_000_000, -1)
    assert h.coordinator.load_partition(p, [OffsetCommitRecord("g", "t", 0, value)], h.now, leader_epoch=2) == -1
    assert h.coordinator.classic_group("g") is None
    assert join_result(h.join()).error is Errors.NOT_COORDINATOR


def test_leading_again_at_a_newer_epoch_rereads_the_partition() -> None:
    h = Harness()
    p = h.coordinator.partition_for("g")
    h.coordinator.begin_loading(p, 1)
    h.coordinator.load_partition(p, [], h.now, leader_epoch=1)
    h.form_group(1)
    durable = list(h.durable)
    assert h.coordinator.begin_loading(p, 3)  # another leader may have written at epoch 2
    assert h.coordinator.classic_group("g") is None
    assert join_result(h.join()).error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    h.coordinator.load_partition(p, durable, h.now, leader_epoch=3)
    assert h.group().state is STABLE
