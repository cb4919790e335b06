"""`pipeline.explain` on hand-built records and log lines: no Spark, no server. The real histories are in
test_explain.py; these pin the matching rules (generation and time windows, incarnations, in-place
replacements, what the segments alone can say)."""
from __future__ import annotations

from typing import Any

from pipeline.explain import GroupRecord, Member, ServerEvent, explain, format_table, waited_for

T0 = 1_800_000_000_000
A = Member("a-1", None, "app-a", ("orders",))
B = Member("b-1", None, "app-b", ("orders",))
C = Member("c-1", None, "app-c", ("orders",))


def rec(offset: int, ts: int, generation: int, *members: Member, state_ts: int | None = None,
        tombstone: bool = False) -> GroupRecord:
    return GroupRecord("node-0", "g", 0, offset, T0 + ts, tombstone, None if tombstone else generation,
                       "range" if members else None, members[0].member_id if members else None,
                       None if tombstone else T0 + (ts if state_ts is None else state_ts), members)


def ev(event: str, ts: int, generation: int, **fields: Any) -> ServerEvent:
    return ServerEvent("g", event, T0 + ts, generation, fields)


def history() -> list[GroupRecord]:
    return [rec(0, 0, 0), rec(1, 100, 1, A, B, state_ts=90), rec(2, 5200, 2, A, B, C, state_ts=5150),
            rec(3, 9000, 3, A, C, state_ts=8950)]


def log() -> list[ServerEvent]:
    return [
        ev("preparing_rebalance", 5000, 1, trigger="member_joined", member_id="c-1", client_id="app-c"),
        ev("join_completed", 5150, 2, trigger="member_joined", join_ms=150, ended_by="all_joined",
           last_joined_member_id="b-1", last_joined_client_id="app-b", last_joined_after_ms=150, not_rejoined=[]),
        ev("group_stable", 5201, 2, rebalance_ms=201, sync_ms=51),
        ev("member_removed", 6000, 2, member_id="b-1", client_id="app-b", cause="session_expiry"),
        ev("preparing_rebalance", 6000, 2, trigger="session_expired", member_id="b-1", client_id="app-b"),
        ev("join_completed", 8950, 3, join_ms=2950, ended_by="all_joined", last_joined_member_id="a-1",
           last_joined_client_id="app-a", last_joined_after_ms=2950, not_rejoined=[]),
        ev("group_stable", 9001, 3, rebalance_ms=3001, sync_ms=51),
    ]


def test_the_segments_alone_give_times_and_membership_but_no_cause() -> None:
    gens = explain(history(), [])
    assert [g.generation for g in gens] == [0, 1, 2, 3]
    assert gens[0].trigger == "group_created" and not gens[0].rebalanced
    third = gens[2]
    assert third.trigger is None and third.cause_source == "log segments"
    assert [c.member_id for c in third.joined] == ["c-1"] and third.left == []
    assert third.join_completed_ms == T0 + 5150 and third.assigned_ms == T0 + 5200 and third.sync_ms == 50
    assert third.rebalance_start_ms is None and third.not_consuming_ms is None
    fourth = gens[3]
    assert [(c.member_id, c.cause) for c in fourth.left] == [("b-1", None)]
    assert "unknown (no server log)" in format_table(gens)


def test_the_server_log_names_the_trigger_the_member_and_who_made_it_wait() -> None:
    gens = explain(history(), log())
    joined, expired = gens[2], gens[3]
    assert (joined.trigger, joined.trigger_member_id, joined.trigger_client_id) == ("member_joined", "c-1", "app-c")
    assert joined.join_ms == 150 and joined.last_joined_member_id == "b-1" and joined.not_consuming_ms == 201
    assert joined.rebalance_start_ms == T0 + 5000 and joined.cause_source == "server log"
    assert (expired.trigger, expired.trigger_member_id) == ("session_expired", "b-1")
    assert [(c.member_id, c.cause) for c in expired.left] == [("b-1", "session_expiry")]
    assert waited_for(expired) == "app-a (a-1) at +2950 ms"


def test_members_that_never_rejoined_are_who_the_phase_waited_for() -> None:
    events = [ev("preparing_rebalance", 5000, 1, trigger="member_joined", member_id="c-1", client_id="app-c"),
              ev("member_removed", 8000, 1, member_id="b-1", client_id="app-b", cause="rebalance_timeout"),
              ev("join_completed", 8000, 2, join_ms=3000, ended_by="rebalance_timeout", not_rejoined=["b-1"],
                 last_joined_member_id="a-1", last_joined_client_id="app-a", last_joined_after_ms=10)]
    records = [rec(1, 100, 1, A, B), rec(2, 8050, 2, A, C, state_ts=8000)]
    [_, gen] = explain(records, events)
    assert gen.ended_by == "rebalance_timeout" and gen.join_ms == 3000
    assert [(c.member_id, c.client_id, c.cause) for c in gen.not_rejoined] == [("b-1", "app-b", "rebalance_timeout")]
    assert waited_for(gen) == "app-b (b-1) (never rejoined)"


def test_a_static_member_replaced_in_place_is_a_row_without_a_rebalance() -> None:
    s1, s2 = Member("s-1", "inst", "app-s"), Member("s-2", "inst", "app-s2")
    records = [rec(1, 100, 1, A, s1), rec(2, 4000, 1, A, s2)]
    events = [ev("static_member_replaced", 3990, 1, member_id="s-2", old_member_id="s-1", old_client_id="app-s",
                 group_instance_id="inst", client_id="app-s2", state="Stable")]
    gens = explain(records, events)
    assert [(g.generation, g.rebalanced) for g in gens] == [(1, True), (1, False)]
    swap = gens[1]
    assert (swap.trigger, swap.trigger_member_id, swap.trigger_instance_id) == ("static_member_replaced", "s-2", "inst")
    assert swap.cause_source == "server log" and swap.not_consuming_ms == 0
    assert [(c.old_member_id, c.member_id) for c in swap.replaced] == [("s-1", "s-2")]


def test_a_deleted_and_recreated_group_takes_the_lines_of_its_own_incarnation() -> None:
    records = [rec(1, 100, 1, A), rec(2, 200, 2), rec(3, 300, 0, tombstone=True),
               rec(4, 50_000, 0), rec(5, 50_100, 1, B, state_ts=50_090)]
    events = [ev("preparing_rebalance", 90, 0, trigger="member_joined", member_id="a-1", client_id="app-a"),
              ev("preparing_rebalance", 190, 1, trigger="member_left", member_id="a-1", client_id="app-a"),
              ev("group_empty", 190, 2, trigger="member_left", join_ms=0, ended_by="all_joined", not_rejoined=[]),
              ev("preparing_rebalance", 50_010, 0, trigger="member_joined", member_id="b-1", client_id="app-b"),
              ev("join_completed", 50_090, 1, join_ms=80, ended_by="initial_rebalance_delay", not_rejoined=[],
                 last_joined_member_id="b-1", last_joined_client_id="app-b", last_joined_after_ms=0)]
    gens = explain(records, events)
    assert [(g.generation, g.trigger, g.trigger_member_id) for g in gens] == [
        (1, "member_joined", "a-1"), (2, "member_left", "a-1"), (0, "group_created", None),
        (1, "member_joined", "b-1")]
    assert gens[1].member_count == 0 and [c.member_id for c in gens[1].left] == ["a-1"]
    assert gens[3].joined[0].member_id == "b-1" and gens[3].join_ms == 80


def test_a_rebalance_started_in_another_incarnation_is_not_taken() -> None:
    # The previous generation's join bounds the window: an older line naming the same generation is ignored.
    records = [rec(1, 10_000, 1, A, state_ts=9_990), rec(2, 20_000, 2, A, B, state_ts=19_990)]
    events = [ev("preparing_rebalance", 500, 1, trigger="leader_rejoined", member_id="x"),
              ev("join_completed", 9_990, 1, join_ms=0, not_rejoined=[])]
    gens = explain(records, events)
    assert gens[1].trigger is None and gens[1].cause_source == "log segments"
