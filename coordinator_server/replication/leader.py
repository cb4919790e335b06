"""The leader's view of one partition: followers' fetch state, the ISR, the high watermark, acks.

Theory of operation
-------------------
This is the leader half of Kafka's ``Partition`` (with ``Replica``'s fetch state), minus I/O:

- **Follower state** is updated on every follower fetch exactly as Kafka's ``Replica.updateFetchState``: the
  fetch offset is the follower's log end offset (LEO), and ``last_caught_up_time_ms`` moves to this fetch's
  time if the follower reached the leader's LEO, or to the *previous* fetch's time if it reached the LEO
  the leader had at that previous fetch (it was caught up then, even if the leader moved on since).
- **The ISR** is what ZooKeeper holds (``isr`` and its ``zk_version``) plus at most one change in flight
  (KIP-497): ``PendingExpand`` or ``PendingShrink``. The shell writes the proposed ISR with a conditional
  update on ``zk_version`` and reports back; while a change is in flight no other is proposed.
- **The high watermark** is the minimum LEO over the *maximal* ISR — the committed ISR plus a pending
  addition, never minus a pending removal — leader included, and never moves backwards. So a record is
  counted as committed only if every replica that is or may become an ISR member has it, and a leader that
  can no longer write ZooKeeper (a stale leader whose version check fails) can never shrink the set it
  waits for. See docs/decisions.md, "maximal ISR".
- **Acks**: ``check_enough_replicas`` is Kafka's ``checkEnoughReplicasReachOffset``; ``check_append`` is the
  NOT_ENOUGH_REPLICAS refusal before an ``acks=all`` append.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.errors import Errors

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    """Kafka's ReplicaState for a remote replica, as its leader sees it."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        """Kafka's ReplicaState.isCaughtUp: at the leader's LEO, or caught up within the last lag time."""
        return (leader_end_offset == self.log_end_offset
                or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms)


@dataclass(frozen=True, slots=True)
class PendingExpand:
    broker_id: int


@dataclass(frozen=True, slots=True)
class PendingShrink:
    removed: frozenset[int]


@dataclass(frozen=True, slots=True)
class IsrChange:
    """An ISR write for the shell to make: set ``isr`` if the partition state is still at ``expected_zk_version``."""

    leader_epoch: int
    isr: frozenset[int]
    expected_zk_version: int


@dataclass(frozen=True, slots=True)
class FetchStateUpdate:
    """What one follower fetch changed: whether the HW moved, and an ISR expansion to write, if any."""

    high_watermark_advanced: bool
    isr_change: IsrChange | None = None


@dataclass(slots=True)
class PartitionLeader:
    """The leader's state of one partition (Kafka's Partition while ``isLeader``)."""

    broker_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: frozenset[int]
    zk_version: int
    log_end_offset: int
    high_watermark: int
    # The LEO when this broker became leader of this epoch (Kafka's leaderEpochStartOffsetOpt): a follower
    # below it has not yet fetched anything of this epoch and must not join the ISR on a stale LEO.
    leader_epoch_start_offset: int
    replica_lag_time_max_ms: int
    pending: PendingExpand | PendingShrink | None = None
    followers: dict[int, FollowerState] = field(default_factory=dict)
    resigned: bool = False

    @classmethod
    def make_leader(cls, broker_id: int, leader_epoch: int, replicas: Iterable[int], isr: Iterable[int],
                    zk_version: int, log_end_offset: int, high_watermark: int, now_ms: int,
                    replica_lag_time_max_ms: int) -> PartitionLeader:
        """Kafka's Partition.makeLeader for a broker that was not leading: fresh follower states.

        A follower in the ISR is taken as caught up now, one outside it as never (resetReplicaState), so
        the new leader neither drops an ISR member before it had a chance to fetch nor waits for an
        outsider. The epoch starts at the current LEO.
        """
        replicas = tuple(replicas)
        isr_set = frozenset(isr)
        leader = cls(broker_id, leader_epoch, replicas, isr_set, zk_version, log_end_offset,
                     min(high_watermark, log_end_offset), log_end_offset, replica_lag_time_max_ms)
        for replica in replicas:
            if replica != broker_id:
                leader.followers[replica] = FollowerState(
                    replica, last_caught_up_time_ms=now_ms if replica in isr_set else 0)
        # The ISR may be down to the leader alone, and then the HW is its LEO (Kafka's comment exactly).
        leader.maybe_increment_high_watermark()
        return leader

    def on_leader_and_isr(self, leader_epoch: int, isr: Iterable[int], zk_version: int, now_ms: int) -> None:
        """Kafka's makeLeader for a broker already leading, for a LeaderAndIsr of the *same* epoch (the ISR
        changed under it): keep the follower LEOs, reset their fetch times as resetReplicaState does, take the
        ISR as committed. A newer epoch goes through ``make_leader`` (fresh follower state): this broker may
        have missed epochs in between, in which followers truncated below the LEOs it remembers."""
        if leader_epoch != self.leader_epoch:
            raise ValueError(f"epoch {leader_epoch} is not this leader's epoch {self.leader_epoch}: use make_leader")
        self.isr = frozenset(isr)
        self.zk_version = zk_version
        self.pending = None
        for follower in self.followers.values():
            # resetReplicaState with isNewLeader = false: LEOs kept; an outsider is not taken back into the
            # ISR on its old fetches (last fetch time 0) before it fetches again.
            in_sync = follower.broker_id in self.isr
            follower.last_fetch_leader_log_end_offset = self.log_end_offset
            follower.last_fetch_time_ms = now_ms if in_sync else 0
            follower.last_caught_up_time_ms = now_ms if in_sync else 0
        self.maybe_increment_high_watermark()

    # -------------------------------------------------------------------------------------- the ISR

    @property
    def maximal_isr(self) -> frozenset[int]:
        """KIP-497's maximalIsr: the committed ISR plus a pending addition; a pending shrink is not applied."""
        if isinstance(self.pending, PendingExpand):
            return self.isr | {self.pending.broker_id}
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return self.pending is not None

    def out_of_sync_replicas(self, now_ms: int) -> frozenset[int]:
        """Kafka's getOutOfSyncReplicas: ISR followers not caught up within replica.lag.time.max.ms."""
        if self.is_inflight:
            return frozenset()
        return frozenset(
            f for f in self.isr - {self.broker_id}
            if not self.followers[f].is_caught_up(self.log_end_offset, now_ms, self.replica_lag_time_max_ms))

    def maybe_shrink_isr(self, now_ms: int) -> IsrChange | None:
        """Kafka's maybeShrinkIsr: propose the ISR without the out-of-sync followers (PendingShrink)."""
        out_of_sync = self.out_of_sync_replicas(now_ms)
        if not out_of_sync or self.resigned:
            return None
        self.pending = PendingShrink(out_of_sync)
        return IsrChange(self.leader_epoch, self.isr - out_of_sync, self.zk_version)

    def is_follower_in_sync(self, follower_id: int) -> bool:
        """Kafka's isFollowerInSync: LEO at least the HW and at least the start of this leader epoch."""
        leo = self.followers[follower_id].log_end_offset
        return leo >= self.high_watermark and leo >= self.leader_epoch_start_offset

    def maybe_expand_isr(self, follower_id: int) -> IsrChange | None:
        """Kafka's maybeExpandIsr (needsExpandIsr / canAddReplicaToIsr): propose adding a caught-up follower."""
        if self.is_inflight or self.resigned or follower_id in self.isr or not self.is_follower_in_sync(follower_id):
            return None
        self.pending = PendingExpand(follower_id)
        return IsrChange(self.leader_epoch, self.isr | {follower_id}, self.zk_version)

    def on_isr_write_succeeded(self, change: IsrChange, new_zk_version: int) -> bool:
        """The conditional write of ``change`` succeeded: it is the committed ISR now. Returns whether the HW
        advanced (after a shrink it may: the dropped followers no longer hold it back)."""
        self.isr = change.isr
        self.zk_version = new_zk_version
        self.pending = None
        return self.maybe_increment_high_watermark()

    def on_isr_write_failed(self) -> None:
        """The version check failed: someone else (the controller) changed the partition state.

        As Kafka does for INVALID_UPDATE_VERSION, the change stays in flight — the maximal ISR keeps a
        pending addition and no further change is proposed — until a LeaderAndIsr says what is true
        (``on_leader_and_isr``) or this broker stops leading.
        """

    # ------------------------------------------------------------------- follower fetches and the HW

    def update_follower_fetch_state(self, follower_id: int, fetch_offset: int, now_ms: int) -> FetchStateUpdate:
        """Kafka's Partition.updateFollowerFetchState with Replica.updateFetchState.

        ``fetch_offset`` is the follower's LEO (it fetches from its end). Then the ISR may expand to include
        it, and the HW may advance if its LEO moved.
        """
        follower = self.followers[follower_id]
        previous_leo = follower.log_end_offset
        leader_end_offset = self.log_end_offset
        if fetch_offset >= leader_end_offset:
            follower.last_caught_up_time_ms = max(follower.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset:
            follower.last_caught_up_time_ms = max(follower.last_caught_up_time_ms, follower.last_fetch_time_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_log_end_offset = max(leader_end_offset, follower.last_fetch_leader_log_end_offset)
        follower.last_fetch_time_ms = now_ms
        isr_change = self.maybe_expand_isr(follower_id)
        advanced = previous_leo != fetch_offset and self.maybe_increment_high_watermark()
        return FetchStateUpdate(advanced, isr_change)

    def on_leader_append(self, new_log_end_offset: int) -> bool:
        """The leader appended up to new_log_end_offset; with the ISR down to itself the HW follows."""
        self.log_end_offset = new_log_end_offset
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Kafka's maybeIncrementLeaderHW: the minimum LEO over the maximal ISR, leader included; only up.

        An ISR follower that has not fetched yet in this epoch (LEO unknown) holds the HW where it is.
        """
        new_hw = self.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.broker_id:
                new_hw = min(new_hw, self.followers[replica].log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # ------------------------------------------------------------------------------------------ acks

    def check_append(self, required_acks: int, min_insync_replicas: int) -> Errors:
        """Kafka's appendRecordsToLeader pre-check: acks=all with the (committed) ISR below
        min.insync.replicas is refused with NOT_ENOUGH_REPLICAS before anything is written."""
        if self.resigned:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            return Errors.NOT_ENOUGH_REPLICAS
        return Errors.NONE

    def check_enough_replicas(self, required_offset: int, min_insync_replicas: int) -> tuple[bool, Errors]:
        """Kafka's checkEnoughReplicasReachOffset: (done, error) for an acks=all append ending before
        required_offset. Done once the HW reached it; then NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR
        shrank below min.insync.replicas meanwhile (the records are committed, but on fewer replicas than
        asked). A replica that no longer leads answers NOT_LEADER_OR_FOLLOWER."""
        if self.resigned:
            return False, Errors.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if min_insync_replicas <= len(self.maximal_isr):
                return True, Errors.NONE
            return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, Errors.NONE

    def resign(self) -> None:
        """This broker stopped leading (makeFollower, or its ZooKeeper session is gone)."""
        self.resigned = True
