"""OffsetDelete: decode → runtime → encode (OffsetCommit and OffsetFetch are net/apis/'s). The API layer's own
rules, as Kafka's KafkaApis has them: DELETE on the group, READ on each topic (TOPIC_AUTHORIZATION_FAILED in
its entries), partitions of unknown topics answered UNKNOWN_TOPIC_OR_PARTITION without asking the coordinator.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kafka.protocol.consumer import OffsetDeleteResponse

from coordinator_server.group.api import OffsetDeleteInput, OffsetDeleteResult, PartitionResult
from coordinator_server.net.awaiting import as_future
from coordinator_server.security.authorizer import Access
from protocol.errors import Errors

PartitionExists = Callable[[str, int], bool]

_DeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DeletePartition = _DeleteTopic.OffsetDeleteResponsePartition


class OffsetRuntime(Protocol):
    def offset_delete(self, inp: OffsetDeleteInput, on_result: Callable[[OffsetDeleteResult], None],
                      on_failure: Callable[[BaseException], None]) -> None: ...


class OffsetHandlers:
    def __init__(self, runtime: OffsetRuntime, partition_exists: PartitionExists) -> None:
        self.runtime = runtime
        self.partition_exists = partition_exists

    async def offset_delete(self, req: Any, version: int, access: Access) -> Any:
        if not access.group("DELETE", req.group_id):
            return offset_delete_response(req, OffsetDeleteResult(Errors.GROUP_AUTHORIZATION_FAILED, []), [])
        denied = {t.name for t in req.topics if not access.topic("READ", t.name)}
        inp, unknown = offset_delete_input(
            req, lambda topic, index: topic not in denied and self.partition_exists(topic, index))
        result = await as_future(self.runtime.offset_delete, inp)
        unknown = [PartitionResult(r.topic, r.partition, Errors.TOPIC_AUTHORIZATION_FAILED) if r.topic in denied
                   else r for r in unknown]
        return offset_delete_response(req, result, unknown)


def offset_delete_input(req: Any, known: PartitionExists) -> tuple[OffsetDeleteInput, list[PartitionResult]]:
    partitions: list[tuple[str, int]] = []
    unknown: list[PartitionResult] = []
    for topic in req.topics:
        for p in topic.partitions:
            if known(topic.name, p.partition_index):
                partitions.append((topic.name, p.partition_index))
            else:
                unknown.append(PartitionResult(topic.name, p.partition_index, Errors.UNKNOWN_TOPIC_OR_PARTITION))
    return OffsetDeleteInput(req.group_id, tuple(partitions)), unknown


def offset_delete_response(req: Any, result: OffsetDeleteResult, unknown: list[PartitionResult]) -> Any:
    if result.error is not Errors.NONE:
        return OffsetDeleteResponse[0](error_code=int(result.error), throttle_time_ms=0, topics=[])
    by_key = {(r.topic, r.partition): r.error for r in result.partitions + unknown}
    topics = [
        _DeleteTopic(name=t.name, partitions=[
            _DeletePartition(partition_index=p.partition_index, error_code=int(by_key[(t.name, p.partition_index)]))
            for p in t.partitions
        ])
        for t in req.topics
    ]
    return OffsetDeleteResponse[0](error_code=0, throttle_time_ms=0, topics=topics)
