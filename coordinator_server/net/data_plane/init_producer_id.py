"""InitProducerId for idempotent producers: a fresh producer id with epoch 0, unique across the cluster
(blocks from ZooKeeper) or from the topic store on one node. Transactional ids have no coordinator here."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import InitProducerIdResponse

from coordinator_server.net.data_plane.topic_admin import ClusterTopicAdmin
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors, KafkaError


class InitProducerIdHandler:
    def __init__(self, store: TopicStore, admin: ClusterTopicAdmin | None) -> None:
        self.store = store
        self.admin = admin  # None on one node

    async def handle_init_producer_id(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        # Not authorized here (Kafka wants IDEMPOTENT_WRITE on the cluster or WRITE on some topic): an id
        # alone grants nothing, every Produce is still checked for WRITE. See docs/security.md.
        if req.transactional_id is not None:
            # No transaction coordinator here (FindCoordinator(TRANSACTION) says the same): retriable, so
            # kafka-python's init_transactions() keeps retrying until its max_block_ms and then raises.
            return InitProducerIdResponse[version](throttle_time_ms=0, error_code=int(Errors.COORDINATOR_NOT_AVAILABLE),
                                                   producer_id=-1, producer_epoch=-1)
        # Idempotent producers always get a fresh id with epoch 0 (Kafka does the same when the
        # transactional id is null, also for a KIP-360 epoch-bump request).
        if self.admin is not None:
            try:
                # Unique across the cluster: blocks come from ZooKeeper, as Kafka's brokers take them.
                producer_id = await self.admin.next_producer_id()
            except KafkaError as e:
                return InitProducerIdResponse[version](throttle_time_ms=0, error_code=int(e.code),
                                                       producer_id=-1, producer_epoch=-1)
        else:
            producer_id = self.store.next_producer_id()
        return InitProducerIdResponse[version](throttle_time_ms=0, error_code=0, producer_id=producer_id,
                                               producer_epoch=0)
