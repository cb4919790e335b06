"""OffsetCommit, OffsetFetch and OffsetDelete: decode → runtime → encode (kafka-semantics.md §2.0, §2.6, §2.7,
§2.11). The API layer's own rule lives here: partitions of unknown topics are answered
UNKNOWN_TOPIC_OR_PARTITION without asking the coordinator, and when nothing is left the request is
answered at once with no group validation at all, as Kafka's KafkaApis does."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from coordinator_server.group.api import (
    OffsetCommitInput,
    OffsetCommitResult,
    OffsetDeleteInput,
    OffsetDeleteResult,
    OffsetFetchInput,
    OffsetFetchResult,
)
from protocol import offset_messages as om


class OffsetRuntime(Protocol):
    async def offset_commit(self, inp: OffsetCommitInput) -> OffsetCommitResult: ...
    async def offset_fetch(self, inp: OffsetFetchInput) -> OffsetFetchResult: ...
    async def offset_delete(self, inp: OffsetDeleteInput) -> OffsetDeleteResult: ...


class OffsetHandlers:
    def __init__(self, runtime: OffsetRuntime, partition_exists: Callable[[str, int], bool]) -> None:
        self.runtime = runtime
        self.partition_exists = partition_exists

    async def offset_commit(self, req: Any, version: int) -> Any:
        inp, unknown = om.offset_commit_input(req, version, self.partition_exists)
        result = await self.runtime.offset_commit(inp) if inp.partitions else None
        return om.offset_commit_response(req, om.commit_result_partitions(result, unknown), version)

    async def offset_fetch(self, req: Any, version: int) -> Any:
        # No topic-existence check on fetch: unknown topics simply have no committed offset.
        results = [(inp, await self.runtime.offset_fetch(inp)) for inp in om.offset_fetch_inputs(req, version)]
        return om.offset_fetch_response(results, version)

    async def offset_delete(self, req: Any, version: int) -> Any:
        inp, unknown = om.offset_delete_input(req, self.partition_exists)
        result = await self.runtime.offset_delete(inp)
        return om.offset_delete_response(req, result, unknown)
