"""EndTxn: the producer's commit or abort, answered once the coordinator's decision (PrepareCommit or
PrepareAbort) is durable; the markers are written after the answer, as Kafka's coordinator does (the
transaction is complete when they are, and the producer's next request waits for that with
CONCURRENT_TRANSACTIONS). v0-4: transactions v1 (v5, transactions v2, is not served)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import EndTxnResponse

from coordinator_server.security.authorizer import Access
from protocol.errors import Errors

# PRODUCER_FENCED came with v2 here (KIP-588): older clients know it as INVALID_PRODUCER_EPOCH.
PRODUCER_FENCED_SINCE = 2


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
        answer: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
        self.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
                                  _settle(answer))
        error = await answer
        if error == Errors.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE:
            error = Errors.INVALID_PRODUCER_EPOCH
        return _answer(version, error)


def _answer(version: int, error: Errors) -> ApiMessage:
    return EndTxnResponse[version](throttle_time_ms=0, error_code=int(error))


def _settle(answer: asyncio.Future[Errors]) -> Callable[[Errors], None]:
    def reply(error: Errors) -> None:
        if not answer.done():
            answer.set_result(error)
    return reply
