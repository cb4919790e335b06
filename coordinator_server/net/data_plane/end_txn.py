"""EndTxn: the producer's commit or abort, answered once the coordinator's decision (PrepareCommit or
PrepareAbort) is durable; the markers are written after the answer, as Kafka's coordinator does (the
transaction is complete when they are, and the producer's next request waits for that with
CONCURRENT_TRANSACTIONS). v0-4: transactions v1 (v5, transactions v2, is not served)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import EndTxnResponse

from coordinator_server.net.data_plane.txn_answers import coordinator_answer
from coordinator_server.security.authorizer import Access
from protocol.errors import Errors


class TransactionEnds(Protocol):
    """The transaction coordinator's entry (`coordinator_server.txn_runtime.TransactionRuntime`)."""

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                reply: Callable[[Errors], None]) -> None: ...


class EndTxnHandler:
    def __init__(self, transactions: TransactionEnds | None) -> None:
        self.transactions = transactions  # None in a cluster, which runs no transaction coordinator

    async def handle_end_txn(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        if self.transactions is None:
            return _answer(version, Errors.COORDINATOR_NOT_AVAILABLE)
        ends = self.transactions
        return _answer(version, await coordinator_answer(lambda reply: ends.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed, reply), version))


def _answer(version: int, error: Errors) -> ApiMessage:
    return EndTxnResponse[version](throttle_time_ms=0, error_code=int(error))

