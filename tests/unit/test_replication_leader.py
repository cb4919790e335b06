"""PartitionLeader: follower fetch state, ISR shrink/expand with KIP-497's maximal ISR, the high watermark and
acks, on a fake clock (plain integers)."""
from __future__ import annotations

import pytest

from coordinator_server.replication.leader import PartitionLeader, PendingExpand, PendingShrink
from protocol.errors import Errors

LAG_MS = 10_000
T0 = 1_000_000


def leader(isr: tuple[int, ...] = (1, 2, 3), leo: int = 10, hw: int = 10, zk_version: int = 5) -> PartitionLeader:
    return PartitionLeader.make_leader(1, 3, (1, 2, 3), isr, zk_version, leo, hw, T0, LAG_MS)


def test_make_leader_resets_follower_state_by_isr_membership() -> None:
    p = leader(isr=(1, 2))
    assert p.followers[2].last_caught_up_time_ms == T0
    assert p.followers[3].last_caught_up_time_ms == 0
    assert p.followers[2].log_end_offset == -1
    assert p.leader_epoch_start_offset == 10


def test_alone_in_the_isr_the_hw_follows_the_leaders_appends() -> None:
    p = leader(isr=(1,), leo=10, hw=4)
    assert p.high_watermark == 10
    assert p.on_leader_append(12)
    assert p.high_watermark == 12


def test_hw_is_the_minimum_leo_over_the_isr_and_waits_for_unknown_followers() -> None:
    p = leader(leo=10, hw=7)
    p.on_leader_append(15)
    assert p.high_watermark == 7
    assert not p.update_follower_fetch_state(2, 12, T0 + 1).high_watermark_advanced  # 3 not heard from yet
    assert p.update_follower_fetch_state(3, 11, T0 + 2).high_watermark_advanced
    assert p.high_watermark == 11
    p.update_follower_fetch_state(3, 15, T0 + 3)
    assert p.high_watermark == 12


def test_hw_never_moves_backwards() -> None:
    p = leader(leo=10, hw=10)
    p.update_follower_fetch_state(2, 10, T0 + 1)
    p.update_follower_fetch_state(3, 10, T0 + 1)
    p.update_follower_fetch_state(3, 8, T0 + 2)  # a follower that truncated reports less
    assert p.high_watermark == 10


def test_fetch_state_caught_up_time_follows_kafkas_rule() -> None:
    p = leader(leo=10, hw=0, isr=(1, 2))
    # Not at the leader's LEO, below the LEO of the previous fetch (unknown: -1 counts as reached).
    p.update_follower_fetch_state(2, 5, T0 + 100)
    f = p.followers[2]
    assert f.last_caught_up_time_ms == T0 and f.last_fetch_leader_log_end_offset == 10
    p.on_leader_append(20)
    # Reached what the leader had at the previous fetch: caught up as of that previous fetch.
    p.update_follower_fetch_state(2, 10, T0 + 200)
    assert f.last_caught_up_time_ms == T0 + 100
    # Below what the leader had at the previous fetch (20): no change.
    p.update_follower_fetch_state(2, 15, T0 + 300)
    assert f.last_caught_up_time_ms == T0 + 100
    # At the leader's LEO: caught up now.
    p.update_follower_fetch_state(2, 20, T0 + 400)
    assert f.last_caught_up_time_ms == T0 + 400
    assert f.last_fetch_time_ms == T0 + 400


def test_a_follower_out_of_sync_longer_than_the_lag_time_is_proposed_for_removal() -> None:
    p = leader(leo=10, hw=10)
    p.update_follower_fetch_state(2, 10, T0 + 1)
    p.update_follower_fetch_state(3, 10, T0 + 1)
    p.on_leader_append(12)
    assert p.maybe_shrink_isr(T0 + 1 + LAG_MS) is None
    p.update_follower_fetch_state(2, 12, T0 + LAG_MS)
    change = p.maybe_shrink_isr(T0 + 2 + LAG_MS)
    assert change is not None and change.isr == {1, 2} and change.expected_zk_version == 5
    assert p.pending == PendingShrink(frozenset({3}))


def test_a_follower_at_the_leaders_leo_is_never_out_of_sync() -> None:
    p = leader(leo=10, hw=10)
    p.update_follower_fetch_state(2, 10, T0)
    p.update_follower_fetch_state(3, 10, T0)
    assert p.out_of_sync_replicas(T0 + 10 * LAG_MS) == frozenset()


def test_a_pending_shrink_does_not_release_the_hw_until_committed() -> None:
    p = leader(leo=10, hw=10)
    p.update_follower_fetch_state(2, 10, T0 + 1)
    p.on_leader_append(14)
    p.update_follower_fetch_state(2, 14, T0 + 2 * LAG_MS)
    change = p.maybe_shrink_isr(T0 + 2 * LAG_MS)
    assert change is not None and change.isr == {1, 2}
    assert p.high_watermark == 10  # 3 is still in the maximal ISR
    assert p.maybe_shrink_isr(T0 + 3 * LAG_MS) is None  # one change in flight at a time
    assert p.on_isr_write_succeeded(change, 6)
    assert (p.isr, p.zk_version, p.pending, p.high_watermark) == ({1, 2}, 6, None, 14)


def test_a_failed_isr_write_leaves_the_change_in_flight_and_the_hw_held() -> None:
    # A stale leader: its version check fails, so it can never shrink the ISR it waits for.
    p = leader(leo=10, hw=10)
    p.on_leader_append(14)
    change = p.maybe_shrink_isr(T0 + 2 * LAG_MS)
    assert change is not None and change.isr == {1}
    p.on_isr_write_failed()
    assert p.isr == {1, 2, 3} and p.high_watermark == 10
    assert p.check_enough_replicas(14, 1) == (False, Errors.NONE)


def test_expand_needs_leo_at_the_hw_and_at_the_epoch_start() -> None:
    p = leader(isr=(1, 2), leo=10, hw=6)
    assert p.update_follower_fetch_state(3, 8, T0).isr_change is None  # >= HW but below the epoch start
    change = p.update_follower_fetch_state(3, 10, T0).isr_change
    assert change is not None and change.isr == {1, 2, 3}
    assert p.pending == PendingExpand(3)
    assert p.maximal_isr == {1, 2, 3} and p.isr == {1, 2}


def test_the_hw_counts_a_pending_addition() -> None:
    p = leader(isr=(1, 2), leo=10, hw=10)
    p.update_follower_fetch_state(2, 10, T0)
    p.update_follower_fetch_state(3, 10, T0)  # pending expand of 3
    p.on_leader_append(20)
    p.update_follower_fetch_state(2, 20, T0 + 1)
    assert p.high_watermark == 10  # 3 is in the maximal ISR and is at 10
    p.update_follower_fetch_state(3, 18, T0 + 2)
    assert p.high_watermark == 18


def test_leader_and_isr_replaces_the_pending_state() -> None:
    p = leader(isr=(1, 2), leo=10, hw=10)
    p.update_follower_fetch_state(3, 10, T0)
    p.on_isr_write_failed()
    with pytest.raises(ValueError):
        p.on_leader_and_isr(4, (1,), 9, T0 + 5)  # a newer epoch is a make_leader
    p.on_leader_and_isr(3, (1,), 9, T0 + 5)
    assert (p.isr, p.zk_version, p.pending) == ({1}, 9, None)
    assert p.followers[2].last_caught_up_time_ms == 0 and p.followers[2].last_fetch_time_ms == 0
    assert p.followers[3].log_end_offset == 10  # kept: the same leader, only the ISR changed
    assert p.followers[3].last_fetch_leader_log_end_offset == 10


def test_check_append_refuses_acks_all_below_min_isr() -> None:
    p = leader(isr=(1, 2))
    assert p.check_append(-1, 2) == Errors.NONE
    assert p.check_append(-1, 3) == Errors.NOT_ENOUGH_REPLICAS
    assert p.check_append(1, 3) == Errors.NONE
    p.resign()
    assert p.check_append(1, 1) == Errors.NOT_LEADER_OR_FOLLOWER


def test_check_enough_replicas_follows_kafka() -> None:
    p = leader(isr=(1, 2), leo=10, hw=10)
    p.on_leader_append(12)
    assert p.check_enough_replicas(12, 2) == (False, Errors.NONE)
    p.update_follower_fetch_state(2, 12, T0)
    assert p.check_enough_replicas(12, 2) == (True, Errors.NONE)
    assert p.check_enough_replicas(12, 3) == (True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    p.resign()
    assert p.check_enough_replicas(12, 2) == (False, Errors.NOT_LEADER_OR_FOLLOWER)
