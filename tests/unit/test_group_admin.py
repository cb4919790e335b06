"""DescribeGroups, ListGroups and DeleteGroups, as Kafka answers them."""
from __future__ import annotations

from coordinator_server.group.records import GroupMetadataRecord, OffsetCommitRecord
from protocol.errors import Errors
from tests.unit.group_harness import Harness, Reply


def describe(h: Harness, *group_ids: str | None, version: int = 5):  # type: ignore[no-untyped-def]
    return h.coordinator.handle_describe_groups(list(group_ids), version, h.now)


def delete(h: Harness, *group_ids: str | None) -> list:  # type: ignore[type-arg]
    reply = Reply()
    h.coordinator.handle_delete_groups(list(group_ids), h.now, reply)
    h._after_call()
    assert reply.done
    return [(d.group_id, d.error) for d in reply.value]


def test_describe_stable_group_shows_protocol_members_metadata_and_assignments() -> None:
    h = Harness()
    a, _b = h.form_group(2)
    [d] = describe(h, "g")
    assert (d.error, d.state, d.protocol_type, d.protocol_data) == (Errors.NONE, "Stable", "consumer", "range")
    members = {m.member_id: m for m in d.members}
    assert members[a.member_id].assignment == f"assignment-{a.member_id}".encode()
    assert members[a.member_id].metadata == b"range-meta"
    assert members[a.member_id].client_host == "/127.0.0.1" and members[a.member_id].client_id == "client"


def test_describe_during_a_rebalance_lists_members_with_their_last_assignment_and_no_metadata() -> None:
    # As Kafka answers (the differential suite compares it): the metadata belongs to the generation being
    # formed, the assignment is still the one each member holds.
    h = Harness()
    a, b = h.form_group(2)
    h.join(member_id=a.member_id)
    [d] = describe(h, "g")
    assert d.state == "PreparingRebalance" and d.protocol_data == ""
    assert {m.member_id for m in d.members} == {a.member_id, b.member_id}
    assert all(m.metadata == b"" and m.assignment == f"assignment-{m.member_id}".encode() for m in d.members)


def test_describe_unknown_group_is_dead_without_error_before_v6_and_group_id_not_found_from_v6() -> None:
    h = Harness()
    [d5] = describe(h, "nope", version=5)
    assert (d5.error, d5.state, d5.members) == (Errors.NONE, "Dead", ())
    [d6] = describe(h, "nope", version=6)
    assert d6.error is Errors.GROUP_ID_NOT_FOUND


def test_describe_null_group_id_is_invalid_group_id_and_empty_string_is_legal() -> None:
    h = Harness()
    null, empty = describe(h, None, "")
    assert null.error is Errors.INVALID_GROUP_ID
    assert empty.error is Errors.NONE and empty.state == "Dead"


def test_describe_empty_group_keeps_the_protocol_type_of_its_last_members() -> None:
    h = Harness()
    [a] = h.form_group(1)
    h.leave("g", (a.member_id, None))
    [d] = describe(h, "g")
    assert (d.state, d.protocol_type, d.members) == ("Empty", "consumer", ())


def test_list_groups_lists_every_group_with_state_and_type_filters() -> None:
    h = Harness()
    h.form_group(1, group="stable")
    h.commit("simple", {("t", 0): 1})
    error, groups = h.coordinator.handle_list_groups([], [], h.now)
    assert error is Errors.NONE
    assert {(g.group_id, g.protocol_type, g.state, g.group_type) for g in groups} == {
        ("stable", "consumer", "Stable", "classic"), ("simple", "", "Empty", "classic")
    }
    _, only_empty = h.coordinator.handle_list_groups([" EMPTY "], [], h.now)
    assert [g.group_id for g in only_empty] == ["simple"]
    _, classic = h.coordinator.handle_list_groups([], ["Classic"], h.now)
    assert len(classic) == 2
    _, consumer = h.coordinator.handle_list_groups([], ["consumer"], h.now)
    assert consumer == []


def test_delete_groups_refuses_non_empty_and_unknown_groups() -> None:
    h = Harness()
    h.form_group(1)
    assert delete(h, "g", "nope", None) == [
        ("g", Errors.NON_EMPTY_GROUP), ("nope", Errors.GROUP_ID_NOT_FOUND), ("", Errors.INVALID_GROUP_ID)
    ]


def test_delete_empty_group_writes_offset_and_group_tombstones_and_forgets_it() -> None:
    h = Harness()
    h.commit("simple", {("t", 0): 1, ("t", 1): 2})
    h.hold_appends()
    reply = Reply()
    h.coordinator.handle_delete_groups(["simple", "simple"], h.now, reply)
    h._after_call()
    assert not reply.done  # answered only once the tombstones are durable
    h.release_appends()
    assert [(d.group_id, d.error) for d in reply.value] == [("simple", Errors.NONE)]
    assert OffsetCommitRecord("simple", "t", 0, None) in h.durable
    assert OffsetCommitRecord("simple", "t", 1, None) in h.durable
    assert h.durable[-1] == GroupMetadataRecord("simple", None)
    assert h.coordinator.classic_group("simple") is None
    assert h.committed("simple", "t", 0) == -1
    [d] = describe(h, "simple")
    assert d.state == "Dead"
