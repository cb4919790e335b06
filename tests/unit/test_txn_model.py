"""A Hypothesis state machine over the transaction coordinator: producers of a few transactional ids init,
add partitions and end transactions in any order; writes complete or fail with any storage error, in any
order; markers are reported written in any order; the coordinator crashes (its partition reloaded from what
was durable) and its sweeps run at any time.

What must hold after every step:
- records are the only way state changes: replaying the durable records gives each id the metadata the
  live coordinator holds (but what only memory keeps: a change still being written, a fence whose abort was
  not written, the last epoch, an id never written);
- an id's producer epoch never goes back, and InitProducerId hands out a higher epoch each time (the
  same one only to the retry of a lost answer);
- a producer fenced (an epoch was handed out past its own) can never decide a transaction;
- each transaction is decided once: never both committed and aborted;
- once every write has landed and every marker is written, no transaction is left decided but unfinished.
"""
from __future__ import annotations

import dataclasses
import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator_server.txn.coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
    TxnAppend,
    TxnConfig,
)
from coordinator_server.txn.records import decode_key, decode_value
from coordinator_server.txn.state import TransactionState as S
from protocol.errors import Errors

IDS = ("a", "a", "a", "b")  # mostly one id, so that its transactions get far
PARTITIONS = (("t", 0), ("t", 1), ("u", 0))
WRITE_ERRORS = (Errors.NOT_ENOUGH_REPLICAS, Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR,
                Errors.REQUEST_TIMED_OUT)
SETTLE = st.sampled_from([True, True, False])  # usually the shell writes everything before the next request
WHO = st.sampled_from(["current", "current", "stale", "zombie"])
LEADERSHIP_LOST = (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR)


class TransactionCoordinatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        pids = itertools.count(100)
        # One partition: every id lives on it, so a crash reloads them all.
        self.core = TransactionCoordinator(TxnConfig(partitions=1, id_expiration_ms=50_000), lambda: next(pids))
        self.epoch = 1
        self.core.begin_loading(0, self.epoch)
        self.core.load_partition(0, [], self.epoch)
        self.durable: list[TxnAppend] = []
        self.in_flight: list[TxnAppend] = []
        self.now = 1_000
        self.identity: dict[str, tuple[int, int]] = {}  # the latest identity handed out per id
        self.zombies: dict[str, tuple[int, int]] = {}  # an identity whose transaction a new init fenced
        self.markers: list = []
        self.decided: dict[tuple[int, int, int], set[bool]] = {}  # (pid, epoch, start) -> outcomes logged

    def _pump(self) -> None:
        self.in_flight.extend(self.core.take_appends())
        self.markers.extend(self.core.take_markers())

    def _tick(self) -> int:
        self.now += 7
        return self.now

    # -- producers ------------------------------------------------------------------------------------

    @rule(tid=st.sampled_from(IDS), with_expected=st.booleans(), timeout=st.sampled_from([100, 60_000]),
          settle=SETTLE)
    def init(self, tid: str, with_expected: bool, timeout: int, settle: bool) -> None:
        expected = self.identity.get(tid) if with_expected else None

        _, md = self.core.describe(tid)
        # An init that finds a transaction open (and no change pending) fences it: its producer is a zombie.
        fencing = self.identity.get(tid) if md is not None and md.state is S.ONGOING and md.pending is None \
            else None

        def answered(result: InitProducerIdResult) -> None:
            if result.error == Errors.CONCURRENT_TRANSACTIONS and fencing is not None:
                self.zombies[tid] = fencing
            if result.error == Errors.NONE:
                zombie = self.zombies.get(tid)
                if zombie is not None and zombie[0] == result.producer_id:
                    assert result.producer_epoch >= zombie[1] + 2, (zombie, result)  # past the fence epoch
                before = self.identity.get(tid)
                if before is not None and before[0] == result.producer_id:
                    # A later identity of the same producer id: a higher epoch, or the same one to a retry.
                    assert result.producer_epoch > before[1] or expected == (before[0], before[1] - 1) \
                        or expected == before, (before, result, expected)
                self.identity[tid] = (result.producer_id, result.producer_epoch)

        self.core.handle_init_producer_id(tid, timeout, expected, self._tick(), answered)
        self._pump()
        if settle:
            self._settle()

    @rule(tid=st.sampled_from(IDS), partitions=st.sets(st.sampled_from(PARTITIONS), min_size=1, max_size=2),
          who=WHO, settle=SETTLE)
    def add(self, tid: str, partitions: set[tuple[str, int]], who: str, settle: bool) -> None:
        identity = self._identity(tid, who)
        if identity is None:
            return

        def answered(error: Errors) -> None:
            if identity != self.identity.get(tid):
                assert error != Errors.NONE, (tid, who, identity, self.identity.get(tid))

        self.core.handle_add_partitions(tid, identity[0], identity[1], partitions, self._tick(), answered)
        self._pump()
        if settle:
            self._settle()

    @rule(tid=st.sampled_from(IDS), commit=st.booleans(), who=WHO,
          settle=SETTLE)
    def end(self, tid: str, commit: bool, who: str, settle: bool) -> None:
        identity = self._identity(tid, who)
        if identity is None:
            return

        def answered(error: Errors) -> None:
            if identity != self.identity.get(tid):
                # A producer past whose epoch another was handed out never gets a decision through.
                assert error != Errors.NONE, (tid, who, identity, self.identity.get(tid))

        self.core.handle_end_txn(tid, identity[0], identity[1], commit, self._tick(), answered)
        self._pump()
        if settle:
            self._settle()

    def _identity(self, tid: str, who: str) -> tuple[int, int] | None:
        identity = self.identity.get(tid)
        if identity is None:
            return None
        if who == "zombie":
            return self.zombies.get(tid)
        return (identity[0], identity[1] - 1) if who == "stale" and identity[1] > 0 else identity

    def _settle(self) -> None:
        """The shell at its best: every write durable and every marker written, until nothing is left."""
        while self.in_flight or self.markers:
            if self.in_flight:
                append = self.in_flight.pop(0)
                self.durable.append(append)
                self._decided(append)
                append.on_complete(Errors.NONE)
            else:
                self.core.markers_written(self.markers.pop(0), self._tick())
            self._pump()
        # With nothing lost, every decided transaction is finished and no change is left half made.
        for md in self.core.transactions():
            assert not md.state.is_prepare and md.pending is None, (md.transactional_id, md.current, md.pending)

    # -- the shell ------------------------------------------------------------------------------------

    @precondition(lambda self: self.in_flight)
    @rule(index=st.integers(min_value=0), fail=st.sampled_from((None, *WRITE_ERRORS)))
    def write(self, index: int, fail: Errors | None) -> None:
        append = self.in_flight.pop(index % len(self.in_flight))
        if fail is None:
            self.durable.append(append)
            self._decided(append)
        append.on_complete(Errors.NONE if fail is None else fail)
        self._pump()
        if fail in LEADERSHIP_LOST:
            # What such an error means: this node no longer leads the partition; the next leader loads it.
            self.crash([])

    def _decided(self, append: TxnAppend) -> None:
        value = decode_value(append.value)
        if value is not None and value.state.is_prepare:
            key = (value.producer_id, value.producer_epoch, value.txn_start_timestamp_ms)
            self.decided.setdefault(key, set()).add(value.state is S.PREPARE_COMMIT)

    @precondition(lambda self: self.markers)
    @rule(index=st.integers(min_value=0))
    def markers_written(self, index: int) -> None:
        markers = self.markers.pop(index % len(self.markers))
        self.core.markers_written(markers, self._tick())
        self._pump()

    @rule(reached=st.lists(st.booleans(), max_size=6))
    def crash(self, reached: list[bool]) -> None:
        """The node dies: of the writes in flight some reached the log unanswered, the rest are lost, as
        are the markers queued; the next leader loads the log."""
        for append, made_it in zip(list(self.in_flight), reached, strict=False):
            if made_it:
                self.durable.append(append)
                self._decided(append)
        self.in_flight.clear()
        self.markers.clear()
        self.epoch += 1
        pids = itertools.count(10_000 * self.epoch)
        config = self.core.config
        self.core = TransactionCoordinator(config, lambda: next(pids))
        self.core.begin_loading(0, self.epoch)
        self.core.load_partition(0, [(a.key, a.value) for a in self.durable], self.epoch)
        self._pump()

    @rule(advance=st.sampled_from([10, 1_000, 100_000]))
    def sweep(self, advance: int) -> None:
        self.now += advance
        self.core.abort_timed_out(self.now)
        self.core.expire_ids(self.now)
        self._pump()

    # -- invariants -----------------------------------------------------------------------------------

    @invariant()
    def replaying_the_log_gives_the_live_metadata(self) -> None:
        replayed: dict[str, object] = {}
        for a in self.durable:
            replayed[decode_key(a.key)] = decode_value(a.value)
        for md in self.core.transactions():
            if md.pending is not None or md.has_failed_epoch_fence:
                continue
            record = replayed.get(md.transactional_id)
            if record is None:
                assert md.producer_epoch == -1  # cached at first sight, never written
                continue
            live = md.current
            assert record == dataclasses.replace(live, last_producer_epoch=-1), (record, live)

    @invariant()
    def durable_epochs_never_go_back(self) -> None:
        """Per producer id, the epochs in the log only grow (an epoch only in memory, a fence whose abort was
        lost in a crash, may be forgotten: nobody was handed it)."""
        highest: dict[tuple[str, int], int] = {}
        for a in self.durable:
            value = decode_value(a.value)
            if value is None:
                highest = {k: v for k, v in highest.items() if k[0] != decode_key(a.key)}
                continue
            key = (decode_key(a.key), value.producer_id)
            assert value.producer_epoch >= highest.get(key, -1), (key, value)
            highest[key] = value.producer_epoch

    @invariant()
    def each_transaction_is_decided_once(self) -> None:
        for key, outcomes in self.decided.items():
            assert len(outcomes) == 1, (key, outcomes)



TransactionCoordinatorModel.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestTransactionCoordinatorModel = TransactionCoordinatorModel.TestCase
