"""What each transactional API asks of an id's metadata, in Kafka's order of checks.

Each function checks, then prepares the transition to write (or refuses with a `TxnRefusal`, or answers
without writing: None). The API layer's own checks (authorization, the request's shape, which node
coordinates the id, loading) come before these; the KIP-588 downgrade of PRODUCER_FENCED to
INVALID_PRODUCER_EPOCH for old request versions comes after, in the API layer too.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.errors import Errors

from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnRefusal,
    TxnTransit,
    epoch_exhausted,
)
from .state import TransactionState

S = TransactionState


@dataclass(frozen=True, slots=True)
class Fence:
    """InitProducerId found a transaction open: its epoch is bumped (never handed out) and it is aborted by
    the coordinator (`begin_fence_abort`); the client is answered CONCURRENT_TRANSACTIONS and retries."""

    transit: TxnTransit


def init_producer_id(md: TransactionMetadata, expected: tuple[int, int] | None, timeout_ms: int, now_ms: int,
                     new_producer_id: Callable[[], int]) -> TxnTransit | Fence:
    """A producer (re)starting with its transactional id; `expected` is the (producer id, epoch) it had
    (KIP-360), None when it has none. The transit goes to Empty with the producer's identity to answer."""
    if md.pending is not None:
        raise TxnRefusal(Errors.CONCURRENT_TRANSACTIONS)
    current = md.current
    if expected is not None and not _expected_identity_valid(current, expected):
        raise TxnRefusal(Errors.PRODUCER_FENCED)
    if current.state.is_prepare:
        raise TxnRefusal(Errors.CONCURRENT_TRANSACTIONS)
    if current.state is S.ONGOING:
        return prepare_fence(md, now_ms)  # a zombie's transaction
    fresh = {"txn_timeout_ms": timeout_ms, "partitions": frozenset(), "txn_start_timestamp_ms": -1}
    if epoch_exhausted(current.producer_epoch) and (expected is None or expected[1] == current.producer_epoch):
        # No epoch left: a new producer id at epoch 0; the old one is kept to recognise the producer's retry.
        return md.prepare(md.to(
            S.EMPTY, now_ms, producer_id=new_producer_id(), previous_producer_id=current.producer_id,
            producer_epoch=0,
            last_producer_epoch=current.producer_epoch if expected is not None else NO_PRODUCER_EPOCH, **fresh))
    epoch, last = _next_epoch(current, None if expected is None else expected[1])
    return md.prepare(md.to(S.EMPTY, now_ms, producer_epoch=epoch, last_producer_epoch=last, **fresh))


def prepare_fence(md: TransactionMetadata, now_ms: int) -> Fence:
    """Bump the epoch past an open transaction (once, if an earlier fence's abort could not be written), so
    that its producer can neither extend nor end it; the coordinator then aborts it."""
    current = md.current
    epoch = current.producer_epoch if md.has_failed_epoch_fence else current.producer_epoch + 1
    return Fence(md.prepare(md.to(S.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=epoch,
                                  last_producer_epoch=NO_PRODUCER_EPOCH)))


def _expected_identity_valid(current: TxnTransit, expected: tuple[int, int]) -> bool:
    producer_id, epoch = expected
    return (current.producer_epoch == NO_PRODUCER_EPOCH or producer_id == current.producer_id
            or (producer_id == current.previous_producer_id and epoch_exhausted(epoch)))


def _next_epoch(current: TxnTransit, expected_epoch: int | None) -> tuple[int, int]:
    """(epoch to hand out, last epoch to remember), KIP-360: a retry of the last bump gets the same epoch."""
    if expected_epoch is None:
        return current.producer_epoch + 1, NO_PRODUCER_EPOCH
    if current.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == current.producer_epoch:
        return current.producer_epoch + 1, current.producer_epoch
    if expected_epoch == current.last_producer_epoch:
        return current.producer_epoch, current.last_producer_epoch
    raise TxnRefusal(Errors.PRODUCER_FENCED)


def begin_fence_abort(md: TransactionMetadata, fence: Fence, now_ms: int) -> TxnTransit:
    """The coordinator's own abort of the fenced transaction: the fence epoch takes effect at once (it is
    never written as a state of its own), and PrepareAbort is prepared at that epoch."""
    md.apply_fence(fence.transit)
    return md.prepare(md.to(S.PREPARE_ABORT, now_ms))


def add_partitions(md: TransactionMetadata, producer_id: int, producer_epoch: int,
                   partitions: Iterable[tuple[str, int]], now_ms: int) -> TxnTransit | None:
    """AddPartitionsToTxn (and AddOffsetsToTxn's one `__consumer_offsets` partition). None: every partition
    is in the open transaction already, answered NONE without a write."""
    if md.pending is not None:
        raise TxnRefusal(Errors.CONCURRENT_TRANSACTIONS)
    current = md.current
    if producer_id != current.producer_id:
        raise TxnRefusal(Errors.INVALID_PRODUCER_ID_MAPPING)
    if producer_epoch != current.producer_epoch:
        raise TxnRefusal(Errors.PRODUCER_FENCED)
    if current.state.is_prepare:
        raise TxnRefusal(Errors.CONCURRENT_TRANSACTIONS)
    wanted = frozenset(partitions)
    if current.state is S.ONGOING:
        if wanted <= current.partitions:
            return None
        return md.prepare(md.to(S.ONGOING, now_ms, partitions=current.partitions | wanted))
    # A new transaction: its timeout runs from now.
    return md.prepare(md.to(S.ONGOING, now_ms, partitions=wanted, txn_start_timestamp_ms=now_ms))


# EndTxn from a state other than Ongoing: (commit's answer, abort's answer); NONE is a retry answered as such.
_END_OUTSIDE_ONGOING = {
    S.PREPARE_COMMIT: (Errors.CONCURRENT_TRANSACTIONS, Errors.INVALID_TXN_STATE),
    S.PREPARE_ABORT: (Errors.INVALID_TXN_STATE, Errors.CONCURRENT_TRANSACTIONS),
    S.COMPLETE_COMMIT: (Errors.NONE, Errors.INVALID_TXN_STATE),
    S.COMPLETE_ABORT: (Errors.INVALID_TXN_STATE, Errors.NONE),
    S.EMPTY: (Errors.INVALID_TXN_STATE, Errors.INVALID_TXN_STATE),
}


def end_transaction(md: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool,
                    now_ms: int) -> TxnTransit | None:
    """A client's EndTxn under transactions v1: PrepareCommit or PrepareAbort to write; None when it retries
    an end already made (answered NONE)."""
    current = md.current
    if producer_id != current.producer_id:
        raise TxnRefusal(Errors.INVALID_PRODUCER_ID_MAPPING)
    if producer_epoch != current.producer_epoch:
        raise TxnRefusal(Errors.PRODUCER_FENCED)
    if md.pending is not None and md.pending_state is not S.PREPARE_EPOCH_FENCE:
        raise TxnRefusal(Errors.CONCURRENT_TRANSACTIONS)
    if current.state is S.ONGOING:
        return md.prepare(md.to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms))
    answer = _END_OUTSIDE_ONGOING[current.state][0 if commit else 1]
    if answer != Errors.NONE:
        raise TxnRefusal(answer)
    return None


def complete_transaction(md: TransactionMetadata, now_ms: int) -> TxnTransit:
    """Every marker of a prepared transaction is written: CompleteCommit or CompleteAbort, no partitions."""
    state = md.state
    if not state.is_prepare:
        raise TxnRefusal(Errors.INVALID_TXN_STATE)
    target = S.COMPLETE_COMMIT if state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return md.prepare(md.to(target, now_ms, partitions=frozenset()))


def timed_out(md: TransactionMetadata, now_ms: int) -> bool:
    """An open transaction past its timeout, which the coordinator's sweep fences and aborts."""
    current = md.current
    return (current.state is S.ONGOING and md.pending is None
            and current.txn_start_timestamp_ms + current.txn_timeout_ms < now_ms)


def expire(md: TransactionMetadata, now_ms: int, expiration_ms: int) -> TxnTransit | None:
    """transactional.id.expiration.ms: a resting id unused for that long is removed (Dead, written as a
    tombstone). None: it stays."""
    current = md.current
    if (not current.state.id_may_expire or md.pending is not None
            or current.txn_last_update_timestamp_ms > now_ms - expiration_ms):
        return None
    return md.prepare(md.to(S.DEAD, now_ms))


__all__ = ["NO_PRODUCER_ID", "Fence", "add_partitions", "begin_fence_abort", "complete_transaction",
           "end_transaction", "expire", "init_producer_id", "prepare_fence", "timed_out"]
