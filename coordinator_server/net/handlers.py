"""Request handlers of the generic path: one `handle_<api>` per entry of protocol.apis.API_TABLE that
net/apis/ does not serve (net/apis/table.py: the classic group APIs, OffsetCommit and OffsetFetch).

The shell's handlers frame nothing and decide nothing about groups: ApiVersions, Metadata and
FindCoordinator are answered here (this node is the whole cluster); the group APIs among them are
translated and delegated to the runtime, which owns all group validation and error precedence.
"""
from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorResponse, MetadataResponse

from coordinator_server.net import sasl_gate
from coordinator_server.net.admin_handlers import AdminHandlers, AdminRuntime
from coordinator_server.net.apis.context import ApiRuntime
from coordinator_server.net.apis.table import SERVED_API_KEYS
from coordinator_server.net.cluster_metadata import ClusterMetadata
from coordinator_server.net.consumer_group_handlers import ConsumerGroupHandlers, ConsumerGroupRuntime
from coordinator_server.net.data_handlers import DataHandlers
from coordinator_server.net.offset_handlers import OffsetHandlers, OffsetRuntime
from coordinator_server.net.replica_handlers import ReplicaHandlers, replica_id_of
from coordinator_server.security.authorizer import ALLOW_ALL, Access
from coordinator_server.topics.registry import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    Topic,
    is_valid_topic_name,
)
from coordinator_server.topics.store import TopicStore
from protocol.apis import API_TABLE
from protocol.broker_messages import ControlledShutdownResponse
from protocol.errors import Errors, KafkaError
from protocol.framing import EncodedResponse, ParsedHeader, api_versions_body

log = structlog.get_logger("coordinator_server.net")

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
_Broker = MetadataResponse.MetadataResponseBroker


class GroupRuntime(ApiRuntime, OffsetRuntime, AdminRuntime, ConsumerGroupRuntime, Protocol):
    """The slice of coordinator_server.runtime.CoordinatorRuntime the handlers and net/apis/ use."""

    def partition_for(self, group_id: str) -> int: ...


@dataclass(slots=True)
class BrokerEndpoint:
    """How clients reach this node. `port` is filled in once bound (it differs from config for --port 0)."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: ParsedHeader
    client_host: str  # Java InetAddress.toString form, e.g. "/127.0.0.1"
    access: Access = ALLOW_ALL  # the connection's principal and what it may do
    endpoint: BrokerEndpoint | None = None  # the listener's advertised address (None: the default one)

    @property
    def version(self) -> int:
        return self.header.api_version


# None: send no response at all (Produce with acks=0, whose client reads none).
Handler = Callable[[ApiMessage, RequestContext], Awaitable[ApiMessage | EncodedResponse | None]]


class RequestHandlers:
    def __init__(
        self,
        runtime: GroupRuntime,
        topics: TopicStore,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        data: DataHandlers,
        auto_create_topics: bool = True,
        cluster: ClusterMetadata | None = None,
        replicas: ReplicaHandlers | None = None,
        controlled_shutdown: Callable[[int], Awaitable[list[tuple[str, int]]]] | None = None,
        transactions_served: bool = False,
    ) -> None:
        self.runtime = runtime
        self.topics = topics
        self.data = data
        self.auto_create_topics = auto_create_topics
        self.endpoint = endpoint
        self.cluster_id = cluster_id
        # In a cluster: who leads what (ZooKeeper's view) and the broker-to-broker requests; None on one node.
        self.cluster = cluster
        self.replicas = replicas
        # The controller's side of ControlledShutdown: broker id -> the partitions it still leads.
        self.controlled_shutdown = controlled_shutdown
        # Whether this node runs the transaction coordinator (one node: it leads every `__transaction_state`
        # partition, so it coordinates every transactional id).
        self.transactions_served = transactions_served
        # Kafka's API layer answers commits to unknown topics or partitions itself.
        offsets = self._offsets = OffsetHandlers(
            runtime, lambda topic, index: topics.partition(topic, index) is not None)
        admin = AdminHandlers(runtime)
        self.consumer_groups = ConsumerGroupHandlers(runtime)
        self._handlers: dict[int, Handler] = {
            ApiKey.ApiVersions: self.handle_api_versions,
            ApiKey.Metadata: self.handle_metadata,
            ApiKey.FindCoordinator: self.handle_find_coordinator,
            ApiKey.Produce: _versioned(data.handle_produce),
            ApiKey.Fetch: self.handle_fetch,
            ApiKey.ListOffsets: self.handle_list_offsets,
            ApiKey.OffsetForLeaderEpoch: self.handle_offset_for_leader_epoch,
            ApiKey.InitProducerId: _versioned(data.handle_init_producer_id),
            ApiKey.AddPartitionsToTxn: _versioned(data.handle_add_partitions_to_txn),
            ApiKey.EndTxn: _versioned(data.handle_end_txn),
            ApiKey.CreateTopics: _versioned(data.handle_create_topics),
            ApiKey.DeleteTopics: _versioned(data.handle_delete_topics),
            ApiKey.CreatePartitions: _versioned(data.handle_create_partitions),
            ApiKey.DescribeConfigs: _versioned(data.handle_describe_configs),
            ApiKey.AlterConfigs: _versioned(data.handle_alter_configs),
            ApiKey.IncrementalAlterConfigs: _versioned(data.handle_incremental_alter_configs),
            ApiKey.OffsetDelete: _versioned(offsets.offset_delete),
            ApiKey.DescribeGroups: _versioned(admin.describe_groups),
            ApiKey.ListGroups: _versioned(admin.list_groups),
            ApiKey.DeleteGroups: _versioned(admin.delete_groups),
            ApiKey.ConsumerGroupHeartbeat: self.handle_consumer_group_heartbeat,
            ApiKey.ConsumerGroupDescribe: _versioned(self.consumer_groups.describe),
            ApiKey.ControlledShutdown: self.handle_controlled_shutdown,
            ApiKey.SaslHandshake: self.handle_sasl_after_authentication,
            ApiKey.SaslAuthenticate: self.handle_sasl_after_authentication,
        }
        # Advertising an api without a handler would turn every such request into a closed socket; one with
        # two would have two request paths. Each advertised api is net/apis/'s or this table's.
        missing = set(API_TABLE) - set(self._handlers) - SERVED_API_KEYS
        both = set(self._handlers) & SERVED_API_KEYS
        if missing or both:
            raise AssertionError(f"advertised api keys without a handler {sorted(missing)}, with two {sorted(both)}")

    def partition_exists(self, topic: str, index: int) -> bool:
        """Kafka's API layer answers commits to unknown topics or partitions itself (net/apis/offset_commit.py)."""
        return self.topics.partition(topic, index) is not None

    async def handle(self, request: ApiMessage, ctx: RequestContext) -> ApiMessage | EncodedResponse | None:
        return await self._handlers[ctx.header.api_key](request, ctx)

    # ------------------------------------------------------------------------------- ApiVersions

    async def handle_api_versions(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        if ctx.version >= 3:
            # Accepted as sent; Kafka only uses these for client metrics.
            structlog.contextvars.bind_contextvars(
                client_software=f"{req.client_software_name}/{req.client_software_version}"
            )
        return api_versions_body(ctx.version)

    async def handle_sasl_after_authentication(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        # Reached only when authenticated, or on a listener without SASL: KafkaApis answers ILLEGAL_SASL_STATE.
        return sasl_gate.after_authentication(ctx.header.api_key, ctx.version)

    # ------------------------------------- Fetch, OffsetForLeaderEpoch and ListOffsets (data or replica)

    async def handle_fetch(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage | None:
        if self.replicas is not None and replica_id_of(req, ctx.version) >= 0:
            return await self.replicas.handle_fetch(req, ctx.version, ctx.access)
        return await self.data.handle_fetch(req, ctx.version, ctx.access)

    async def handle_offset_for_leader_epoch(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage | None:
        if self.replicas is not None and ctx.version >= 3 and req.replica_id >= 0:
            return await self.replicas.handle_offset_for_leader_epoch(req, ctx.version, ctx.access)
        return await self.data.handle_offset_for_leader_epoch(req, ctx.version, ctx.access)

    async def handle_list_offsets(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        response = await self.data.handle_list_offsets(req, ctx.version, ctx.access)
        if self.replicas is not None:
            # In a cluster `__consumer_offsets` is the replica manager's: its leaders answer for it (with the
            # high watermark), a non-leader says NOT_LEADER_OR_FOLLOWER; other topics stay the data handlers'.
            response.topics = [
                self.replicas.list_offsets_topic(t, ctx.version, req.replica_id, ctx.access)
                if t.name == OFFSETS_TOPIC else answered
                for t, answered in zip(req.topics, response.topics, strict=True)]
        return response

    # ------------------------------------------------------------------------- ControlledShutdown

    async def handle_controlled_shutdown(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        """Kafka's ZooKeeper-mode controller: move the broker's leadership away and say what it still leads."""
        # Built from its JSON schema at import (protocol/broker_messages.py), so not indexable to mypy.
        response: Any = ControlledShutdownResponse[ctx.version]  # type: ignore[misc]
        if not ctx.access.cluster("CLUSTER_ACTION"):
            return response(
                error_code=int(Errors.CLUSTER_AUTHORIZATION_FAILED), remaining_partitions=[])
        if (self.controlled_shutdown is None or self.cluster is None
                or self.cluster.controller_id() != self.endpoint.node_id):
            return response(error_code=int(Errors.NOT_CONTROLLER), remaining_partitions=[])
        remaining = await self.controlled_shutdown(req.broker_id)
        return response(error_code=0, remaining_partitions=[
            ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining])

    # ---------------------------------------------------------------------------------- Metadata

    async def handle_metadata(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        version = ctx.version
        # v0: an empty list means all topics; v1+: null means all and empty means none.
        all_topics = req.topics is None or (version == 0 and not req.topics)
        access = ctx.access
        if all_topics:
            # Kafka lists only the topics the caller may describe when it asks for all of them.
            topics = [self._topic_metadata(t, version) for t in self.topics.all() if access.topic("DESCRIBE", t.name)]
        else:
            auto_create = self.auto_create_topics and (bool(req.allow_auto_topic_creation) if version >= 4 else True)
            topics = await self._requested_topics(req.topics, version, auto_create, access)
        ep = ctx.endpoint or self.endpoint
        if self.cluster is not None:
            brokers = [_Broker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                       for b in self.cluster.brokers()]
            controller_id = self.cluster.controller_id()
        else:
            brokers = [_Broker(node_id=ep.node_id, host=ep.host, port=ep.port, rack=None)]
            controller_id = ep.node_id  # the only broker is also the controller
        return MetadataResponse[version](
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.cluster_id,
            controller_id=controller_id,
            topics=topics,
            authorized_operations=None,  # INT32_MIN: not requested / not computed
        )

    async def _requested_topics(self, requested: list[ApiMessage], version: int, auto_create: bool,
                                access: Access = ALLOW_ALL) -> list[object]:
        out: list[object] = []
        seen: set[object] = set()
        # A request that names any topic by id is answered by ids alone, as Kafka answers it: the Java client
        # asks by id with the name left at its default, the empty string, which must not be read as a name.
        by_id = version >= 10 and any(_is_topic_id(entry.topic_id) for entry in requested)
        for entry in requested:
            name: str | None = entry.name
            topic_id: uuid.UUID | None = entry.topic_id if version >= 10 else None
            if by_id:
                if not _is_topic_id(topic_id):
                    continue
                name = None
            ident = name if name is not None else topic_id
            if ident in seen:  # Kafka answers each distinct topic once
                continue
            seen.add(ident)
            if name is None:
                topic = self.topics.get_by_id(topic_id) if topic_id is not None else None
                if topic is None:
                    # Response topic names are nullable only from v12.
                    out.append(_topic_error(None if version >= 12 else "", Errors.UNKNOWN_TOPIC_ID, topic_id))
                elif not access.topic("DESCRIBE", topic.name):
                    out.append(_topic_error(None if version >= 12 else "", Errors.TOPIC_AUTHORIZATION_FAILED, topic_id))
                else:
                    out.append(self._topic_metadata(topic, version))
                continue
            topic = self.topics.get(name)
            if not access.topic("DESCRIBE", name):
                out.append(_topic_error(name, Errors.TOPIC_AUTHORIZATION_FAILED))
            elif topic is not None:
                out.append(self._topic_metadata(topic, version))
            elif not is_valid_topic_name(name):
                out.append(_topic_error(name, Errors.INVALID_TOPIC_EXCEPTION))
            elif name == TRANSACTION_STATE_TOPIC:
                # The transaction coordinator's log, not a topic: never auto-created (docs/transactions.md).
                out.append(_topic_error(name, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            elif auto_create and not (access.cluster("CREATE") or access.topic("CREATE", name)):
                out.append(_topic_error(name, Errors.TOPIC_AUTHORIZATION_FAILED))
            elif auto_create and self.data.admin is not None:
                # In a cluster through ZooKeeper; answered once this node's view has the leaders.
                try:
                    await self.data.admin.create_topic(name, -1, -1, False)
                    log.info("topic_auto_created", topic=name)
                except KafkaError as e:
                    if e.code != Errors.TOPIC_ALREADY_EXISTS:
                        out.append(_topic_error(name, e.code))
                        continue
                topic = self.topics.get(name)
                out.append(self._topic_metadata(topic, version) if topic is not None
                           else _topic_error(name, Errors.LEADER_NOT_AVAILABLE))
            elif auto_create:
                # Created synchronously, so unlike Kafka we can answer with the topic at once
                # instead of LEADER_NOT_AVAILABLE-then-retry.
                topic = self.topics.get_or_create(name)
                log.info("topic_auto_created", topic=name, partitions=topic.partitions)
                out.append(self._topic_metadata(topic, version))
            else:
                out.append(_topic_error(name, Errors.UNKNOWN_TOPIC_OR_PARTITION))
        return out

    def _topic_metadata(self, topic: Topic, version: int) -> object:
        node = self.endpoint.node_id
        if self.cluster is not None:
            return self._cluster_topic_metadata(topic)
        return _Topic(
            error_code=0,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.is_internal,
            partitions=[
                _Partition(
                    error_code=0,
                    partition_index=i,
                    leader_id=node,
                    leader_epoch=0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    offline_replicas=[],
                )
                for i in range(topic.partitions)
            ],
            authorized_operations=None,
        )

    def _cluster_topic_metadata(self, topic: Topic) -> object:
        """A topic as the cluster has it: each partition's leader, epoch, replicas and ISR."""
        assert self.cluster is not None
        live = {b.node_id for b in self.cluster.brokers()}
        partitions = []
        for i in range(topic.partitions):
            lead = self.cluster.topic_partition(topic.name, i)
            if lead is None:
                return _topic_error(topic.name, Errors.LEADER_NOT_AVAILABLE, topic.topic_id,
                                    internal=topic.is_internal)
            partitions.append(_Partition(
                error_code=int(Errors.NONE if lead.leader >= 0 else Errors.LEADER_NOT_AVAILABLE),
                partition_index=i, leader_id=lead.leader, leader_epoch=lead.leader_epoch,
                replica_nodes=list(lead.replicas), isr_nodes=list(lead.isr),
                offline_replicas=[r for r in lead.replicas if r not in live]))
        return _Topic(error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
                      partitions=partitions, authorized_operations=None)

    def _coordinator_of(self, group_id: str) -> tuple[Errors, BrokerEndpoint | None]:
        """In a cluster, the group's coordinator is the leader of its `__consumer_offsets` partition."""
        assert self.cluster is not None
        lead = self.cluster.offsets_partition(self.runtime.partition_for(group_id))
        if lead is None or lead.leader < 0:
            # KIP-115: not created until enough brokers are alive; or the partition has no leader now.
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        broker = self.cluster.broker(lead.leader)
        if broker is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        return Errors.NONE, BrokerEndpoint(broker.node_id, broker.host, broker.port)

    # --------------------------------------------------------------------------- FindCoordinator

    async def handle_find_coordinator(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        version = ctx.version
        key_type = req.key_type if version >= 1 else CoordinatorType.GROUP
        error = _coordinator_error(key_type, version, self.transactions_served)
        ep = ctx.endpoint or self.endpoint

        def locate(key: str) -> tuple[Errors, BrokerEndpoint | None]:
            # Kafka checks DESCRIBE on the group before answering where its coordinator is (transactional
            # ids are not authorized here: docs/security.md).
            if error == Errors.NONE and key_type == CoordinatorType.GROUP and not ctx.access.group("DESCRIBE", key):
                return Errors.GROUP_AUTHORIZATION_FAILED, None
            if error != Errors.NONE:
                return error, None
            if self.cluster is not None and key_type == CoordinatorType.GROUP:
                return self._coordinator_of(key)
            return Errors.NONE, ep

        if version >= 4:
            return FindCoordinatorResponse[version](
                throttle_time_ms=0,
                coordinators=[
                    FindCoordinatorResponse.Coordinator(
                        key=key,
                        node_id=where.node_id if where is not None else -1,
                        host=where.host if where is not None else "",
                        port=where.port if where is not None else -1,
                        error_code=int(err),
                        # Kafka: an empty message for a key it answers without error.
                        error_message="" if err == Errors.NONE else err.message,
                    )
                    for key in req.coordinator_keys
                    for err, where in (locate(key),)
                ],
            )
        error, where = locate(req.key)
        if where is not None:
            # Kafka names the error in v1-3 even when there is none.
            node_id, host, port, message = where.node_id, where.host, where.port, "NONE"
        else:
            node_id, host, port, message = -1, "", -1, error.message
        return FindCoordinatorResponse[version](
            throttle_time_ms=0,
            error_code=int(error),
            error_message=message,
            node_id=node_id,
            host=host,
            port=port,
        )

    # ------------------------------------------------------------------------------ consumer groups

    async def handle_consumer_group_heartbeat(self, req: ApiMessage, ctx: RequestContext) -> ApiMessage:
        return await self.consumer_groups.heartbeat(req, ctx.version, ctx.access, ctx.header.client_id or "",
                                                    ctx.client_host)


def _versioned(call: Callable[[ApiMessage, int, Access], Awaitable[ApiMessage | None]]) -> Handler:
    async def handler(req: ApiMessage, ctx: RequestContext) -> ApiMessage | None:
        return await call(req, ctx.version, ctx.access)

    return handler


def _coordinator_error(key_type: int, version: int, transactions_served: bool) -> Errors:
    """GROUP keys: this node (or in a cluster the leader of the group's partition). TRANSACTION keys: this
    node when it runs the transaction coordinator (one node leads every `__transaction_state` partition, so
    the id's partition is this node's too), else the retriable COORDINATOR_NOT_AVAILABLE, as for SHARE keys
    (we run no share coordinator; SHARE exists only from v6); anything else is INVALID_REQUEST."""
    if key_type == CoordinatorType.GROUP or (key_type == CoordinatorType.TRANSACTION and transactions_served):
        return Errors.NONE
    if key_type == CoordinatorType.TRANSACTION or (key_type == CoordinatorType.SHARE and version >= 6):
        return Errors.COORDINATOR_NOT_AVAILABLE
    return Errors.INVALID_REQUEST


def _is_topic_id(topic_id: uuid.UUID | None) -> bool:
    """A real topic id: neither absent nor the all-zero UUID a topic named by name carries."""
    return topic_id is not None and topic_id.int != 0


def _topic_error(name: str | None, error: int, topic_id: uuid.UUID | None = None, internal: bool = False) -> object:
    return _Topic(
        error_code=int(error),
        name=name,
        topic_id=topic_id,
        is_internal=internal,
        partitions=[],
        authorized_operations=None,
    )
