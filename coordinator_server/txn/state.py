"""The states of a transactional id, with the ids `__transaction_state` stores and DescribeTransactions' names.

A transition is allowed only from the states listed for its target; PrepareAbort is also reachable straight
from Empty and the Complete states under transactions v2 (the producer aborts with nothing open, and the
abort then bumps its epoch). Dead is never written as a value: an expired id's record is a tombstone.
"""
from __future__ import annotations

import enum
from typing import Final


class TransactionState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    # Only ever pending: the zombie fence of an open transaction, turned into PrepareAbort at once.
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """As DescribeTransactions and ListTransactions show it."""
        return _NAMES[self]

    @property
    def id_may_expire(self) -> bool:
        """Whether a transactional id resting in this state may expire (transactional.id.expiration.ms)."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @classmethod
    def from_display_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


_NAMES: Final = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME: Final = {name: state for state, name in _NAMES.items()}

_S = TransactionState
_RESTING: Final = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
VALID_PREVIOUS: Final[dict[TransactionState, frozenset[TransactionState]]] = {
    _S.EMPTY: _RESTING,
    _S.ONGOING: _RESTING | {_S.ONGOING},
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: _RESTING,
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
# Transactions v2 aborts from a resting state too (the abort bumps the epoch, with nothing to mark).
PREPARE_ABORT_FROM_RESTING_V2: Final = _RESTING


def may_follow(target: TransactionState, current: TransactionState, transaction_v2: bool = False) -> bool:
    if current in VALID_PREVIOUS[target]:
        return True
    return transaction_v2 and target is _S.PREPARE_ABORT and current in PREPARE_ABORT_FROM_RESTING_V2
