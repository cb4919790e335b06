"""The follower's decisions: where to truncate on meeting a leader (KIP-101, KIP-279), and its high watermark.

Theory of operation
-------------------
A follower that starts following a leader (a new one, or the same one in a new epoch) may hold records the
leader never had: appended by a previous leader that died before they were replicated. Before fetching it
asks the leader for the end offset of its own latest epoch (OffsetsForLeaderEpoch) and truncates to where
the two logs agree, as Kafka's ``AbstractFetcherThread.maybeTruncate`` does:

1. ``epoch_to_request`` — the follower's latest epoch, or None when it has no epochs at all (then it
   truncates to its high watermark, Kafka's fallback for a replica without leader epochs).
2. The leader answers with its ``LeaderEpochCache.end_offset_for(requested, its LEO)``.
3. ``offset_truncation_state`` turns the answer into an offset and whether truncation is complete. When
   the leader answered with an *older* epoch than asked (it never had the follower's epoch), the follower
   cuts to the end of its own largest epoch not above the leader's, and asks again with its new latest
   epoch (KIP-279): divergence may lie inside an older epoch, so it iterates until both name the same
   epoch.

After each truncation the shell cuts the log and calls ``LeaderEpochCache.truncate_from_end`` with the
same offset. Once complete the follower fetches from its LEO, and every fetch response's HW becomes its
own, capped by its LEO (``follower_high_watermark``).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_server.replication.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Kafka's OffsetTruncationState: truncate to ``offset``; ask again unless ``truncation_completed``."""

    offset: int
    truncation_completed: bool


def epoch_to_request(cache: LeaderEpochCache) -> int | None:
    """The epoch a follower sends in OffsetsForLeaderEpoch: its latest, or None if it has no epochs."""
    return cache.latest_epoch()


def truncate_without_epochs(high_watermark: int, log_end_offset: int) -> OffsetTruncationState:
    """Kafka's truncateToHighWatermark, for a follower with no leader epochs: cut back to its HW."""
    return OffsetTruncationState(min(high_watermark, log_end_offset), True)


def offset_truncation_state(leader_epoch: int, leader_end_offset: int, cache: LeaderEpochCache,
                            log_end_offset: int, high_watermark: int) -> OffsetTruncationState:
    """Kafka's AbstractFetcherThread.getOffsetTruncationState for the leader's answer
    (``leader_epoch``, ``leader_end_offset``) to the follower's OffsetsForLeaderEpoch request.

    - The leader has no end offset for the epoch (UNDEFINED_EPOCH_OFFSET): truncate to the follower's HW.
    - The leader gave no epoch (an old leader): truncate to its end offset, capped by the follower's LEO.
    - The follower does not have the leader's epoch: cut to the end of the follower's largest epoch below
      it (capped by its LEO) and ask again — not complete.
    - Both have it: truncate to the smaller of the two end offsets for that epoch (and the follower's LEO).
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return truncate_without_epochs(high_watermark, log_end_offset)
    if leader_epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    follower_epoch, follower_end_offset = cache.end_offset_for(leader_epoch, log_end_offset)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The follower tracks no epoch at or before it (its epochs were all newer, or none): the leader's
        # answer is an epoch older than what the follower asked, so its end offset is safe to go to.
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    if follower_epoch != leader_epoch:
        return OffsetTruncationState(min(follower_end_offset, log_end_offset), False)
    return OffsetTruncationState(min(follower_end_offset, leader_end_offset, log_end_offset), True)


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int) -> int:
    """The follower's HW after a fetch response (Kafka's ReplicaFetcherThread.processPartitionData):
    the leader's HW, capped by what the follower has."""
    return min(leader_high_watermark, log_end_offset)
