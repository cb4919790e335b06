"""Requests that replicas answer: a follower's Fetch (replica id = its broker id) and its
OffsetForLeaderEpoch, for any topic, and anyone's ListOffsets of `__consumer_offsets`, answered by the topic's
replica manager (coordinator_server.replication).

Kafka authorizes the first two with CLUSTER_ACTION on the cluster (brokers' own principal); a consumer's
fetch of the same topic (replica id -1) goes to the data handlers instead. ListOffsets needs DESCRIBE on the
topic, as for any other; in a cluster the partition's leader answers it with its high watermark (what an
operator watches during a failover: `coordinator-server cluster status`).
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse

from coordinator_server.net.data_plane.list_offsets import (
    CONSUMER_REPLICA_ID,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from coordinator_server.replication.replica_manager import OffsetsView
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.registry import OFFSETS_TOPIC
from protocol.errors import Errors

_FTopic = FetchResponse.FetchableTopicResponse
_FPart = _FTopic.PartitionData
_ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EPart = _ETopic.EpochEndOffset
_LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_LPart = _LTopic.ListOffsetsPartitionResponse



class Replicas(Protocol):
    def replica_read(self, replica_id: int, partition: int, fetch_offset: int, current_leader_epoch: int,
                     max_bytes: int) -> tuple[Errors, bytes, int, int]: ...
    async def wait_for_append(self, partitions: list[int], max_wait_ms: int) -> None: ...
    def offsets_view(self, partition: int, current_leader_epoch: int) -> tuple[Errors, OffsetsView | None]: ...
    def offset_for_leader_epoch(self, partition: int, current_leader_epoch: int,
                                epoch: int) -> tuple[Errors, int, int]: ...


def replica_id_of(req: ApiMessage, version: int) -> int:
    """The fetching broker's id, -1 for a consumer (v15+ moved it into ReplicaState)."""
    if version >= 15:
        state = getattr(req, "replica_state", None)
        return state.replica_id if state is not None else -1
    return getattr(req, "replica_id", -1)


def list_offset_answer(view: OffsetsView, timestamp: int, replica_id: int) -> tuple[Errors, int, int]:
    """(error, offset, leader epoch) for one partition of ListOffsets, as Kafka's Partition answers it.

    LATEST is the high watermark for a client (replica id -1; with no transactions in this log the last
    stable offset is the same, so both isolation levels get it) and the log end offset for a broker or a
    debugging tool. The log keeps no time index, so a lookup by time is refused as Kafka refuses one on a
    log whose format has no timestamps."""
    if timestamp == LATEST_TIMESTAMP:
        offset = view.high_watermark if replica_id == CONSUMER_REPLICA_ID else view.log_end_offset
        return Errors.NONE, offset, view.leader_epoch
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return Errors.NONE, view.log_start_offset, -1
    return Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, -1, -1


class ReplicaHandlers:
    def __init__(self, managers: Mapping[str, Replicas]) -> None:
        self.managers = managers  # topic -> its replica manager (the cluster node's, kept current)

    @property
    def replicas(self) -> Replicas:
        return self.managers[OFFSETS_TOPIC]

    async def handle_fetch(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        replica_id = replica_id_of(req, version)
        allowed = access.cluster("CLUSTER_ACTION")
        wanted = [(t.topic, p) for t in req.topics for p in t.partitions]
        response, total = self._read(replica_id, wanted, req.max_bytes, version, allowed)
        if allowed and total == 0 and req.max_wait_ms > 0:
            by_topic: dict[str, list[int]] = {}
            for topic, p in wanted:
                by_topic.setdefault(topic, []).append(p.partition)
            waits = [asyncio.ensure_future(manager.wait_for_append(partitions, req.max_wait_ms))
                     for topic, partitions in by_topic.items() if (manager := self.managers.get(topic)) is not None]
            if waits:
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
            response, total = self._read(replica_id, wanted, req.max_bytes, version, allowed)
        return response

    def _read(self, replica_id: int, wanted: list[tuple[str, ApiMessage]], max_bytes: int, version: int,
              allowed: bool) -> tuple[ApiMessage, int]:
        remaining = max(0, max_bytes)
        total = 0
        by_topic: dict[str, list[object]] = {}
        for topic, p in wanted:
            records = b""
            hw = lso = -1
            manager = self.managers.get(topic)
            if not allowed:
                error = Errors.CLUSTER_AUTHORIZATION_FAILED
            elif manager is None:
                error = Errors.UNKNOWN_TOPIC_OR_PARTITION  # not a topic of the cluster (as this node sees it)
            else:
                error, records, hw, lso = manager.replica_read(
                    replica_id, p.partition, p.fetch_offset, p.current_leader_epoch if version >= 9 else -1,
                    min(p.partition_max_bytes, remaining) if total else p.partition_max_bytes)
                remaining -= len(records)
                total += len(records)
            by_topic.setdefault(topic, []).append(_FPart(
                partition_index=p.partition, error_code=int(error), high_watermark=hw, last_stable_offset=hw,
                log_start_offset=lso, aborted_transactions=None if version >= 4 else [],
                preferred_read_replica=-1, records=records))
        response = FetchResponse[version](
            throttle_time_ms=0, error_code=0, session_id=0,
            responses=[_FTopic(topic=name, partitions=parts) for name, parts in by_topic.items()])
        return response, total

    async def handle_offset_for_leader_epoch(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        allowed = access.cluster("CLUSTER_ACTION")
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                manager = self.managers.get(t.topic)
                if not allowed:
                    error, epoch, end = Errors.CLUSTER_AUTHORIZATION_FAILED, -1, -1
                elif manager is None:
                    error, epoch, end = Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
                else:
                    error, epoch, end = manager.offset_for_leader_epoch(
                        p.partition, p.current_leader_epoch, p.leader_epoch)
                parts.append(_EPart(error_code=int(error), partition=p.partition, leader_epoch=epoch,
                                    end_offset=end))
            topics.append(_ETopic(topic=t.topic, partitions=parts))
        return OffsetForLeaderEpochResponse[version](throttle_time_ms=0, topics=topics)

    def list_offsets_topic(self, topic: ApiMessage, version: int, replica_id: int, access: Access) -> ApiMessage:
        """ListOffsets of `__consumer_offsets` (one request topic): each partition answered by its leader."""
        parts = []
        for p in topic.partitions:
            if not access.topic("DESCRIBE", topic.name):
                error, offset, epoch = Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1
            else:
                error, view = self.replicas.offsets_view(p.partition_index,
                                                         p.current_leader_epoch if version >= 4 else -1)
                error, offset, epoch = (list_offset_answer(view, p.timestamp, replica_id) if view is not None
                                        else (error, -1, -1))
            parts.append(_LPart(partition_index=p.partition_index, error_code=int(error), timestamp=-1,
                                offset=offset, leader_epoch=epoch))
        return _LTopic(name=topic.name, partitions=parts)
