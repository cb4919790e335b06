"""OffsetCommit (1-9), OffsetFetch (1-9) and OffsetDelete (0): decoded requests to core inputs and core
results to responses of the request's version. No I/O.

Kafka's API layer answers partitions of unknown topics itself (UNKNOWN_TOPIC_OR_PARTITION) and sends
only the rest to the coordinator; `known` is that filter.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import (
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
)

from coordinator_server.group.api import (
    CommitPartition,
    FetchedOffset,
    OffsetCommitInput,
    OffsetCommitResult,
    OffsetDeleteInput,
    OffsetDeleteResult,
    OffsetFetchInput,
    OffsetFetchResult,
    PartitionResult,
)
from protocol.errors import Errors
from protocol.offset_commit_wire import CommitPartitionWire, CommitTopicWire, OffsetCommitWire

PartitionExists = Callable[[str, int], bool]

_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = _CommitTopic.OffsetCommitResponsePartition
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = _FetchTopic.OffsetFetchResponsePartition
_FetchGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FetchGroupTopic = _FetchGroup.OffsetFetchResponseTopics
_FetchGroupPartition = _FetchGroupTopic.OffsetFetchResponsePartitions
_DeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DeletePartition = _DeleteTopic.OffsetDeleteResponsePartition


# -- OffsetCommit ----------------------------------------------------------------------------------------


def commit_request_of(req: Any, version: int) -> OffsetCommitWire:
    """kafka-python's decoded OffsetCommit request (the generic path's) as the value the fast parser builds
    (protocol/offset_commit_wire.py), each field as that version carries it: one typed `offset_commit_input`
    serves both paths, reading a compiled class's fields directly instead of an `Any`'s by name."""
    return OffsetCommitWire(
        -1, None, version, req.group_id, req.generation_id_or_member_epoch, req.member_id or "",
        req.group_instance_id if version >= 7 else None,
        req.retention_time_ms if 2 <= version <= 4 else -1,
        tuple(CommitTopicWire(t.name, tuple(
            CommitPartitionWire(p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata,
                                p.commit_timestamp if version == 1 else -1)
            for p in t.partitions)) for t in req.topics))


def offset_commit_input(req: OffsetCommitWire, known: PartitionExists) -> tuple[OffsetCommitInput, list[PartitionResult]]:
    """The coordinator's input (known partitions only) and the API layer's own answers for the rest."""
    partitions: list[CommitPartition] = []
    unknown: list[PartitionResult] = []
    for topic in req.topics:
        for p in topic.partitions:
            if not known(topic.name, p.partition_index):
                unknown.append(PartitionResult(topic.name, p.partition_index, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions.append(CommitPartition(topic.name, p.partition_index, p.committed_offset,
                                              p.committed_leader_epoch, p.committed_metadata, p.commit_timestamp))
    inp = OffsetCommitInput(
        group_id=req.group_id,
        generation_id=req.generation_id_or_member_epoch,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        retention_time_ms=req.retention_time_ms,
        partitions=tuple(partitions),
        api_version=req.api_version,
    )
    return inp, unknown


def offset_commit_response(req: Any, results: list[PartitionResult], version: int) -> Any:
    """Per partition, in request order (duplicates answered alike)."""
    by_key = {(r.topic, r.partition): r.error for r in results}
    topics = [
        _CommitTopic(name=t.name, partitions=[
            _CommitPartition(partition_index=p.partition_index, error_code=int(by_key[(t.name, p.partition_index)]))
            for p in t.partitions
        ])
        for t in req.topics
    ]
    return OffsetCommitResponse[version](throttle_time_ms=0, topics=topics)


def commit_result_partitions(result: OffsetCommitResult | None, unknown: list[PartitionResult]) -> list[PartitionResult]:
    return (result.partitions if result is not None else []) + unknown


# -- OffsetFetch -----------------------------------------------------------------------------------------


def offset_fetch_inputs(req: Any, version: int) -> list[OffsetFetchInput]:
    """One input per group: v8+ batches several groups in one request."""
    require_stable = bool(req.require_stable) if version >= 7 else False
    if version >= 9:
        return [
            OffsetFetchInput(g.group_id, _partitions(g.topics), require_stable, version, g.member_id, g.member_epoch)
            for g in req.groups
        ]
    if version >= 8:
        return [
            OffsetFetchInput(g.group_id, _partitions(g.topics), require_stable, version) for g in req.groups
        ]
    topics = req.topics
    if version < 2 and topics is None:
        topics = []  # v1 has no fetch-all: a null list is read as empty
    return [OffsetFetchInput(req.group_id, _partitions(topics), require_stable, version)]


def _partitions(topics: Any) -> tuple[tuple[str, int], ...] | None:
    if topics is None:
        return None
    return tuple((t.name, p) for t in topics for p in t.partition_indexes)


def offset_fetch_response(results: list[tuple[OffsetFetchInput, OffsetFetchResult]], version: int) -> Any:
    if version >= 8:
        groups = [
            _FetchGroup(group_id=inp.group_id, error_code=int(res.error), topics=[
                _FetchGroupTopic(name=name, partitions=[
                    _FetchGroupPartition(partition_index=o.partition, committed_offset=o.offset,
                                         committed_leader_epoch=o.leader_epoch, metadata=o.metadata,
                                         error_code=int(o.error))
                    for o in offsets
                ])
                for name, offsets in _by_topic(_fetched(inp, res)).items()
            ])
            for inp, res in results
        ]
        return OffsetFetchResponse[version](throttle_time_ms=0, groups=groups)
    [(inp, res)] = results
    fetched = _fetched(inp, res)
    topics = [
        _FetchTopic(name=name, partitions=[
            _FetchPartition(partition_index=o.partition, committed_offset=o.offset,
                            committed_leader_epoch=o.leader_epoch, metadata=o.metadata, error_code=int(o.error))
            for o in offsets
        ])
        for name, offsets in _by_topic(fetched).items()
    ]
    kwargs: dict[str, Any] = {"topics": topics}
    if version >= 2:
        kwargs["error_code"] = int(res.error)
    if version >= 3:
        kwargs["throttle_time_ms"] = 0
    return OffsetFetchResponse[version](**kwargs)


def fetched_by_topic(inp: OffsetFetchInput, res: OffsetFetchResult) -> dict[str, list[FetchedOffset]]:
    """One group's answer per topic, in answer order: what the v8+ response carries for it."""
    return _by_topic(_fetched(inp, res))


def _fetched(inp: OffsetFetchInput, res: OffsetFetchResult) -> list[FetchedOffset]:
    if res.error is Errors.NONE:
        return res.offsets
    # A group's error stands alone from v2 (no topics beside it, as Kafka answers); v0-1 have no group-level
    # error, so it goes into each requested partition.
    if inp.api_version < 2 and inp.partitions is not None:
        return [FetchedOffset(t, p, -1, -1, "", res.error) for t, p in inp.partitions]
    return []


def _by_topic(offsets: list[FetchedOffset]) -> dict[str, list[FetchedOffset]]:
    topics: dict[str, list[FetchedOffset]] = {}
    for o in offsets:
        topics.setdefault(o.topic, []).append(o)
    return topics


# -- OffsetDelete ----------------------------------------------------------------------------------------


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
