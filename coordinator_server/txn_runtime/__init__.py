"""The imperative shell around the transaction coordinator's core (`coordinator_server.txn`): its clock, its
`__transaction_state` log, loading at start-up (runtime.py)."""
from __future__ import annotations

from .runtime import TransactionLog, TransactionRuntime, open_transaction_log

__all__ = ["TransactionLog", "TransactionRuntime", "open_transaction_log"]
