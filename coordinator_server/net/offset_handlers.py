"""OffsetCommit, OffsetFetch and OffsetDelete: decode → runtime → encode. The API layer's own rules live here: authorization first (group, then each topic), then
partitions of unknown topics are answered UNKNOWN_TOPIC_OR_PARTITION without asking the coordinator, and
when nothing is left the request is answered at once with no group validation at all, as Kafka's
KafkaApis does."""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from coordinator_server import metrics
from coordinator_server.group.api import (
    FetchedOffset,
    OffsetCommitInput,
    OffsetCommitResult,
    OffsetDeleteInput,
    OffsetDeleteResult,
    OffsetFetchInput,
    OffsetFetchResult,
    PartitionResult,
)
from coordinator_server.net.awaiting import as_future
from coordinator_server.security.authorizer import Access
from protocol import offset_messages as om
from protocol.errors import Errors
from protocol.offset_commit_wire import OffsetCommitWire, offset_commit_response_frame
from protocol.offset_fetch_wire import FetchedGroupWire, OffsetFetchWire, offset_fetch_response_frame

# C statics for the fast paths' clock and metrics (a module attribute is a dictionary lookup per use).
_perf_counter: Final = time.perf_counter
_observe_request_errors: Final = metrics.observe_request_errors


class OffsetRuntime(Protocol):
    def offset_commit(self, inp: OffsetCommitInput, on_result: Callable[[OffsetCommitResult], None],
                      on_failure: Callable[[BaseException], None]) -> None: ...
    def offset_fetch(self, inp: OffsetFetchInput, on_result: Callable[[OffsetFetchResult], None],
                     on_failure: Callable[[BaseException], None]) -> None: ...
    def offset_delete(self, inp: OffsetDeleteInput, on_result: Callable[[OffsetDeleteResult], None],
                      on_failure: Callable[[BaseException], None]) -> None: ...


class OffsetHandlers:
    def __init__(self, runtime: OffsetRuntime, partition_exists: Callable[[str, int], bool]) -> None:
        self.runtime = runtime
        self.partition_exists = partition_exists

    def _readable(self, req: Any, access: Access) -> tuple[set[str], Callable[[str, int], bool]]:
        """Topics the caller may not READ, and the `known` filter that leaves them to the API layer."""
        denied = {t.name for t in req.topics if not access.topic("READ", t.name)}
        return denied, lambda topic, index: topic not in denied and self.partition_exists(topic, index)

    async def offset_commit(self, req: Any, version: int, access: Access) -> Any:
        if not access.group("READ", req.group_id):
            failed = [PartitionResult(t.name, p.partition_index, Errors.GROUP_AUTHORIZATION_FAILED)
                      for t in req.topics for p in t.partitions]
            return om.offset_commit_response(req, failed, version)
        denied, known = self._readable(req, access)
        inp, unknown = om.offset_commit_input(om.commit_request_of(req, version), known)
        unknown = _denied_as_29(unknown, denied)
        result = await as_future(self.runtime.offset_commit, inp) if inp.partitions else None
        return om.offset_commit_response(req, om.commit_result_partitions(result, unknown), version)

    def offset_commit_nowait(self, req: OffsetCommitWire, access: Access) -> asyncio.Future[bytes]:
        """The fast path's OffsetCommit (protocol/offset_commit_wire.py): the same rules as `offset_commit`,
        answered with the framed response through a future (done at once when nothing waits for the log),
        without a task; queued behind the group's lock when it is taken."""
        reply = _CommitReply(req, asyncio.get_running_loop().create_future())
        if not access.group("READ", req.group_id):
            reply.answer([PartitionResult(t.name, p.partition_index, Errors.GROUP_AUTHORIZATION_FAILED)
                          for t in req.topics for p in t.partitions])
            return reply.future
        if access.authorizer is None:  # no ACLs: every topic readable, no per-topic filter to build
            inp, reply.unknown = om.offset_commit_input(req, self.partition_exists)
        else:
            denied, known = self._readable(req, access)
            inp, unknown = om.offset_commit_input(req, known)
            reply.unknown = _denied_as_29(unknown, denied)
        if not inp.partitions:
            reply.answer(reply.unknown)
        else:
            self.runtime.offset_commit(inp, reply.result, reply.failed)
        return reply.future

    async def offset_fetch(self, req: Any, version: int, access: Access) -> Any:
        # No topic-existence check on fetch: unknown topics simply have no committed offset.
        results = []
        for inp in om.offset_fetch_inputs(req, version):
            query, finish = self._fetch_query(inp, access)
            results.append((inp, finish(await as_future(self.runtime.offset_fetch, query) if query is not None else None)))
        return om.offset_fetch_response(results, version)

    def offset_fetch_now(self, req: OffsetFetchWire, access: Access) -> asyncio.Future[bytes]:
        """The fast path's OffsetFetch (protocol/offset_fetch_wire.py): the same rules as `offset_fetch`,
        answered with the framed response through a future: done at once unless a request of one of the
        groups holds its lock (a commit being written), whose outcome the fetch then waits to see."""
        reply = _FetchReply(req, asyncio.get_running_loop().create_future())
        for i, g in enumerate(req.groups):
            inp = OffsetFetchInput(g.group_id, g.partitions, req.require_stable, req.api_version, g.member_id,
                                   g.member_epoch)
            query, finish = self._fetch_query(inp, access)
            if query is None:
                reply.answer(i, inp, finish(None))
            else:
                self.runtime.offset_fetch(query, functools.partial(_answer_with, reply, i, inp, finish), reply.failed)
        return reply.future

    def _fetch_query(self, inp: OffsetFetchInput, access: Access
                     ) -> tuple[OffsetFetchInput | None, Callable[[OffsetFetchResult | None], OffsetFetchResult]]:
        """What to ask the coordinator for one group (None: nothing, the answer is known), and how its
        result becomes the answer: the authorization rules, shared by the generic and the fast path."""
        if not access.group("DESCRIBE", inp.group_id):
            return None, lambda _res: OffsetFetchResult(Errors.GROUP_AUTHORIZATION_FAILED, [])
        if inp.partitions is None:  # fetch-all: topics the caller may not describe are silently dropped
            if access.authorizer is None:
                return inp, _fetched
            return inp, lambda res: _visible(_fetched(res), access)
        denied = {t for t, _ in inp.partitions if not access.topic("DESCRIBE", t)}
        if not denied:
            return inp, _fetched
        allowed = tuple((t, p) for t, p in inp.partitions if t not in denied)
        return dataclasses.replace(inp, partitions=allowed), lambda res: _with_denied(_fetched(res), inp, denied)

    async def offset_delete(self, req: Any, version: int, access: Access) -> Any:
        if not access.group("DELETE", req.group_id):
            return om.offset_delete_response(req, OffsetDeleteResult(Errors.GROUP_AUTHORIZATION_FAILED, []), [])
        denied, known = self._readable(req, access)
        inp, unknown = om.offset_delete_input(req, known)
        result = await as_future(self.runtime.offset_delete, inp)
        return om.offset_delete_response(req, result, _denied_as_29(unknown, denied))


class _CommitReply:
    """One fast-path OffsetCommit's answer: the framed response once the coordinator's result is in (one
    object instead of a closure per step: this runs per request)."""

    __slots__ = ("future", "req", "started", "unknown")

    def __init__(self, req: OffsetCommitWire, future: asyncio.Future[bytes]) -> None:
        self.req = req
        self.future = future
        self.started = _perf_counter()
        self.unknown: list[PartitionResult] = []

    def result(self, result: OffsetCommitResult) -> None:
        self.answer(om.commit_result_partitions(result, self.unknown))

    def answer(self, results: list[PartitionResult]) -> None:
        if self.future.done():
            return
        errors = {(r.topic, r.partition): int(r.error) for r in results}
        self.future.set_result(offset_commit_response_frame(self.req, errors))
        _observe_request_errors("OffsetCommit", self.req.api_version, _perf_counter() - self.started,
                                errors.values())

    def failed(self, e: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(e)


class _FetchReply:
    """One fast-path OffsetFetch's answer: framed once every group's result is in."""

    __slots__ = ("answers", "future", "missing", "req", "started")

    def __init__(self, req: OffsetFetchWire, future: asyncio.Future[bytes]) -> None:
        self.req = req
        self.future = future
        self.started = _perf_counter()
        self.answers: list[FetchedGroupWire | None] = [None] * len(req.groups)
        self.missing = len(req.groups)

    def answer(self, i: int, inp: OffsetFetchInput, res: OffsetFetchResult) -> None:
        topics = [(name, [(o.partition, o.offset, o.leader_epoch, o.metadata, int(o.error)) for o in offsets])
                  for name, offsets in om.fetched_by_topic(inp, res).items()]
        self.answers[i] = (inp.group_id or "", int(res.error), topics)
        self.missing -= 1
        if self.missing or self.future.done():
            return
        answers = [a for a in self.answers if a is not None]
        codes: list[int] = []
        for _, error, fetched in answers:
            codes.append(error)
            codes.extend(p[4] for _, partitions in fetched for p in partitions)
        self.future.set_result(offset_fetch_response_frame(self.req.correlation_id, answers))
        _observe_request_errors("OffsetFetch", self.req.api_version, _perf_counter() - self.started, codes)

    def failed(self, e: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(e)


def _answer_with(reply: _FetchReply, i: int, inp: OffsetFetchInput,
                 finish: Callable[[OffsetFetchResult | None], OffsetFetchResult], res: OffsetFetchResult) -> None:
    reply.answer(i, inp, finish(res))


def _fetched(res: OffsetFetchResult | None) -> OffsetFetchResult:
    assert res is not None  # asked of the coordinator: it answered
    return res


def _visible(res: OffsetFetchResult, access: Access) -> OffsetFetchResult:
    res.offsets = [o for o in res.offsets if access.topic("DESCRIBE", o.topic)]
    return res


def _with_denied(res: OffsetFetchResult, inp: OffsetFetchInput, denied: set[str]) -> OffsetFetchResult:
    assert inp.partitions is not None
    res.offsets += [FetchedOffset(t, p, -1, -1, "", Errors.TOPIC_AUTHORIZATION_FAILED)
                    for t, p in inp.partitions if t in denied]
    return res


def _denied_as_29(unknown: list[PartitionResult], denied: set[str]) -> list[PartitionResult]:
    return [PartitionResult(r.topic, r.partition, Errors.TOPIC_AUTHORIZATION_FAILED) if r.topic in denied else r
            for r in unknown]
