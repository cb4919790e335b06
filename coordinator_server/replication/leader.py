"""A leader's bookkeeping of one partition (Kafka's Partition and Replica): its followers' positions, the
ISR, and the high watermark. Synchronous; time comes in as `now_ms`.

The ISR has two faces (KIP-497): the one committed in ZooKeeper, and a proposal in flight. The high
watermark is the smallest log end offset over the *maximal* ISR (committed plus proposed additions, while
a proposed removal still counts), so neither an expansion nor a shrink can let it run ahead of a replica
that ZooKeeper might still call in sync. A leader that was replaced cannot commit a shrink (its write
carries a stale znode version), so it can never reach a high watermark that only it has.
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import Errors


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = -1  # unknown until its first fetch as our follower
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0


class LeaderState:
    def __init__(self, leader_id: int, replicas: tuple[int, ...], isr: set[int], zk_version: int, *,
                 leader_epoch_start_offset: int, high_watermark: int, now_ms: int) -> None:
        self.leader_id = leader_id
        self.replicas = replicas
        self.committed_isr = set(isr)
        self.zk_version = zk_version
        self.pending_isr: set[int] | None = None
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.high_watermark = high_watermark
        # Kafka's resetReplicaState on becoming leader: ISR members count as caught up now.
        self.followers = {r: FollowerState(last_caught_up_time_ms=now_ms if r in isr else 0)
                          for r in replicas if r != leader_id}

    @property
    def maximal_isr(self) -> set[int]:
        if self.pending_isr is None:
            return self.committed_isr
        return self.committed_isr | self.pending_isr

    def update_follower(self, follower: int, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> None:
        """Kafka's Replica.updateFetchState."""
        state = self.followers.get(follower)
        if state is None:
            return
        if fetch_offset >= leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.last_fetch_leader_log_end_offset = leader_log_end_offset
        state.last_fetch_time_ms = now_ms
        state.log_end_offset = fetch_offset

    def can_join_isr(self, follower: int) -> bool:
        """Kafka's isFollowerInSync for expansion: caught up to the high watermark, within this epoch."""
        state = self.followers.get(follower)
        return (state is not None and state.log_end_offset >= self.high_watermark
                and state.log_end_offset >= self.leader_epoch_start_offset)

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int, leader_log_end_offset: int) -> set[int]:
        """Kafka's getOutOfSyncReplicas: ISR followers not caught up for longer than max_lag_ms."""
        out = set()
        for r in self.committed_isr:
            state = self.followers.get(r)
            if state is None:
                continue
            if state.log_end_offset != leader_log_end_offset and now_ms - state.last_caught_up_time_ms > max_lag_ms:
                out.add(r)
        return out

    def maybe_increment_high_watermark(self, leader_log_end_offset: int) -> bool:
        """The smallest log end offset over the maximal ISR (ours included); never moves back."""
        new_hw = leader_log_end_offset
        for r in self.maximal_isr:
            if r == self.leader_id:
                continue
            state = self.followers.get(r)
            new_hw = min(new_hw, state.log_end_offset if state is not None else -1)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    def propose_isr(self, isr: set[int]) -> None:
        self.pending_isr = set(isr)

    def abort_isr_change(self) -> None:
        self.pending_isr = None

    def commit_isr(self, isr: set[int], zk_version: int) -> None:
        self.committed_isr = set(isr)
        self.zk_version = zk_version
        self.pending_isr = None

    def check_enough_replicas(self, required_offset: int, min_insync_replicas: int) -> tuple[bool, Errors]:
        """Kafka's checkEnoughReplicasReachOffset: done once the high watermark covers `required_offset`."""
        if self.high_watermark < required_offset:
            return False, Errors.NONE
        if len(self.committed_isr) < min_insync_replicas:
            return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, Errors.NONE
