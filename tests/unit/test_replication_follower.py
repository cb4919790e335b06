"""Follower truncation (KIP-101 / KIP-279) against a leader's epoch cache, and the follower's HW."""
from __future__ import annotations

from coordinator_server.replication.follower import (
    OffsetTruncationState,
    epoch_to_request,
    follower_high_watermark,
    offset_truncation_state,
    truncate_without_epochs,
)
from coordinator_server.replication.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def converge(follower: LeaderEpochCache, follower_leo: int, follower_hw: int,
             leader: LeaderEpochCache, leader_leo: int) -> tuple[int, int]:
    """Run the OffsetsForLeaderEpoch exchange to completion; (offset truncated to, rounds)."""
    rounds = 0
    while True:
        rounds += 1
        requested = epoch_to_request(follower)
        if requested is None:
            state = truncate_without_epochs(follower_hw, follower_leo)
        else:
            epoch, end = leader.end_offset_for(requested, leader_leo)
            state = offset_truncation_state(epoch, end, follower, follower_leo, follower_hw)
        follower_leo = min(follower_leo, state.offset)
        follower.truncate_from_end(state.offset)
        if state.truncation_completed:
            return follower_leo, rounds


def test_same_latest_epoch_truncates_to_the_shorter_end() -> None:
    follower = cache_of((0, 0), (2, 10))
    assert offset_truncation_state(2, 14, follower, 17, 12) == OffsetTruncationState(14, True)
    assert offset_truncation_state(2, 20, follower, 17, 12) == OffsetTruncationState(17, True)


def test_a_follower_epoch_the_leader_never_had_is_cut_where_the_leader_moved_on() -> None:
    # The follower wrote [10, 15) in epoch 2 as a leader that died; the new leader went from epoch 1 to 3
    # at 12. It answers (1, 12); the follower has epoch 1 too and both ended it at 12.
    follower = cache_of((0, 0), (1, 8), (2, 12))
    leader = cache_of((0, 0), (1, 8), (3, 12))
    assert leader.end_offset_for(2, 20) == (1, 12)
    assert offset_truncation_state(1, 12, follower, 15, 9) == OffsetTruncationState(12, True)
    assert converge(follower, 15, 9, leader, 20) == (12, 1)


def test_divergence_inside_an_older_epoch_iterates() -> None:
    # The leader answers with epoch 1, which the follower never had: it cuts to the end of its epoch 0
    # and asks again with epoch 0, for which the leader's end (8) is the answer.
    follower = cache_of((0, 0), (2, 10))
    leader = cache_of((0, 0), (1, 8), (3, 12))
    epoch, end = leader.end_offset_for(2, 20)
    assert (epoch, end) == (1, 12)
    assert offset_truncation_state(epoch, end, follower, 15, 5) == OffsetTruncationState(10, False)
    assert converge(follower, 15, 5, leader, 20) == (8, 2)
    assert follower.entries() == [EpochEntry(0, 0)]


def test_the_leader_without_an_end_offset_sends_the_follower_to_its_hw() -> None:
    follower = cache_of((4, 0))
    assert offset_truncation_state(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, follower, 15, 6) == \
        OffsetTruncationState(6, True)


def test_a_leader_that_gives_no_epoch_is_followed_to_its_offset() -> None:
    assert offset_truncation_state(UNDEFINED_EPOCH, 9, cache_of((0, 0)), 15, 3) == OffsetTruncationState(9, True)
    assert offset_truncation_state(UNDEFINED_EPOCH, 20, cache_of((0, 0)), 15, 3) == OffsetTruncationState(15, True)


def test_the_leaders_epoch_older_than_every_follower_epoch() -> None:
    # The follower's epochs all start after the leader's answer: its own lookup says (requested, first
    # start); the same epoch, so the smaller end offset wins.
    follower = cache_of((5, 10))
    assert offset_truncation_state(3, 7, follower, 15, 2) == OffsetTruncationState(7, True)


def test_a_follower_without_epochs_truncates_to_its_hw() -> None:
    assert epoch_to_request(cache_of()) is None
    assert truncate_without_epochs(6, 15) == OffsetTruncationState(6, True)
    assert truncate_without_epochs(20, 15) == OffsetTruncationState(15, True)


def test_a_follower_behind_the_leader_keeps_everything() -> None:
    follower = cache_of((0, 0), (1, 5))
    leader = cache_of((0, 0), (1, 5), (2, 30))
    assert converge(follower, 12, 12, leader, 40) == (12, 1)


def test_follower_hw_is_the_leaders_capped_by_its_leo() -> None:
    assert follower_high_watermark(10, 7) == 7
    assert follower_high_watermark(5, 7) == 5
