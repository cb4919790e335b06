"""Data-plane and topic-admin handlers: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
InitProducerId, CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs — one module per API under net/data_plane/ (the two AlterConfigs share one),
composed here for the request handlers.

They translate kafka-python's decoded messages into calls on the synchronous topic store and back;
authorization (TOPIC_AUTHORIZATION_FAILED per topic, before existence, as Kafka's API layer orders
it) is asked of the connection's `Access`; leadership (who may serve a partition, its high watermark, when
acks=all is satisfied) of `topics.leadership`, which on one node is this node and in a cluster the replica
managers; topic admin in a cluster goes through ZooKeeper (`ClusterTopicAdmin`). The only asyncio here is
waiting: for the group-commit fsync (and in a cluster the ISR) before acknowledging a produce, and for a
DelayedFetch in the "Fetch" purgatory on the runtime's shared timer before answering a long poll.
"""
from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage

from coordinator_server.net.data_plane.add_partitions_to_txn import AddPartitionsToTxnHandler
from coordinator_server.net.data_plane.alter_configs import AlterConfigsHandler
from coordinator_server.net.data_plane.describe_configs import DescribeConfigsHandler
from coordinator_server.net.data_plane.end_txn import EndTxnHandler
from coordinator_server.net.data_plane.fetch import FetchHandler
from coordinator_server.net.data_plane.init_producer_id import InitProducerIdHandler, TransactionalIds
from coordinator_server.net.data_plane.list_offsets import ListOffsetsHandler
from coordinator_server.net.data_plane.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from coordinator_server.net.data_plane.partitions import ReadablePartitions, TimerHost
from coordinator_server.net.data_plane.produce import ProduceHandler
from coordinator_server.net.data_plane.topic_admin import ClusterTopicAdmin, TopicAdminHandlers
from coordinator_server.net.data_plane.topic_configs import TopicConfigs
from coordinator_server.net.offsets_topic import OffsetsTopic
from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.security.authorizer import Access
from coordinator_server.storage.group_commit import GroupCommitWriter
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.leadership import Leadership
from coordinator_server.topics.store import TopicStore

# Each entry point hands back its handler's coroutine as it is (no second coroutine per request).
_Answer = Coroutine[Any, Any, ApiMessage]


class DataHandlers:
    """The data-plane handlers as the request handlers dispatch them (`handle_<api>(req, version, access)`).
    `leadership` is this node (`topics.leadership.SoleLeader`) or, in a cluster, the replica managers;
    `admin` is None on one node, else ZooKeeper's topic admin; `transactions` the transaction coordinator,
    on one node only (None in a cluster)."""

    def __init__(self, store: TopicStore, writer: GroupCommitWriter, runtime: TimerHost, node_id: int,
                 fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], offsets_topic: OffsetsTopic,
                 leadership: Leadership, admin: ClusterTopicAdmin | None,
                 broker_settings: Mapping[str, str] | None = None,
                 transactions: TransactionalIds | None = None) -> None:
        self.admin = admin
        broker = dict(broker_settings or {})
        configs = TopicConfigs(store, admin, broker)
        readable = ReadablePartitions(store, offsets_topic)
        self.produce = ProduceHandler(store, writer, leadership, fetch_purgatory, runtime)
        self.fetch = FetchHandler(store, readable, leadership, fetch_purgatory, runtime)
        self.list_offsets = ListOffsetsHandler(readable, leadership)
        self.offset_for_leader_epoch = OffsetForLeaderEpochHandler(readable, leadership)
        self.init_producer_id = InitProducerIdHandler(store, admin, transactions)
        self.add_partitions_to_txn = AddPartitionsToTxnHandler(store, transactions)
        self.end_txn = EndTxnHandler(transactions)
        self.topic_admin = TopicAdminHandlers(store, admin, node_id, fetch_purgatory, runtime, broker)
        self.describe_configs = DescribeConfigsHandler(configs, node_id)
        self.alter_configs = AlterConfigsHandler(configs, node_id)

    def handle_produce(self, req: ApiMessage, version: int, access: Access) -> Coroutine[Any, Any, ApiMessage | None]:
        return self.produce.handle_produce(req, version, access)

    def handle_fetch(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.fetch.handle_fetch(req, version, access)

    def handle_list_offsets(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.list_offsets.handle_list_offsets(req, version, access)

    def handle_offset_for_leader_epoch(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.offset_for_leader_epoch.handle_offset_for_leader_epoch(req, version, access)

    def handle_init_producer_id(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.init_producer_id.handle_init_producer_id(req, version, access)

    def handle_add_partitions_to_txn(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.add_partitions_to_txn.handle_add_partitions_to_txn(req, version, access)

    def handle_end_txn(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.end_txn.handle_end_txn(req, version, access)

    def handle_create_topics(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.topic_admin.handle_create_topics(req, version, access)

    def handle_delete_topics(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.topic_admin.handle_delete_topics(req, version, access)

    def handle_create_partitions(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.topic_admin.handle_create_partitions(req, version, access)

    def handle_describe_configs(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.describe_configs.handle_describe_configs(req, version, access)

    def handle_alter_configs(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.alter_configs.handle_alter_configs(req, version, access)

    def handle_incremental_alter_configs(self, req: ApiMessage, version: int, access: Access) -> _Answer:
        return self.alter_configs.handle_incremental_alter_configs(req, version, access)
