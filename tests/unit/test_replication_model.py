"""A Hypothesis state machine of one partition replicated on 3 replicas, over the pure replication pieces.

Each replica is an in-memory log of (leader epoch, record) with its LeaderEpochCache and HW. A model
"ZooKeeper" holds the partition state (leader, leader epoch, ISR, version) and the live sessions; ISR
changes are conditional writes on the version, elections come from the committed ISR only (epoch + 1),
and LeaderAndIsr reaches each replica when the `notify` rule delivers it — so a replaced leader keeps
appending, serving fetches and trying to shrink its ISR until told. Followers run the OffsetsForLeaderEpoch
truncation of `replication/follower.py` one round per step before fetching. An append is acknowledged when
`check_enough_replicas` says (True, NONE).

Invariants after every step: every acknowledged record is in the current leader's log at its offset;
every replica's log up to its HW is a prefix of the current leader's; a leader's HW never decreases within
its epoch; a follower that finished truncation against a leader still leading that epoch holds a prefix of
that leader's log.

Bugs planted while writing it, each of which made it fail, then removed: the HW taken as the leader's LEO
alone (an acked record missing on the next leader); the follower skipping truncation (a follower diverging
from its new leader); the maximal ISR without a pending addition, or with a pending shrink applied before it
is committed (a replaced leader acknowledging records its successor does not have)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator_server.replication.follower import (
    epoch_to_request,
    follower_high_watermark,
    offset_truncation_state,
    truncate_without_epochs,
)
from coordinator_server.replication.leader import IsrChange, PartitionLeader
from coordinator_server.replication.leader_epoch_cache import (
    LeaderEpochCache,
    format_checkpoint,
    parse_checkpoint,
)
from protocol.errors import Errors

REPLICAS = (1, 2, 3)
LAG_MS = 1_000


@dataclass
class Following:
    leader_id: int
    leader_epoch: int
    truncated: bool = False


@dataclass
class Replica:
    broker_id: int
    log: list[tuple[int, str]] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw: int = 0
    role: PartitionLeader | Following | None = None

    @property
    def leo(self) -> int:
        return len(self.log)

    def truncate_to(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(offset)
        self.hw = min(self.hw, offset)

    def leading(self) -> PartitionLeader | None:
        role = self.role
        return role if isinstance(role, PartitionLeader) and not role.resigned else None


@dataclass
class ZooKeeper:
    leader: int
    leader_epoch: int
    isr: frozenset[int]
    version: int
    alive: dict[int, bool]
    # The leader's session expired: the controller must elect (from the ISR, as unclean election is off).
    leader_offline: bool = False


@dataclass
class PendingAck:
    leader: PartitionLeader
    offset: int
    entry: tuple[int, str]


class ReplicationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now_ms = 1_000_000
        self.replicas = {r: Replica(r) for r in REPLICAS}
        self.zk = ZooKeeper(1, 0, frozenset(REPLICAS), 0, dict.fromkeys(REPLICAS, True))
        self.min_isr = 2
        self.records = 0
        self.pending_acks: list[PendingAck] = []
        self.isr_writes: list[tuple[PartitionLeader, IsrChange]] = []
        self.acked: dict[int, tuple[int, str]] = {}
        self.hw_seen: dict[int, tuple[PartitionLeader, int]] = {}
        # Hypothesis' event() (coverage statistics, --hypothesis-show-statistics) only works inside a run;
        # a hand-driven machine swaps in a no-op.
        self.note: Callable[[str], None] = event

    @initialize(min_isr=st.sampled_from([2, 2, 1, 3]))
    def start(self, min_isr: int) -> None:
        self.min_isr = min_isr
        for replica in self.replicas.values():
            self._deliver_leader_and_isr(replica)

    # ------------------------------------------------------------------------------- controller side

    def _deliver_leader_and_isr(self, replica: Replica) -> None:
        """LeaderAndIsr as the controller would send it, from the state in ZooKeeper."""
        zk = self.zk
        role = replica.role
        if zk.leader == replica.broker_id:
            if isinstance(role, PartitionLeader) and role.leader_epoch == zk.leader_epoch:
                return
            if isinstance(role, PartitionLeader):
                role.resign()
            # Kafka's makeLeader: the new epoch starts at this replica's LEO.
            replica.cache.assign(zk.leader_epoch, replica.leo)
            replica.role = PartitionLeader.make_leader(
                replica.broker_id, zk.leader_epoch, REPLICAS, zk.isr, zk.version, replica.leo, replica.hw,
                self.now_ms, LAG_MS)
            self._publish_leader_hws()
        else:
            if isinstance(role, Following) and role.leader_epoch == zk.leader_epoch:
                return
            if isinstance(role, PartitionLeader):
                role.resign()
            replica.role = Following(zk.leader, zk.leader_epoch)

    def _publish_leader_hws(self) -> None:
        """A leader's HW is its log's HW (what Kafka checkpoints and serves consumers up to)."""
        for replica in self.replicas.values():
            leader = replica.leading()
            if leader is not None:
                replica.hw = leader.high_watermark

    @rule(r=st.sampled_from(REPLICAS))
    def notify(self, r: int) -> None:
        if self.zk.alive[r]:
            self._deliver_leader_and_isr(self.replicas[r])

    @rule(pick=st.integers(0, 2), act=st.integers(0, 2))
    def controller_elects(self, pick: int, act: int) -> None:
        """After the leader's session expired: OfflinePartitionLeaderElection (a live ISR member, the ISR cut
        to the live ones, no unclean election). Otherwise, one time in three, a controlled shutdown or
        preferred election moves leadership to another live ISR member. Either way epoch + 1."""
        zk = self.zk
        if zk.leader_offline:
            candidates = [r for r in REPLICAS if r in zk.isr and zk.alive[r]]
            if not candidates:
                return  # offline until an ISR member is back
            zk.isr = frozenset(r for r in zk.isr if zk.alive[r])
            self.note("leader elected after a failure")
        else:
            candidates = [r for r in REPLICAS if r in zk.isr and zk.alive[r] and r != zk.leader]
            if not candidates or act != 0:
                return
            self.note("leadership moved")
        zk.leader = candidates[pick % len(candidates)]
        zk.leader_epoch += 1
        zk.version += 1
        zk.leader_offline = False

    @rule(r=st.sampled_from(REPLICAS),
          action=st.sampled_from(["expire", "notice", "register", "restart", "none", "none"]),
          hw_checkpointed=st.integers(0, 20))
    def session(self, r: int, action: str, hw_checkpointed: int) -> None:
        """expire: the replica is paused past its session; ZooKeeper drops it, the process does not know.
        notice: the process learns its session is gone and resigns every partition at once.
        register: a new session (only once it has resigned). none: nothing (failures stay rarer than work).
        restart: kill -9 and start again — session gone, the (fsynced) log kept, the epochs read back from the
        leader-epoch-checkpoint text, the HW from its last periodic checkpoint, which may be older."""
        zk = self.zk
        replica = self.replicas[r]
        if action in ("expire", "restart") and zk.alive[r]:
            zk.alive[r] = False
            zk.leader_offline = zk.leader_offline or zk.leader == r
        if action in ("notice", "restart") and not zk.alive[r] and replica.role is not None:
            if isinstance(replica.role, PartitionLeader):
                replica.role.resign()
            replica.role = None
        if action == "restart":
            replica.cache = LeaderEpochCache(parse_checkpoint(format_checkpoint(replica.cache.entries())))
            replica.hw = min(replica.hw, hw_checkpointed)
        elif action == "register" and not zk.alive[r] and replica.role is None:
            zk.alive[r] = True

    # --------------------------------------------------------------------------------- leader side

    def _leaders(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.leading() is not None]

    @rule(pick=st.integers(0, 2), count=st.integers(1, 3))
    def append(self, pick: int, count: int) -> None:
        """Any replica that believes it leads appends (a replaced one too), acks=all."""
        leaders = self._leaders()
        if not leaders:
            return
        replica = leaders[pick % len(leaders)]
        leader = replica.leading()
        assert leader is not None
        if leader.check_append(-1, self.min_isr) != Errors.NONE:
            assert len(leader.isr) < self.min_isr
            return
        for _ in range(count):
            self.records += 1
            entry = (leader.leader_epoch, f"r{self.records}")
            replica.log.append(entry)
            replica.cache.assign(leader.leader_epoch, replica.leo - 1)
            self.pending_acks.append(PendingAck(leader, replica.leo - 1, entry))
        leader.on_leader_append(replica.leo)
        self._check_acks()

    @rule(pick=st.integers(0, 2))
    def shrink_isr(self, pick: int) -> None:
        leaders = self._leaders()
        if leaders:
            leader = leaders[pick % len(leaders)].leading()
            assert leader is not None
            change = leader.maybe_shrink_isr(self.now_ms)
            if change is not None:
                self.isr_writes.append((leader, change))

    @precondition(lambda self: bool(self.isr_writes))
    @rule(pick=st.integers(0, 5))
    def write_isr_to_zookeeper(self, pick: int) -> None:
        """The conditional update: it applies only if nobody changed the partition state since."""
        leader, change = self.isr_writes.pop(pick % len(self.isr_writes))
        if leader.resigned:
            return
        zk = self.zk
        if zk.version == change.expected_zk_version:
            assert zk.leader == leader.broker_id and zk.leader_epoch == change.leader_epoch
            zk.isr = change.isr
            zk.version += 1
            leader.on_isr_write_succeeded(change, zk.version)
            self._check_acks()
            self.note(f"ISR write committed ({len(change.isr)} replicas)")
        else:
            leader.on_isr_write_failed()
            self.note("ISR write failed its version check")

    def _check_acks(self) -> None:
        """What DelayedProduce does on each HW change: acknowledged when (True, NONE)."""
        self._publish_leader_hws()
        still = []
        for ack in self.pending_acks:
            done, error = ack.leader.check_enough_replicas(ack.offset + 1, self.min_isr)
            if done and error == Errors.NONE:
                assert self.acked.get(ack.offset, ack.entry) == ack.entry, "two records acked at one offset"
                self.acked[ack.offset] = ack.entry
                self.note("acked" if self._current_leader().leading() is ack.leader else "acked by a replaced leader")
            elif not done and error == Errors.NONE:
                still.append(ack)
        self.pending_acks = still

    @rule(ms=st.sampled_from([1, LAG_MS // 2, LAG_MS + 1]))
    def tick(self, ms: int) -> None:
        self.now_ms += ms

    # ------------------------------------------------------------------------------- follower side

    @rule(r=st.sampled_from(REPLICAS), max_records=st.integers(1, 4))
    def follower_fetch(self, r: int, max_records: int) -> None:
        self._fetch_round(r, max_records)

    @rule(max_records=st.integers(1, 4), rounds=st.integers(1, 4))
    def every_follower_fetches(self, max_records: int, rounds: int) -> None:
        for _ in range(rounds):
            for r in REPLICAS:
                self._fetch_round(r, max_records)

    def _fetch_round(self, r: int, max_records: int) -> None:
        """One round of the fetcher: OffsetsForLeaderEpoch while truncating, else a Fetch."""
        follower = self.replicas[r]
        role = follower.role
        if not isinstance(role, Following) or role.leader_id == r:
            return
        source = self.replicas[role.leader_id]
        leader = source.leading()
        # Both requests carry the follower's current leader epoch; any other epoch is fenced.
        if leader is None or leader.leader_epoch != role.leader_epoch:
            return
        if not role.truncated:
            self._truncation_round(follower, role, source)
            return
        fetch_offset = follower.leo
        high_watermark = leader.high_watermark  # read with the records, before this fetch's update
        records = source.log[fetch_offset:fetch_offset + max_records]
        update = leader.update_follower_fetch_state(r, fetch_offset, self.now_ms)
        if update.isr_change is not None:
            self.isr_writes.append((leader, update.isr_change))
        for epoch, record in records:
            follower.log.append((epoch, record))
            follower.cache.assign(epoch, follower.leo - 1)
        follower.hw = follower_high_watermark(high_watermark, follower.leo)
        if update.high_watermark_advanced:
            self._check_acks()

    def _truncation_round(self, follower: Replica, role: Following, source: Replica) -> None:
        requested = epoch_to_request(follower.cache)
        if requested is None:
            state = truncate_without_epochs(follower.hw, follower.leo)
        else:
            epoch, end_offset = source.cache.end_offset_for(requested, source.leo)
            state = offset_truncation_state(epoch, end_offset, follower.cache, follower.leo, follower.hw)
        if state.offset < follower.leo:
            self.note("truncation cut a log" + ("" if state.truncation_completed else " (and asks again)"))
        follower.truncate_to(state.offset)
        role.truncated = state.truncation_completed

    # ---------------------------------------------------------------------------------- invariants

    def _current_leader(self) -> Replica:
        return self.replicas[self.zk.leader]

    @invariant()
    def acknowledged_records_are_in_the_current_leaders_log(self) -> None:
        log = self._current_leader().log
        for offset, entry in self.acked.items():
            assert offset < len(log) and log[offset] == entry, (offset, entry, log)

    @invariant()
    def every_log_up_to_its_hw_is_a_prefix_of_the_current_leaders(self) -> None:
        leader_log = self._current_leader().log
        for replica in self.replicas.values():
            assert replica.hw <= replica.leo
            assert replica.log[:replica.hw] == leader_log[:replica.hw], (replica.broker_id, replica.hw)

    @invariant()
    def leader_hw_never_decreases_within_its_epoch(self) -> None:
        for replica in self.replicas.values():
            leader = replica.leading()
            if leader is None:
                continue
            assert leader.high_watermark <= replica.leo
            seen = self.hw_seen.get(replica.broker_id)
            if seen is not None and seen[0] is leader:
                assert leader.high_watermark >= seen[1]
            self.hw_seen[replica.broker_id] = (leader, leader.high_watermark)

    @invariant()
    def a_truncated_follower_never_diverges_from_its_leader(self) -> None:
        for follower in self.replicas.values():
            role = follower.role
            if not isinstance(role, Following) or not role.truncated:
                continue
            leader = self.replicas[role.leader_id].leading()
            if leader is None or leader.leader_epoch != role.leader_epoch:
                continue
            source_log = self.replicas[role.leader_id].log
            assert follower.log == source_log[:follower.leo], (follower.broker_id, follower.log, source_log)


ReplicationMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestReplicationModel = ReplicationMachine.TestCase


def _checked(machine: ReplicationMachine, step: str, **kwargs: int | str) -> None:
    getattr(machine, step)(**kwargs)
    machine.acknowledged_records_are_in_the_current_leaders_log()
    machine.every_log_up_to_its_hw_is_a_prefix_of_the_current_leaders()
    machine.leader_hw_never_decreases_within_its_epoch()
    machine.a_truncated_follower_never_diverges_from_its_leader()


def test_divergence_inside_an_older_epoch_is_found_by_asking_again() -> None:
    """KIP-279's case, driven through the machine: replica 2 led epoch 2 without ever having epoch 1, and
    the leader of epoch 3 (replica 1) answers its request for epoch 2 with epoch 1. Replica 2 cuts to the
    end of its epoch 0, asks again, and only then agrees with the leader."""
    m = ReplicationMachine()
    m.note = lambda _value: None
    m.start(min_isr=1)
    _checked(m, "append", pick=0, count=1)                  # r1 at 0, epoch 0, on replica 1
    _checked(m, "every_follower_fetches", max_records=4, rounds=3)
    _checked(m, "controller_elects", pick=1, act=0)          # leadership moves to 3: epoch 1
    for r in REPLICAS:
        _checked(m, "notify", r=r)
    _checked(m, "append", pick=0, count=1)                  # r2 at 1, epoch 1, on replica 3
    _checked(m, "follower_fetch", r=1, max_records=4)       # replica 1: truncation round
    _checked(m, "follower_fetch", r=1, max_records=4)       # replica 1 gets r2; replica 2 never does
    _checked(m, "session", r=3, action="expire", hw_checkpointed=0)
    _checked(m, "controller_elects", pick=1, act=0)          # live ISR {1, 2}: replica 2, epoch 2
    _checked(m, "notify", r=2)
    _checked(m, "append", pick=0, count=1)                  # r3 at 1, epoch 2, on replica 2 only
    _checked(m, "session", r=2, action="expire", hw_checkpointed=0)
    _checked(m, "controller_elects", pick=0, act=0)          # live ISR {1}: replica 1, epoch 3
    _checked(m, "notify", r=1)
    assert [e.epoch for e in m.replicas[1].cache.entries()] == [0, 1, 3]
    assert [e.epoch for e in m.replicas[2].cache.entries()] == [0, 2]
    _checked(m, "session", r=2, action="notice", hw_checkpointed=0)
    _checked(m, "session", r=2, action="register", hw_checkpointed=0)
    _checked(m, "notify", r=2)
    _checked(m, "follower_fetch", r=2, max_records=4)       # asks for epoch 2, told (1, 2): cut to 1
    follower = m.replicas[2]
    assert isinstance(follower.role, Following) and not follower.role.truncated
    assert follower.log == [(0, "r1")]
    _checked(m, "follower_fetch", r=2, max_records=4)       # asks for epoch 0, told (0, 1): done
    assert follower.role.truncated
    _checked(m, "follower_fetch", r=2, max_records=4)
    assert follower.log == m.replicas[1].log == [(0, "r1"), (1, "r2")]
