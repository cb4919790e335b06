"""AddOffsetsToTxn: the producer is about to commit a group's offsets in its transaction, so the group's
`__consumer_offsets` partition (the one its coordinator writes to, by the group id's hash) joins the
transaction, and gets the transaction's marker when it ends. READ on the group is needed, as Kafka checks
it (GROUP_AUTHORIZATION_FAILED); then the coordinator's answer is AddPartitionsToTxn's."""
from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import AddOffsetsToTxnResponse

from coordinator_server.net.data_plane.add_partitions_to_txn import TransactionPartitions
from coordinator_server.net.data_plane.txn_answers import coordinator_answer
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.registry import OFFSETS_TOPIC
from protocol.errors import Errors


class AddOffsetsToTxnHandler:
    def __init__(self, offsets_partition_for: Callable[[str], int], transactions: TransactionPartitions | None
                 ) -> None:
        self.offsets_partition_for = offsets_partition_for
        self.transactions = transactions  # None in a cluster, which runs no transaction coordinator

    async def handle_add_offsets_to_txn(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        if not access.group("READ", req.group_id):
            return _answer(version, Errors.GROUP_AUTHORIZATION_FAILED)
        if self.transactions is None:
            return _answer(version, Errors.COORDINATOR_NOT_AVAILABLE)
        coordinator = self.transactions
        partition = (OFFSETS_TOPIC, self.offsets_partition_for(req.group_id))
        return _answer(version, await coordinator_answer(lambda reply: coordinator.add_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch, [partition], reply), version))


def _answer(version: int, error: Errors) -> ApiMessage:
    return AddOffsetsToTxnResponse[version](throttle_time_ms=0, error_code=int(error))
