"""The transaction coordinator's core on a fake clock: each id's state machine (prepare, write, complete), the
transactional APIs' rules in Kafka's order of checks, and the `__transaction_state` record formats."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from coordinator_server.txn.metadata import (
    EPOCH_EXHAUSTED_AT,
    IllegalTransition,
    TransactionMetadata,
    TxnRefusal,
    TxnTransit,
)
from coordinator_server.txn.operations import (
    Fence,
    add_partitions,
    begin_fence_abort,
    complete_transaction,
    end_transaction,
    expire,
    init_producer_id,
    timed_out,
)
from coordinator_server.txn.records import decode_key, decode_value, encode_key, encode_value
from coordinator_server.txn.state import TransactionState as S
from coordinator_server.txn.state import may_follow
from protocol.errors import Errors
from protocol.transaction_records import TransactionLogValue

T0 = 1_000_000
TIMEOUT = 60_000


def written(md: TransactionMetadata, transit: object) -> None:
    """The transit's record is durable: apply it, as the coordinator does."""
    assert isinstance(transit, TxnTransit) and transit is md.pending
    md.complete(transit)


def refused(error: Errors, call: object, *args: object) -> None:
    with pytest.raises(TxnRefusal) as caught:
        call(*args)  # type: ignore[operator]
    assert caught.value.error == error


def ready(pids: itertools.count[int] | None = None) -> tuple[TransactionMetadata, itertools.count[int]]:
    """A producer's first InitProducerId, written: epoch 0, Empty."""
    pids = pids or itertools.count(1000)
    md = TransactionMetadata.new("tx", next(pids), TIMEOUT, T0)
    transit = init_producer_id(md, None, TIMEOUT, T0, lambda: next(pids))
    written(md, transit)
    return md, pids


def ongoing(partitions: tuple[tuple[str, int], ...] = (("t", 0),)) -> TransactionMetadata:
    md, _ = ready()
    written(md, add_partitions(md, md.producer_id, md.producer_epoch, partitions, T0 + 10))
    return md


# -- the state table ----------------------------------------------------------------------------------


def test_states_follow_kafkas_table() -> None:
    assert may_follow(S.ONGOING, S.ONGOING) and may_follow(S.ONGOING, S.COMPLETE_ABORT)
    assert not may_follow(S.PREPARE_COMMIT, S.EMPTY)
    assert not may_follow(S.PREPARE_ABORT, S.EMPTY) and may_follow(S.PREPARE_ABORT, S.EMPTY, transaction_v2=True)
    assert may_follow(S.COMPLETE_COMMIT, S.PREPARE_COMMIT) and not may_follow(S.COMPLETE_COMMIT, S.PREPARE_ABORT)
    assert {s.display_name for s in S} >= {"Empty", "Ongoing", "PrepareCommit", "CompleteAbort", "PrepareEpochFence"}
    assert [s for s in S if s.id_may_expire] == [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT]


def test_a_pending_change_serializes_the_id_and_only_its_write_applies_it() -> None:
    md, _ = ready()
    transit = add_partitions(md, md.producer_id, 0, [("t", 0)], T0 + 5)
    assert transit is not None and md.state is S.EMPTY and md.pending_state is S.ONGOING  # written, not yet durable
    refused(Errors.CONCURRENT_TRANSACTIONS, add_partitions, md, md.producer_id, 0, [("t", 1)], T0 + 6)
    md.abandon(transit)  # the write failed: nothing changed, the id is free again
    assert md.state is S.EMPTY and md.pending is None
    transit = add_partitions(md, md.producer_id, 0, [("t", 1)], T0 + 7)
    with pytest.raises(IllegalTransition):
        md.complete(md.to(S.ONGOING, T0))  # not the pending transit
    written(md, transit)
    assert md.state is S.ONGOING and md.current.partitions == {("t", 1)}


# -- InitProducerId -----------------------------------------------------------------------------------


def test_init_producer_id_bumps_the_epoch_each_time() -> None:
    md, pids = ready()
    first = md.producer_id
    assert (md.producer_epoch, md.state, md.current.partitions, md.current.txn_start_timestamp_ms) == (0, S.EMPTY,
                                                                                                       frozenset(), -1)
    written(md, init_producer_id(md, None, 30_000, T0 + 1, lambda: next(pids)))
    assert (md.producer_id, md.producer_epoch, md.current.last_producer_epoch) == (first, 1, -1)
    assert md.current.txn_timeout_ms == 30_000


def test_kip_360_expected_identity_bumps_and_a_retry_gets_the_same_epoch() -> None:
    md, pids = ready()
    pid = md.producer_id
    written(md, init_producer_id(md, (pid, 0), TIMEOUT, T0 + 1, lambda: next(pids)))
    assert (md.producer_epoch, md.current.last_producer_epoch) == (1, 0)
    # The answer was lost: the producer asks again with the epoch it had before.
    written(md, init_producer_id(md, (pid, 0), TIMEOUT, T0 + 2, lambda: next(pids)))
    assert (md.producer_epoch, md.current.last_producer_epoch) == (1, 0)
    refused(Errors.PRODUCER_FENCED, init_producer_id, md, (pid, 7), TIMEOUT, T0 + 3, lambda: next(pids))
    refused(Errors.PRODUCER_FENCED, init_producer_id, md, (pid + 99, 1), TIMEOUT, T0 + 3, lambda: next(pids))


def test_an_exhausted_epoch_rotates_to_a_new_producer_id() -> None:
    md, pids = ready()
    old = md.producer_id
    md.prepare(md.to(S.EMPTY, T0, producer_epoch=EPOCH_EXHAUSTED_AT))
    md.complete(md.pending)  # type: ignore[arg-type]
    written(md, init_producer_id(md, (old, EPOCH_EXHAUSTED_AT), TIMEOUT, T0 + 1, lambda: next(pids)))
    assert md.producer_id != old and md.producer_epoch == 0 and md.current.previous_producer_id == old
    # The producer's retry with the old identity is still recognised (the previous pid, an exhausted epoch).
    written(md, init_producer_id(md, (old, EPOCH_EXHAUSTED_AT), TIMEOUT, T0 + 2, lambda: next(pids)))
    assert md.producer_epoch == 0


def test_init_producer_id_fences_an_open_transaction_and_aborts_it() -> None:
    md = ongoing()
    fence = init_producer_id(md, None, TIMEOUT, T0 + 20, lambda: 0)
    assert isinstance(fence, Fence) and fence.transit.producer_epoch == 1 and md.pending_state is S.PREPARE_EPOCH_FENCE
    abort = begin_fence_abort(md, fence, T0 + 20)
    assert md.producer_epoch == 1 and md.state is S.ONGOING  # the fence epoch holds at once, unwritten
    assert abort.state is S.PREPARE_ABORT and abort.producer_epoch == 1 and abort.partitions == {("t", 0)}
    # The zombie, still at epoch 0, can no longer end or extend its transaction.
    md.abandon(abort)
    refused(Errors.PRODUCER_FENCED, end_transaction, md, md.producer_id, 0, True, T0 + 21)
    refused(Errors.PRODUCER_FENCED, add_partitions, md, md.producer_id, 0, [("t", 1)], T0 + 21)


def test_a_failed_fence_is_not_bumped_twice() -> None:
    md = ongoing()
    abort = begin_fence_abort(md, init_producer_id(md, None, TIMEOUT, T0, lambda: 0), T0)  # type: ignore[arg-type]
    md.abandon(abort)
    md.has_failed_epoch_fence = True  # the coordinator records the failed write
    fence = init_producer_id(md, None, TIMEOUT, T0 + 1, lambda: 0)
    assert isinstance(fence, Fence) and fence.transit.producer_epoch == 1


def test_init_producer_id_waits_for_a_prepared_transaction() -> None:
    md = ongoing()
    written(md, end_transaction(md, md.producer_id, 0, True, T0 + 30))
    refused(Errors.CONCURRENT_TRANSACTIONS, init_producer_id, md, None, TIMEOUT, T0 + 31, lambda: 0)


# -- AddPartitionsToTxn and EndTxn --------------------------------------------------------------------


def test_add_partitions_checks_identity_then_starts_or_extends_the_transaction() -> None:
    md, _ = ready()
    refused(Errors.INVALID_PRODUCER_ID_MAPPING, add_partitions, md, md.producer_id + 1, 0, [("t", 0)], T0)
    refused(Errors.PRODUCER_FENCED, add_partitions, md, md.producer_id, 1, [("t", 0)], T0)
    written(md, add_partitions(md, md.producer_id, 0, [("t", 0)], T0 + 50))
    assert md.state is S.ONGOING and md.current.txn_start_timestamp_ms == T0 + 50  # the timeout runs from here
    assert add_partitions(md, md.producer_id, 0, [("t", 0)], T0 + 60) is None  # nothing new: no write
    written(md, add_partitions(md, md.producer_id, 0, [("u", 3)], T0 + 70))
    assert md.current.partitions == {("t", 0), ("u", 3)} and md.current.txn_start_timestamp_ms == T0 + 50


@pytest.mark.parametrize(("state", "commit", "answer"), [
    (S.PREPARE_COMMIT, True, Errors.CONCURRENT_TRANSACTIONS), (S.PREPARE_COMMIT, False, Errors.INVALID_TXN_STATE),
    (S.PREPARE_ABORT, True, Errors.INVALID_TXN_STATE), (S.PREPARE_ABORT, False, Errors.CONCURRENT_TRANSACTIONS),
    (S.COMPLETE_COMMIT, True, Errors.NONE), (S.COMPLETE_COMMIT, False, Errors.INVALID_TXN_STATE),
    (S.COMPLETE_ABORT, True, Errors.INVALID_TXN_STATE), (S.COMPLETE_ABORT, False, Errors.NONE),
    (S.EMPTY, True, Errors.INVALID_TXN_STATE), (S.EMPTY, False, Errors.INVALID_TXN_STATE),
])
def test_end_transaction_outside_ongoing(state: S, commit: bool, answer: Errors) -> None:
    md = ongoing()
    if state is not S.EMPTY:
        prepared = state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        written(md, end_transaction(md, md.producer_id, 0, prepared, T0 + 1))
        if state.is_complete:
            written(md, complete_transaction(md, T0 + 2))
    else:
        md, _ = ready()
    assert md.state is state
    if answer == Errors.NONE:
        assert end_transaction(md, md.producer_id, 0, commit, T0 + 3) is None  # a retry, answered NONE
    else:
        refused(answer, end_transaction, md, md.producer_id, 0, commit, T0 + 3)


def test_commit_then_markers_complete_it_and_the_next_transaction_starts_fresh() -> None:
    md = ongoing((("t", 0), ("t", 1)))
    prepare = end_transaction(md, md.producer_id, 0, True, T0 + 100)
    assert prepare is not None and prepare.state is S.PREPARE_COMMIT and prepare.partitions == {("t", 0), ("t", 1)}
    written(md, prepare)
    complete = complete_transaction(md, T0 + 101)
    assert complete.state is S.COMPLETE_COMMIT and complete.partitions == frozenset()
    written(md, complete)
    written(md, add_partitions(md, md.producer_id, 0, [("t", 5)], T0 + 200))
    assert md.current.partitions == {("t", 5)} and md.current.txn_start_timestamp_ms == T0 + 200


def test_timeouts_and_id_expiry() -> None:
    md = ongoing()
    start = md.current.txn_start_timestamp_ms
    assert not timed_out(md, start + TIMEOUT) and timed_out(md, start + TIMEOUT + 1)
    assert expire(md, T0 + 10**9, 1000) is None  # an open transaction's id never expires
    written(md, end_transaction(md, md.producer_id, 0, False, T0 + 11))
    written(md, complete_transaction(md, T0 + 12))
    assert expire(md, T0 + 12 + 999, 1000) is None
    dead = expire(md, T0 + 12 + 1000, 1000)
    assert dead is not None and dead.state is S.DEAD and encode_value(dead, 1) is None  # a tombstone


# -- records ------------------------------------------------------------------------------------------


def test_key_is_version_0_and_the_id() -> None:
    assert encode_key("tx-1") == b"\x00\x00\x00\x04tx-1"
    assert decode_key(encode_key("tx-1")) == "tx-1"


@pytest.mark.parametrize("version", [0, 1])
def test_values_round_trip_and_match_kafkas_layout(version: int) -> None:
    md = ongoing((("b", 2), ("a", 1), ("a", 0)))
    value = encode_value(md.current, version)
    assert value is not None and value[:2] == version.to_bytes(2, "big")
    back = decode_value(value)
    assert back == dataclasses.replace(md.current, last_producer_epoch=-1)
    decoded = TransactionLogValue.decode(value, header=True)
    assert [(p.topic, p.partition_ids) for p in decoded.transaction_partitions] == [("a", [0, 1]), ("b", [2])]
    assert decoded.transaction_status == 1


def test_empty_writes_null_partitions_and_a_completed_transaction_an_empty_list() -> None:
    md, _ = ready()
    assert TransactionLogValue.decode(encode_value(md.current, 0), header=True).transaction_partitions is None
    md = ongoing()
    written(md, end_transaction(md, md.producer_id, 0, True, T0 + 1))
    written(md, complete_transaction(md, T0 + 2))
    assert TransactionLogValue.decode(encode_value(md.current, 0), header=True).transaction_partitions == []


def test_a_loaded_id_forgets_its_last_epoch() -> None:
    md, pids = ready()
    written(md, init_producer_id(md, (md.producer_id, 0), TIMEOUT, T0 + 1, lambda: next(pids)))
    assert md.current.last_producer_epoch == 0
    record = decode_value(encode_value(md.current, 1))
    assert record is not None
    loaded = TransactionMetadata.loaded("tx", record)
    assert loaded.current.last_producer_epoch == -1 and loaded.producer_epoch == 1

