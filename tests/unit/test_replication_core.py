"""The leader's ISR and high-watermark bookkeeping, the leader-epoch cache and the follower's truncation
rule (coordinator_server/replication/), on a fake clock. Kafka's Partition, LeaderEpochFileCache and
AbstractFetcherThread are the reference for each rule."""
from __future__ import annotations

from pathlib import Path

from coordinator_server.replication.follower import truncation_offset
from coordinator_server.replication.leader import LeaderState
from coordinator_server.replication.leader_epoch_cache import LeaderEpochCache
from protocol.errors import Errors

LAG_MS = 10_000


def _leader(isr: set[int] = frozenset({0, 1, 2}), hw: int = 0, start: int = 0) -> LeaderState:  # type: ignore[assignment]
    return LeaderState(0, (0, 1, 2), set(isr), 7, leader_epoch_start_offset=start, high_watermark=hw, now_ms=1000)


# -- the high watermark ---------------------------------------------------------------------------------


def test_high_watermark_waits_for_every_isr_follower_after_becoming_leader() -> None:
    s = _leader()
    assert not s.maybe_increment_high_watermark(10)  # followers' positions unknown yet
    s.update_follower(1, 10, 10, 1100)
    assert not s.maybe_increment_high_watermark(10)
    s.update_follower(2, 6, 10, 1100)
    assert s.maybe_increment_high_watermark(10) and s.high_watermark == 6


def test_high_watermark_ignores_a_follower_outside_the_isr_and_never_moves_back() -> None:
    s = _leader(isr={0, 1})
    s.update_follower(1, 8, 8, 1100)
    s.update_follower(2, 0, 8, 1100)
    s.maybe_increment_high_watermark(8)
    assert s.high_watermark == 8
    s.commit_isr({0, 1, 2}, 8)  # the lagging one joins: the high watermark stays where it was
    assert not s.maybe_increment_high_watermark(8) and s.high_watermark == 8


def test_a_proposed_shrink_does_not_move_the_high_watermark_until_committed() -> None:
    s = _leader()
    s.update_follower(1, 10, 10, 1100)
    s.update_follower(2, 4, 10, 1100)
    s.maybe_increment_high_watermark(10)
    s.propose_isr({0, 1})
    assert not s.maybe_increment_high_watermark(10) and s.high_watermark == 4
    s.commit_isr({0, 1}, 8)
    assert s.maybe_increment_high_watermark(10) and s.high_watermark == 10


def test_a_proposed_expansion_counts_at_once_for_the_high_watermark() -> None:
    s = _leader(isr={0, 1})
    s.update_follower(1, 10, 10, 1100)
    s.update_follower(2, 10, 10, 1100)
    s.propose_isr({0, 1, 2})
    s.maybe_increment_high_watermark(12)  # the leader appended two more; follower 2 has not fetched them
    assert s.high_watermark == 10


def test_a_rejected_proposal_leaves_the_committed_isr() -> None:
    s = _leader()
    s.propose_isr({0})
    s.abort_isr_change()
    assert s.maximal_isr == {0, 1, 2} and s.committed_isr == {0, 1, 2}


# -- ISR membership ----------------------------------------------------------------------------------------


def test_a_follower_not_caught_up_for_longer_than_the_lag_time_is_out_of_sync() -> None:
    s = _leader()
    s.update_follower(1, 10, 10, 2000)  # caught up at 2000
    s.update_follower(2, 3, 10, 2000)  # behind since it became leader (ISR members count as caught up at 1000)
    assert s.out_of_sync_replicas(1000 + LAG_MS, LAG_MS, 10) == set()
    assert s.out_of_sync_replicas(1001 + LAG_MS, LAG_MS, 10) == {2}
    assert s.out_of_sync_replicas(2001 + LAG_MS, LAG_MS, 10) == {2}  # at the leader's end: in sync
    assert s.out_of_sync_replicas(2001 + LAG_MS, LAG_MS, 12) == {1, 2}  # the leader moved on since
    s.update_follower(1, 10, 10, 9000)  # at the end again: never out of sync while there
    assert 1 not in s.out_of_sync_replicas(9000 + 5 * LAG_MS, LAG_MS, 10)


def test_fetching_up_to_the_leader_end_of_the_previous_fetch_counts_as_caught_up_then() -> None:
    s = _leader()
    s.update_follower(1, 5, 10, 2000)  # behind
    s.update_follower(1, 10, 14, 3000)  # reached what the leader had at 2000: caught up as of 2000
    assert s.followers[1].last_caught_up_time_ms == 2000


def test_a_follower_joins_only_when_caught_up_to_the_high_watermark_and_this_epoch() -> None:
    s = _leader(isr={0, 1}, hw=10, start=12)
    s.update_follower(2, 11, 14, 1100)
    assert not s.can_join_isr(2)  # past the high watermark, but not into this leader's epoch
    s.update_follower(2, 12, 14, 1200)
    assert s.can_join_isr(2)


# -- acks=all ------------------------------------------------------------------------------------------------


def test_an_append_completes_once_the_high_watermark_covers_it() -> None:
    s = _leader()
    assert s.check_enough_replicas(5, 2) == (False, Errors.NONE)
    s.update_follower(1, 5, 5, 1100)
    s.update_follower(2, 5, 5, 1100)
    s.maybe_increment_high_watermark(5)
    assert s.check_enough_replicas(5, 2) == (True, Errors.NONE)


def test_an_append_covered_while_the_isr_is_below_min_insync_fails_after_append() -> None:
    s = _leader(isr={0})
    s.maybe_increment_high_watermark(5)
    assert s.check_enough_replicas(5, 2) == (True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


# -- the leader-epoch cache ---------------------------------------------------------------------------------


def test_epoch_cache_answers_as_kafkas_end_offset_for() -> None:
    cache = LeaderEpochCache(entries=[(1, 0), (3, 10), (4, 25)])
    assert cache.end_offset_for(4, 30) == (4, 30)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 30) == (3, 25)
    assert cache.end_offset_for(2, 30) == (1, 10)  # never had 2: the largest below it, and where it ends
    assert cache.end_offset_for(0, 30) == (-1, -1)  # older than everything
    assert cache.end_offset_for(9, 30) == (4, 30)
    assert LeaderEpochCache().end_offset_for(1, 5) == (-1, -1)


def test_epoch_cache_assign_ignores_older_epochs_and_truncate_drops_the_tail() -> None:
    cache = LeaderEpochCache(entries=[(1, 0), (3, 10)])
    assert not cache.assign(2, 20) and not cache.assign(3, 12)
    assert cache.assign(5, 8)  # an entry at or after the new start is a leftover of a truncated log
    assert cache.entries() == [(1, 0), (5, 8)]
    cache.truncate_from_end(8)
    assert cache.entries() == [(1, 0)]


def test_epoch_checkpoint_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path, [(0, 0), (2, 17)])
    cache.flush()
    assert path.read_text() == "0\n2\n0 0\n2 17\n"
    assert LeaderEpochCache.load(path).entries() == [(0, 0), (2, 17)]


# -- follower truncation --------------------------------------------------------------------------------------


def _truncate(local: list[tuple[int, int]], leo: int, leader_answer: tuple[int, int], hw: int = 0) -> int:
    cache = LeaderEpochCache(entries=local)
    return truncation_offset(leo, hw, lambda e: cache.end_offset_for(e, leo), cache.latest_epoch, *leader_answer)


def test_same_epoch_truncates_to_the_smaller_end() -> None:
    assert _truncate([(0, 0), (1, 10)], 20, (1, 15)) == 15
    assert _truncate([(0, 0), (1, 10)], 12, (1, 15)) == 12


def test_a_follower_with_an_epoch_the_leader_never_had_truncates_to_where_the_leaders_epoch_ends() -> None:
    # The follower led epoch 2 briefly (wrote 20..24) and was replaced; the leader has 0, 1 then 3.
    assert _truncate([(0, 0), (1, 10), (2, 20)], 25, (1, 20)) == 20
    assert _truncate([(0, 0), (1, 10), (2, 18)], 25, (1, 20)) == 18


def test_leader_without_any_epoch_at_or_below_ours_falls_back_to_the_high_watermark() -> None:
    assert _truncate([(3, 0)], 9, (-1, -1), hw=4) == 4


def test_an_empty_follower_truncates_nothing() -> None:
    assert _truncate([], 0, (2, 30)) == 0
