"""SyncGroup rules: the leader's assignment is stored before any member is answered."""
from __future__ import annotations

from coordinator_server.group.records import GroupMetadataRecord
from coordinator_server.group.state import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE
from protocol.errors import Errors
from tests.unit.group_harness import Harness, join_result, sync_result


def _two_joined(h: Harness) -> tuple[str, str, int]:
    a = h.join_new_member()
    b = h.join_new_member()
    h.settle()
    ra, rb = join_result(a), join_result(b)
    leader = ra if ra.members else rb
    follower = rb if leader is ra else ra
    return leader.member_id, follower.member_id, leader.generation_id


def test_sync_on_unknown_group_is_unknown_member_id() -> None:
    h = Harness()
    assert sync_result(h.sync("nope", "m", 1)).error is Errors.UNKNOWN_MEMBER_ID


def test_sync_with_empty_group_id_is_invalid_group_id() -> None:
    h = Harness()
    assert sync_result(h.sync("", "m", 1)).error is Errors.INVALID_GROUP_ID


def test_sync_from_unknown_member_is_unknown_member_id() -> None:
    h = Harness()
    h.form_group(1)
    assert sync_result(h.sync("g", "stranger", 1)).error is Errors.UNKNOWN_MEMBER_ID


def test_sync_with_stale_generation_is_illegal_generation() -> None:
    h = Harness()
    [a] = h.form_group(1)
    assert sync_result(h.sync("g", a.member_id, a.generation_id + 1)).error is Errors.ILLEGAL_GENERATION


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    a, b = h.form_group(2)
    h.join(member_id=a.member_id)  # leader rejoins: PreparingRebalance
    assert h.group().state is PREPARING_REBALANCE
    assert sync_result(h.sync("g", b.member_id, 1)).error is Errors.REBALANCE_IN_PROGRESS


def test_follower_sync_parks_until_the_leader_assignment_is_durable() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    parked = h.sync("g", follower, generation)
    assert not parked.done
    h.hold_appends()
    leader_reply = h.sync("g", leader, generation, {leader: b"L", follower: b"F"})
    # The assignment is in flight to the log: nobody is answered, the group is not Stable yet.
    assert not parked.done and not leader_reply.done
    assert h.group().state is COMPLETING_REBALANCE
    h.release_appends()
    assert sync_result(parked).assignment == b"F"
    assert sync_result(leader_reply).assignment == b"L"
    assert h.group().state is STABLE


def test_leader_assignment_fills_missing_members_with_empty_and_ignores_unknown_ids() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    parked = h.sync("g", follower, generation)
    h.sync("g", leader, generation, {leader: b"L", "not-a-member": b"X"})
    assert sync_result(parked).error is Errors.NONE
    assert sync_result(parked).assignment == b""
    record = h.group_records()[-1]
    assert record.value is not None
    assert {m.member_id: m.assignment for m in record.value.members} == {leader: b"L", follower: b""}


def test_group_metadata_record_holds_generation_protocol_leader_and_every_assignment() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    h.sync("g", leader, generation, {leader: b"L", follower: b"F"})
    record = h.group_records()[-1]
    assert isinstance(record, GroupMetadataRecord) and record.value is not None
    value = record.value
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == ("consumer", generation, "range", leader)
    assert value.current_state_timestamp_ms > 1_000_000_000_000  # wall clock, not monotonic
    members = {m.member_id: m for m in value.members}
    assert members[follower].assignment == b"F" and members[follower].subscription == b"range-meta"
    assert members[follower].client_host == "/127.0.0.1" and members[follower].session_timeout_ms == 10_000


def test_sync_in_stable_returns_the_stored_assignment_at_once() -> None:
    h = Harness()
    _a, b = h.form_group(2)
    reply = h.sync("g", b.member_id, b.generation_id)
    assert sync_result(reply).error is Errors.NONE
    assert sync_result(reply).assignment == f"assignment-{b.member_id}".encode()
    assert sync_result(reply).protocol_type == "consumer" and sync_result(reply).protocol_name == "range"


def test_sync_v5_protocol_type_or_name_mismatch_is_inconsistent_group_protocol() -> None:
    h = Harness()
    [a] = h.form_group(1)
    assert sync_result(h.sync("g", a.member_id, 1, protocol_type="connect")).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    assert sync_result(h.sync("g", a.member_id, 1, protocol_name="roundrobin")).error is Errors.INCONSISTENT_GROUP_PROTOCOL
    ok = h.sync("g", a.member_id, 1, protocol_type="consumer", protocol_name="range")
    assert sync_result(ok).error is Errors.NONE


def test_failed_assignment_write_answers_mapped_error_and_rebalances() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    parked = h.sync("g", follower, generation)
    h.fail_appends(Errors.KAFKA_STORAGE_ERROR)
    leader_reply = h.sync("g", leader, generation, {leader: b"L", follower: b"F"})
    # A storage error tells the client to find the coordinator again (NOT_COORDINATOR), as Kafka does.
    assert sync_result(parked).error is Errors.NOT_COORDINATOR
    assert sync_result(leader_reply).error is Errors.NOT_COORDINATOR
    assert sync_result(parked).assignment == b""
    assert h.group().state is PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.group().members.values())


def test_write_completing_after_the_group_moved_on_changes_nothing() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    h.hold_appends()
    leader_reply = h.sync("g", leader, generation, {leader: b"L", follower: b"F"})
    # The follower changes its subscription while the write is in flight: a new rebalance starts.
    h.join(member_id=follower, protocols=(("range", b"changed"),))
    assert sync_result(leader_reply).error is Errors.REBALANCE_IN_PROGRESS
    h.release_appends()
    assert h.group().state is PREPARING_REBALANCE
    assert h.group().generation_id == generation


def test_members_that_do_not_sync_within_the_rebalance_timeout_are_removed() -> None:
    h = Harness()
    a = h.join_new_member(rebalance_ms=20_000, session_ms=60_000)
    b = h.join_new_member(rebalance_ms=20_000, session_ms=60_000)
    h.settle()
    ra, rb = join_result(a), join_result(b)
    leader = ra if ra.members else rb
    follower = rb if leader is ra else ra
    h.sync("g", leader.member_id, leader.generation_id, {leader.member_id: b"L", follower.member_id: b"F"})
    assert h.group().state is STABLE
    h.heartbeat("g", follower.member_id, 1)  # heartbeats do not count as a sync
    h.sleep(19_999)
    assert h.group().has(follower.member_id)
    h.sleep(1)
    assert not h.group().has(follower.member_id)
    assert h.group().state is PREPARING_REBALANCE


def test_pending_sync_timer_does_nothing_once_everyone_synced() -> None:
    h = Harness()
    _a, _b = h.form_group(2, rebalance_ms=20_000, session_ms=60_000)
    h.sleep(20_000)
    assert h.group().state is STABLE and h.group().size() == 2


def test_duplicate_parked_sync_answers_the_first_one() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    first = h.sync("g", follower, generation)
    second = h.sync("g", follower, generation)
    assert sync_result(first).error is Errors.REBALANCE_IN_PROGRESS
    h.sync("g", leader, generation, {follower: b"F"})
    assert sync_result(second).assignment == b"F"


def test_assignment_record_too_large_answers_unknown_server_error_as_kafka_maps_message_too_large() -> None:
    h = Harness()
    leader, follower, generation = _two_joined(h)
    parked = h.sync("g", follower, generation)
    h.fail_appends(Errors.MESSAGE_TOO_LARGE)
    h.sync("g", leader, generation, {leader: b"L", follower: b"F"})
    assert sync_result(parked).error is Errors.UNKNOWN_SERVER_ERROR
