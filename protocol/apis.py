"""The API table: which Kafka APIs we serve, at which versions, with which kafka-python message classes.

Only what is in `API_TABLE` is advertised in ApiVersions and dispatched; adding an API is one
`ApiSpec(...)` line here plus its handler in the network shell. The version range is the one *we*
serve, which may be narrower than what kafka-python's schemas know (e.g. Metadata v13 exists in the
schemas but we stop at 12).
"""
from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from protocol.broker_messages import ControlledShutdownRequest, ControlledShutdownResponse
from protocol.consumer_group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    request: type[ApiMessage]
    response: type[ApiMessage]
    min_version: int
    max_version: int

    @property
    def name(self) -> str:
        return str(ApiKey(self.key).name)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def request_header_flexible(self, version: int) -> bool:
        """Request header v2 (tagged fields) iff the request body is flexible at this version.

        Like Kafka's generated `requestHeaderVersion`, this also answers for versions outside our
        range (flexible ranges are open-ended, "N+"), so the header of an unsupported-version
        request can still be read — ApiVersions needs that to answer UNSUPPORTED_VERSION.
        """
        return version >= 0 and bool(self.request.flexible_version_q(version))


def _table(*specs: ApiSpec) -> dict[int, ApiSpec]:
    table: dict[int, ApiSpec] = {}
    for spec in specs:
        # Guard against advertising a version kafka-python cannot decode or encode.
        if spec.key not in (spec.request.API_KEY, spec.response.API_KEY) or spec.request.API_KEY != spec.response.API_KEY:
            raise AssertionError(f"api key mismatch for {spec.name}")
        if spec.max_version > min(spec.request.max_version, spec.response.max_version):
            raise AssertionError(f"{spec.name} v{spec.max_version} is beyond kafka-python's schemas")
        if spec.key in table:
            raise AssertionError(f"duplicate api {spec.name}")
        table[spec.key] = spec
    return table


API_TABLE: dict[int, ApiSpec] = _table(
    ApiSpec(ApiKey.Metadata, MetadataRequest, MetadataResponse, 0, 12),
    ApiSpec(ApiKey.FindCoordinator, FindCoordinatorRequest, FindCoordinatorResponse, 0, 6),
    ApiSpec(ApiKey.JoinGroup, JoinGroupRequest, JoinGroupResponse, 0, 9),
    ApiSpec(ApiKey.Heartbeat, HeartbeatRequest, HeartbeatResponse, 0, 4),
    ApiSpec(ApiKey.LeaveGroup, LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    ApiSpec(ApiKey.SyncGroup, SyncGroupRequest, SyncGroupResponse, 0, 5),
    ApiSpec(ApiKey.ApiVersions, ApiVersionsRequest, ApiVersionsResponse, 0, 4),
    # Committed offsets (OffsetCommit v10 and OffsetFetch v10 name topics by id: not served). OffsetCommit
    # v1 (Sarama's default) is Kafka-stored like v2+; v0 was ZooKeeper-stored in Kafka, so it is not served.
    ApiSpec(ApiKey.OffsetCommit, OffsetCommitRequest, OffsetCommitResponse, 1, 9),
    ApiSpec(ApiKey.OffsetFetch, OffsetFetchRequest, OffsetFetchResponse, 1, 9),
    ApiSpec(ApiKey.OffsetDelete, OffsetDeleteRequest, OffsetDeleteResponse, 0, 0),
    # Group administration (DescribeGroups v6, Kafka 4's: GROUP_ID_NOT_FOUND for a group that is not there).
    ApiSpec(ApiKey.DescribeGroups, DescribeGroupsRequest, DescribeGroupsResponse, 0, 6),
    ApiSpec(ApiKey.ListGroups, ListGroupsRequest, ListGroupsResponse, 0, 5),
    ApiSpec(ApiKey.DeleteGroups, DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    # KIP-848, the consumer rebalance protocol: v1 adds regex subscriptions and client-made member ids.
    ApiSpec(ApiKey.ConsumerGroupHeartbeat, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 1),
    ApiSpec(ApiKey.ConsumerGroupDescribe, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 1),
    # The data plane (coordinator_server.topics), stored as v2 record batches. Produce v0-2 and Fetch v0-3
    # carry the old message formats, converted as Kafka 3.x does (protocol/message_format.py; kafka-go 0.2.1
    # speaks nothing newer). Fetch v13 names topics by id (KIP-516; clients written for Kafka 3.1+ need it);
    # Produce stops before v13, where it does too.
    ApiSpec(ApiKey.Produce, ProduceRequest, ProduceResponse, 0, 9),
    ApiSpec(ApiKey.Fetch, FetchRequest, FetchResponse, 0, 13),
    ApiSpec(ApiKey.ListOffsets, ListOffsetsRequest, ListOffsetsResponse, 0, 7),
    ApiSpec(ApiKey.OffsetForLeaderEpoch, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),
    ApiSpec(ApiKey.InitProducerId, InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    # Transactions v1 (the finalized transaction.version is 0): a producer's AddPartitionsToTxn (v4+ is the
    # brokers' batched verify form) and EndTxn v0-4 (v5 is transactions v2).
    ApiSpec(ApiKey.AddPartitionsToTxn, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
    ApiSpec(ApiKey.EndTxn, EndTxnRequest, EndTxnResponse, 0, 4),
    ApiSpec(ApiKey.CreateTopics, CreateTopicsRequest, CreateTopicsResponse, 2, 7),
    ApiSpec(ApiKey.DeleteTopics, DeleteTopicsRequest, DeleteTopicsResponse, 1, 6),
    ApiSpec(ApiKey.CreatePartitions, CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    # Topic configs (coordinator_server/topics/configs.py), at the versions Kafka 4 serves (DescribeConfigs
    # v0 is gone there).
    ApiSpec(ApiKey.DescribeConfigs, DescribeConfigsRequest, DescribeConfigsResponse, 1, 4),
    ApiSpec(ApiKey.AlterConfigs, AlterConfigsRequest, AlterConfigsResponse, 0, 2),
    ApiSpec(ApiKey.IncrementalAlterConfigs, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1),
    # SASL (coordinator_server.security): served before authentication on SASL listeners, and answered
    # ILLEGAL_SASL_STATE elsewhere, as Kafka does. Handshake v0 is followed by raw tokens.
    # Brokers to the controller (cluster mode; a single node answers NOT_CONTROLLER).
    ApiSpec(ApiKey.ControlledShutdown, ControlledShutdownRequest, ControlledShutdownResponse, 1, 3),
    ApiSpec(ApiKey.SaslHandshake, SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
    ApiSpec(ApiKey.SaslAuthenticate, SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
)


def advertised_ranges() -> list[tuple[int, int, int]]:
    """(api key, min version, max version) for every served API, ordered by api key."""
    return [(s.key, s.min_version, s.max_version) for s in sorted(API_TABLE.values(), key=lambda s: s.key)]
