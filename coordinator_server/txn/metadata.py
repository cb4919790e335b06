"""One transactional id's metadata and how it changes: prepare, write, complete.

Theory of operation. Every change is made in three steps. `prepare` checks that the target state may follow
the current one and that no other change is pending, and returns a `TxnTransit`: the record's value, the
metadata as it will be. The caller writes it to `__transaction_state`; only once that write is durable does
`complete` apply it (after the caller has re-checked that this node still coordinates the partition at the
same coordinator epoch); a failed write `abandon`s it. While a change is pending the id answers
CONCURRENT_TRANSACTIONS, which is what serializes one id's requests. A refusal is a `TxnRefusal` carrying
Kafka's error code; a transition that the rules above should have refused before asking is a bug
(`IllegalTransition`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from protocol.errors import Errors

from .state import TransactionState, may_follow

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
# An epoch at or above this is exhausted: 32767 stays free for one more fence.
EPOCH_EXHAUSTED_AT: Final = 32766


class TxnRefusal(Exception):
    def __init__(self, error: Errors) -> None:
        super().__init__(error.name)
        self.error = error


class IllegalTransition(Exception):
    """A transition the API rules should never have asked for: a bug, not a client's mistake."""


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= EPOCH_EXHAUSTED_AT


Partitions = frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The metadata as a transition will leave it: exactly what its `__transaction_state` record holds
    (but `last_producer_epoch`, which the log does not keep: a reload sets it to -1)."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: Partitions
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    client_transaction_version: int = 0


class TransactionMetadata:
    """Mutable, owned by the coordinator core; changed only by `complete` (and by `load`)."""

    __slots__ = ("_current", "has_failed_epoch_fence", "pending", "transactional_id")

    def __init__(self, transactional_id: str, current: TxnTransit) -> None:
        self.transactional_id = transactional_id
        self._current = current
        self.pending: TxnTransit | None = None
        # A fence whose abort could not be written: the retry must not bump the epoch again.
        self.has_failed_epoch_fence = False

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TransactionMetadata:
        """An id seen for the first time: a fresh producer id, no epoch yet, Empty (nothing written)."""
        return cls(transactional_id, TxnTransit(producer_id, NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                                                NO_PRODUCER_EPOCH, timeout_ms, TransactionState.EMPTY,
                                                frozenset(), -1, now_ms))

    @classmethod
    def loaded(cls, transactional_id: str, record: TxnTransit) -> TransactionMetadata:
        """As read back from the log: the last epoch is not stored."""
        return cls(transactional_id, replace(record, last_producer_epoch=NO_PRODUCER_EPOCH))

    # -- reading --------------------------------------------------------------------------------------

    @property
    def current(self) -> TxnTransit:
        return self._current

    @property
    def state(self) -> TransactionState:
        return self._current.state

    @property
    def producer_id(self) -> int:
        return self._current.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._current.producer_epoch

    @property
    def pending_state(self) -> TransactionState | None:
        return None if self.pending is None else self.pending.state

    # -- the three steps ------------------------------------------------------------------------------

    def prepare(self, transit: TxnTransit, transaction_v2: bool = False) -> TxnTransit:
        if self.pending is not None:
            raise TxnRefusal(Errors.CONCURRENT_TRANSACTIONS)
        if not may_follow(transit.state, self.state, transaction_v2):
            raise IllegalTransition(f"{self.transactional_id}: {self.state.display_name} -> "
                                    f"{transit.state.display_name}")
        self.pending = transit
        return transit

    def complete(self, transit: TxnTransit) -> None:
        """Its record is durable (and the coordinator epoch re-checked): the transit becomes the metadata."""
        if self.pending is not transit:
            raise IllegalTransition(f"{self.transactional_id}: completing a transition that is not pending")
        self._current = transit
        self.pending = None

    def abandon(self, transit: TxnTransit) -> None:
        """Its write failed: the id is free for the next request, unchanged."""
        if self.pending is transit:
            self.pending = None

    def apply_fence(self, fence: TxnTransit) -> None:
        """The zombie fence: its bumped epoch takes effect in memory at once, the transaction still Ongoing;
        what gets written is the abort that follows (prepared by the caller next)."""
        if self.pending is not fence or fence.state is not TransactionState.PREPARE_EPOCH_FENCE:
            raise IllegalTransition(f"{self.transactional_id}: no epoch fence pending")
        self._current = replace(self._current, producer_epoch=fence.producer_epoch,
                                last_producer_epoch=fence.last_producer_epoch)
        self.pending = None

    # -- transitions, as the APIs ask for them ---------------------------------------------------------

    def to(self, state: TransactionState, now_ms: int, **changes: object) -> TxnTransit:
        """The current metadata moved to `state` at `now_ms`, with `changes` (TxnTransit's field names)."""
        return replace(self._current, state=state, txn_last_update_timestamp_ms=now_ms, **changes)  # type: ignore[arg-type]
