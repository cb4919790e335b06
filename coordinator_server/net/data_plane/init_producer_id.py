"""InitProducerId. Without a transactional id (idempotent producers): a fresh producer id with epoch 0, unique
across the cluster (blocks from ZooKeeper) or from the topic store on one node. With one: the transaction
coordinator's answer (`txn_runtime`), on one node only; a cluster has no transaction coordinator (FindCoordinator
of a transactional id says the same), so it answers COORDINATOR_NOT_AVAILABLE there."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import InitProducerIdResponse

from coordinator_server.net.data_plane.topic_admin import ClusterTopicAdmin
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.store import TopicStore
from coordinator_server.txn.coordinator import InitProducerIdResult
from coordinator_server.txn.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from protocol.errors import Errors, KafkaError

# PRODUCER_FENCED came with v4 (KIP-588): older clients know it as INVALID_PRODUCER_EPOCH.
PRODUCER_FENCED_SINCE = 4


class TransactionalIds(Protocol):
    """The transaction coordinator's entry (`coordinator_server.txn_runtime.TransactionRuntime`)."""

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                         reply: Callable[[InitProducerIdResult], None]) -> None: ...

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Sequence[tuple[str, int]], reply: Callable[[Errors], None]) -> None: ...

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                reply: Callable[[Errors], None]) -> None: ...


class InitProducerIdHandler:
    def __init__(self, store: TopicStore, admin: ClusterTopicAdmin | None,
                 transactions: TransactionalIds | None = None) -> None:
        self.store = store
        self.admin = admin  # None on one node
        self.transactions = transactions  # None in a cluster

    async def handle_init_producer_id(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        # Not authorized here (Kafka wants IDEMPOTENT_WRITE on the cluster or WRITE on some topic, WRITE on the
        # transactional id for one): an id alone grants nothing, every Produce is still checked for WRITE.
        # See docs/security.md.
        # v3+ name the producer's current identity (KIP-360); one half of it without the other is malformed.
        producer_id = getattr(req, "producer_id", NO_PRODUCER_ID) if version >= 3 else NO_PRODUCER_ID
        producer_epoch = getattr(req, "producer_epoch", NO_PRODUCER_EPOCH) if version >= 3 else NO_PRODUCER_EPOCH
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return _answer(version, Errors.INVALID_REQUEST)
        if req.transactional_id is not None:
            expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
            return await self._transactional(req.transactional_id, req.transaction_timeout_ms, expected, version)
        # Idempotent producers always get a fresh id with epoch 0 (Kafka does the same when the
        # transactional id is null, also for a KIP-360 epoch-bump request).
        if self.admin is not None:
            try:
                # Unique across the cluster: blocks come from ZooKeeper, as Kafka's brokers take them.
                producer_id = await self.admin.next_producer_id()
            except KafkaError as e:
                return _answer(version, e.code)
        else:
            producer_id = self.store.next_producer_id()
        return _answer(version, Errors.NONE, producer_id, 0)

    async def _transactional(self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                             version: int) -> ApiMessage:
        if self.transactions is None:
            # A cluster runs no transaction coordinator: retriable, so a client's init_transactions() keeps
            # retrying until its own deadline and then fails.
            return _answer(version, Errors.COORDINATOR_NOT_AVAILABLE)
        if not transactional_id:
            return _answer(version, Errors.INVALID_REQUEST)
        answer: asyncio.Future[InitProducerIdResult] = asyncio.get_running_loop().create_future()

        def reply(result: InitProducerIdResult) -> None:
            if not answer.done():
                answer.set_result(result)

        self.transactions.init_producer_id(transactional_id, timeout_ms, expected, reply)
        result = await answer
        error = result.error
        if error == Errors.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE:
            error = Errors.INVALID_PRODUCER_EPOCH
        return _answer(version, error, result.producer_id, result.producer_epoch)


def _answer(version: int, error: Errors, producer_id: int = NO_PRODUCER_ID,
            producer_epoch: int = NO_PRODUCER_EPOCH) -> ApiMessage:
    return InitProducerIdResponse[version](throttle_time_ms=0, error_code=int(error), producer_id=producer_id,
                                           producer_epoch=producer_epoch)
