"""AddPartitionsToTxn, as a producer sends it (v0-3: one transaction): every partition named must exist and
be writable by the principal before any is added. Partitions that fail get their error (UNKNOWN_TOPIC_OR_PARTITION,
TOPIC_AUTHORIZATION_FAILED) and the rest OPERATION_NOT_ATTEMPTED, as Kafka answers; otherwise the transaction
coordinator's one answer goes to every partition. The batched, verify-only form (v4+) is a broker's request to
the coordinator: not served (transactions v2 is not finalized here)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import AddPartitionsToTxnResponse

from coordinator_server.net.data_plane.txn_answers import coordinator_answer
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors

_Topic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_Part = _Topic.AddPartitionsToTxnPartitionResult


class TransactionPartitions(Protocol):
    """The transaction coordinator's entry (`coordinator_server.txn_runtime.TransactionRuntime`)."""

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Sequence[tuple[str, int]], reply: Callable[[Errors], None]) -> None: ...


class AddPartitionsToTxnHandler:
    def __init__(self, store: TopicStore, transactions: TransactionPartitions | None) -> None:
        self.store = store
        self.transactions = transactions  # None in a cluster, which runs no transaction coordinator

    async def handle_add_partitions_to_txn(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        partitions = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
        errors: dict[tuple[str, int], Errors] = {}
        for topic, index in partitions:
            if not access.topic("WRITE", topic):
                errors[(topic, index)] = Errors.TOPIC_AUTHORIZATION_FAILED
            elif self.store.partition(topic, index) is None:
                errors[(topic, index)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            return _answer(version, {key: errors.get(key, Errors.OPERATION_NOT_ATTEMPTED) for key in partitions})
        if self.transactions is None:
            return _answer(version, dict.fromkeys(partitions, Errors.COORDINATOR_NOT_AVAILABLE))
        coordinator = self.transactions
        error = await coordinator_answer(lambda reply: coordinator.add_partitions(
            req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
            partitions, reply), version)
        return _answer(version, dict.fromkeys(partitions, error))


def _answer(version: int, errors: dict[tuple[str, int], Errors]) -> ApiMessage:
    by_topic: dict[str, list[ApiMessage]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(_Part(partition_index=index, partition_error_code=int(error)))
    return AddPartitionsToTxnResponse[version](
        throttle_time_ms=0, results_by_topic_v3_and_below=[
            _Topic(name=topic, results_by_partition=parts) for topic, parts in by_topic.items()])

