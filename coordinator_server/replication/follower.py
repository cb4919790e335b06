"""A follower's truncation decision (KIP-101, KIP-279; Kafka's AbstractFetcherThread.getOffsetTruncationState).

The follower sends its latest epoch; the leader answers (epoch, end offset): the largest epoch it has at or
below the one asked, and where that epoch ends in its log. If the leader has the same epoch, the logs agree
up to the smaller of the two end offsets. If the leader's epoch is smaller, the follower looks up where
*that* epoch ends in its own log and truncates to the smaller end; the next round (with the new latest
epoch) settles anything left, as Kafka iterates.
"""
from __future__ import annotations

from collections.abc import Callable

from coordinator_server.replication.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


def truncation_offset(log_end_offset: int, high_watermark: int,
                      local_end_offset_for: Callable[[int], tuple[int, int]], local_latest_epoch: int,
                      leader_epoch: int, leader_end_offset: int) -> int:
    """Where the follower's log must end to agree with the leader's, given the leader's answer."""
    if local_latest_epoch == UNDEFINED_EPOCH:
        # Nothing epoch-stamped here (an empty log): the leader has whatever we have, or more.
        return min(log_end_offset, max(leader_end_offset, 0)) if leader_end_offset != UNDEFINED_EPOCH_OFFSET \
            else min(log_end_offset, high_watermark)
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader has no epoch at or below ours: fall back to the high watermark (pre-KIP-101 rule).
        return min(log_end_offset, high_watermark)
    if leader_epoch == local_latest_epoch:
        return min(leader_end_offset, log_end_offset)
    # The leader does not know our latest epoch: where does its answer's epoch end with us?
    local_epoch, local_end = local_end_offset_for(leader_epoch)
    if local_epoch == leader_epoch:
        return min(leader_end_offset, local_end, log_end_offset)
    # We never had that epoch either: everything from the epoch after it on may diverge.
    return min(leader_end_offset, local_end if local_end != UNDEFINED_EPOCH_OFFSET else 0, log_end_offset)
