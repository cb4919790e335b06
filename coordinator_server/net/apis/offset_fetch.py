"""OffsetFetch (api key 9), v1-9: what a consumer asks before it reads each assignment, after every rebalance
and at every start.

Versions (Kafka's OffsetFetchRequest/Response specs): v1 has no fetch-all (a null topic list is read as
empty) and no group-level error (a group's error goes into each requested partition), v2 adds both, v3 the
throttle time, v5 the committed leader epoch, v6 is flexible, v7 RequireStable (KIP-447), v8 batches groups,
v9 names a KIP-848 member and epoch. v8 and v9 are the same on the wire in the response.

Why by hand (docs/decisions.md, "OffsetFetch takes a fast path too"): the generic decode and encode, a task
and the group's lock cost ~80 µs of server CPU for one partition's offset. The parser takes v8-9, what
kafka-python 3 and librdkafka 2.x send, in the shapes they send (no tagged fields, one-byte compact lengths);
anything else (v1-7, a tagged field) is decoded by the generic path (`net/request_decode.py`) into the same
`OffsetFetchWire`, so there is one way: per group DESCRIBE on it and on each topic (`fetch_query`), the
runtime (answered at once unless a commit of the group is being written, whose outcome it then waits to
see), and the encoder of the version: this module's for v8-9, kafka-python's classes below.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from kafka.protocol.consumer import OffsetFetchResponse

from coordinator_server import metrics
from coordinator_server.group.api import FetchedOffset, OffsetFetchInput, OffsetFetchResult
from coordinator_server.net.request_decode import decode_request
from coordinator_server.security.authorizer import Access
from protocol.errors import Errors
from protocol.framing import encode_response, read_plain_request
from protocol.wire_primitives import (
    INT32,
    NOT_TAKEN,
    array_length,
    encode_array_length,
    encode_nullable_string,
    encode_string,
    no_tagged_fields,
    nullable_string,
    string,
    uvarint,
)

from .context import ApiContext

OFFSET_FETCH_API_KEY: Final = 9
MIN_VERSION: Final = 8  # of the parser and the hand encoder; v1-7 are decoded and encoded by kafka-python
MAX_VERSION: Final = 9  # keep equal to API_TABLE's OffsetFetch maximum (a test checks)

_PARTITION_RESULT: Final = struct.Struct(">iqi")  # partition index, committed offset, committed leader epoch
_INT16: Final = struct.Struct(">h")
_perf_counter: Final = time.perf_counter
_observe_request_errors: Final = metrics.observe_request_errors

_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = _FetchTopic.OffsetFetchResponsePartition
_FetchGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FetchGroupTopic = _FetchGroup.OffsetFetchResponseTopics
_FetchGroupPartition = _FetchGroupTopic.OffsetFetchResponsePartitions


class FetchGroupWire(NamedTuple):
    group_id: str
    member_id: str | None  # v9 (KIP-848 members); None before
    member_epoch: int
    # (topic, partition) in request order; None = every committed offset of the group
    partitions: tuple[tuple[str, int], ...] | None


class OffsetFetchWire(NamedTuple):
    correlation_id: int
    client_id: str | None
    api_version: int
    groups: tuple[FetchGroupWire, ...]  # one before v8
    require_stable: bool  # False before v7


# One partition's answer: partition index, committed offset, leader epoch, metadata, error code.
FetchedPartitionWire = tuple[int, int, int, str | None, int]
# One group's answer: group id, error code, and per topic (in answer order) its partitions.
FetchedGroupWire = tuple[str, int, Sequence[tuple[str, Sequence[FetchedPartitionWire]]]]
Finish = Callable[[OffsetFetchResult | None], OffsetFetchResult]


# -- the one way --------------------------------------------------------------------------------------------

def serve(payload: bytes, api: ApiContext) -> bytes | asyncio.Future[bytes]:
    """The framed answer, at once unless a group's lock is taken (then through a future): a consumer's
    fetch of its committed offsets builds no future, no more than Kafka parks one that needs no wait."""
    req = parse_offset_fetch(payload)
    if req is None:
        req = _decoded(payload, api)
    api.note_client_id(req.client_id)
    reply = _FetchReply(req)
    for i, g in enumerate(req.groups):
        inp = OffsetFetchInput(g.group_id, g.partitions, req.require_stable, req.api_version, g.member_id,
                               g.member_epoch)
        query, finish = fetch_query(inp, api.access)
        if query is None:
            reply.answer(i, inp, finish(None))
        else:
            api.runtime.offset_fetch(query, functools.partial(_answer_with, reply, i, inp, finish), reply.failed)
    return reply.now_or_later()


def fetch_query(inp: OffsetFetchInput, access: Access) -> tuple[OffsetFetchInput | None, Finish]:
    """What to ask the coordinator for one group (None: nothing, the answer is known), and how its result
    becomes the answer: the authorization rules. No topic-existence check: unknown topics simply have no
    committed offset."""
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


def _decoded(payload: bytes, api: ApiContext) -> OffsetFetchWire:
    header, req = decode_request(payload, api.note_client_id)
    return request_of(req, header.api_version, header.correlation_id, header.client_id)


def request_of(req: Any, version: int, correlation_id: int = -1, client_id: str | None = None) -> OffsetFetchWire:
    """kafka-python's decoded request as the parser's, each field as that version carries it."""
    require_stable = bool(req.require_stable) if version >= 7 else False
    if version >= 8:
        groups = tuple(FetchGroupWire(g.group_id, g.member_id if version >= 9 else None,
                                      g.member_epoch if version >= 9 else -1, _partitions(g.topics))
                       for g in req.groups)
    else:
        topics = req.topics
        if version < 2 and topics is None:
            topics = []  # v1 has no fetch-all: a null list is read as empty
        groups = (FetchGroupWire(req.group_id, None, -1, _partitions(topics)),)
    return OffsetFetchWire(correlation_id, client_id, version, groups, require_stable)


def _partitions(topics: Any) -> tuple[tuple[str, int], ...] | None:
    if topics is None:
        return None
    return tuple((t.name, p) for t in topics for p in t.partition_indexes)


class _FetchReply:
    """One OffsetFetch's answer: framed once every group's result is in. Handed back as bytes when that
    happened within `serve` (every group answered at once), else through the future made then."""

    __slots__ = ("answers", "error", "frame", "future", "missing", "req", "started")

    def __init__(self, req: OffsetFetchWire) -> None:
        self.req = req
        self.future: asyncio.Future[bytes] | None = None
        self.frame: bytes | None = None
        self.error: BaseException | None = None
        self.started = _perf_counter()
        self.answers: list[tuple[OffsetFetchInput, OffsetFetchResult] | None] = [None] * len(req.groups)
        self.missing = len(req.groups)

    def now_or_later(self) -> bytes | asyncio.Future[bytes]:
        if not self.req.groups and self.error is None:
            self._complete()  # v8+ with no group at all: answered with none, as Kafka answers it
        if self.frame is not None:
            return self.frame
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if self.error is not None:
            future.set_exception(self.error)  # the connection logs it and closes, as for a later failure
        self.future = future
        return future

    def answer(self, i: int, inp: OffsetFetchInput, res: OffsetFetchResult) -> None:
        self.answers[i] = (inp, res)
        self.missing -= 1
        if self.missing or self.error is not None:
            return
        self._complete()

    def _complete(self) -> None:
        results = [a for a in self.answers if a is not None]
        version = self.req.api_version
        if version < MIN_VERSION:
            response = offset_fetch_response_message(results, version)
            self._framed(encode_response(response, self.req.correlation_id))
            metrics.observe_request("OffsetFetch", version, _perf_counter() - self.started, response)
            return
        groups: list[FetchedGroupWire] = []
        codes: list[int] = []
        for inp, res in results:
            topics = [(name, [(o.partition, o.offset, o.leader_epoch, o.metadata, int(o.error)) for o in offsets])
                      for name, offsets in _by_topic(_group_offsets(inp, res)).items()]
            groups.append((inp.group_id or "", int(res.error), topics))
            codes.append(int(res.error))
            codes.extend(p[4] for _, partitions in topics for p in partitions)
        self._framed(offset_fetch_response_frame(self.req.correlation_id, groups))
        _observe_request_errors("OffsetFetch", version, _perf_counter() - self.started, codes)

    def _framed(self, frame: bytes) -> None:
        if self.future is None:
            self.frame = frame
        else:
            self.future.set_result(frame)

    def failed(self, e: BaseException) -> None:
        if self.error is not None or self.frame is not None:
            return
        self.error = e
        if self.future is not None and not self.future.done():
            self.future.set_exception(e)


def _answer_with(reply: _FetchReply, i: int, inp: OffsetFetchInput, finish: Finish, res: OffsetFetchResult) -> None:
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


def _group_offsets(inp: OffsetFetchInput, res: OffsetFetchResult) -> list[FetchedOffset]:
    if res.error is Errors.NONE:
        return res.offsets
    # A group's error stands alone from v2 (no topics beside it, as Kafka answers); v1 has no group-level
    # error, so it goes into each requested partition.
    if inp.api_version < 2 and inp.partitions is not None:
        return [FetchedOffset(t, p, -1, -1, "", res.error) for t, p in inp.partitions]
    return []


def _by_topic(offsets: list[FetchedOffset]) -> dict[str, list[FetchedOffset]]:
    topics: dict[str, list[FetchedOffset]] = {}
    for o in offsets:
        topics.setdefault(o.topic, []).append(o)
    return topics


# -- bytes ----------------------------------------------------------------------------------------------------

def offset_fetch_response_message(results: list[tuple[OffsetFetchInput, OffsetFetchResult]], version: int) -> Any:
    """kafka-python's OffsetFetchResponse at `version`: the encoder of v1-7 (and the reference the hand encoder
    of v8-9 is held to)."""
    if version >= 8:
        groups = [
            _FetchGroup(group_id=inp.group_id, error_code=int(res.error), topics=[
                _FetchGroupTopic(name=name, partitions=[
                    _FetchGroupPartition(partition_index=o.partition, committed_offset=o.offset,
                                         committed_leader_epoch=o.leader_epoch, metadata=o.metadata,
                                         error_code=int(o.error))
                    for o in offsets
                ])
                for name, offsets in _by_topic(_group_offsets(inp, res)).items()
            ])
            for inp, res in results
        ]
        return OffsetFetchResponse[version](throttle_time_ms=0, groups=groups)
    [(inp, res)] = results
    topics = [
        _FetchTopic(name=name, partitions=[
            _FetchPartition(partition_index=o.partition, committed_offset=o.offset,
                            committed_leader_epoch=o.leader_epoch, metadata=o.metadata, error_code=int(o.error))
            for o in offsets
        ])
        for name, offsets in _by_topic(_group_offsets(inp, res)).items()
    ]
    kwargs: dict[str, Any] = {"topics": topics}
    if version >= 2:
        kwargs["error_code"] = int(res.error)
    if version >= 3:
        kwargs["throttle_time_ms"] = 0
    return OffsetFetchResponse[version](**kwargs)


def parse_offset_fetch(payload: bytes) -> OffsetFetchWire | None:
    """The OffsetFetch request in a frame payload, or None when it is not one this parser takes."""
    try:
        return _parse(payload)
    except NOT_TAKEN:
        return None


def _parse(payload: bytes) -> OffsetFetchWire | None:
    start = read_plain_request(payload, OFFSET_FETCH_API_KEY, MIN_VERSION, MAX_VERSION, MIN_VERSION)
    if start is None:
        return None
    version, correlation_id, client_id, pos = start
    n_groups, pos = array_length(payload, pos, True)
    groups = []
    for _ in range(n_groups):
        group_id, pos = string(payload, pos, True)
        member_id, member_epoch = None, -1
        if version >= 9:
            member_id, pos = nullable_string(payload, pos, True)
            (member_epoch,) = INT32.unpack_from(payload, pos)
            pos += 4
        partitions: tuple[tuple[str, int], ...] | None = None
        if payload[pos] == 0:  # a null topic list: every committed offset
            pos += 1
        else:
            n_topics, pos = array_length(payload, pos, True)
            wanted: list[tuple[str, int]] = []
            for _ in range(n_topics):
                name, pos = string(payload, pos, True)
                n_partitions, pos = array_length(payload, pos, True)
                end = pos + 4 * n_partitions
                if end > len(payload):
                    return None
                wanted.extend((name, p) for p in struct.unpack_from(f">{n_partitions}i", payload, pos))
                pos = no_tagged_fields(payload, end)
            partitions = tuple(wanted)
        pos = no_tagged_fields(payload, pos)
        groups.append(FetchGroupWire(group_id, member_id, member_epoch, partitions))
    require_stable = payload[pos]
    if require_stable > 1:
        return None
    pos = no_tagged_fields(payload, pos + 1)
    if pos != len(payload):
        return None
    return OffsetFetchWire(correlation_id, client_id, version, tuple(groups), bool(require_stable))


def offset_fetch_response_frame(correlation_id: int, groups: Sequence[FetchedGroupWire]) -> bytes:
    """The size-prefixed v8/v9 response (the two are the same on the wire), byte for byte what
    kafka-python encodes (throttle time 0)."""
    parts = [INT32.pack(correlation_id), b"\x00", b"\x00\x00\x00\x00", encode_array_length(len(groups), True)]
    pack = _PARTITION_RESULT.pack
    error = _INT16.pack
    for group_id, group_error, topics in groups:
        parts.append(encode_string(group_id, True))
        parts.append(uvarint(len(topics) + 1))
        for name, partitions in topics:
            parts.append(encode_string(name, True))
            parts.append(uvarint(len(partitions) + 1))
            for index, offset, leader_epoch, metadata, code in partitions:
                parts.append(pack(index, offset, leader_epoch))
                parts.append(encode_nullable_string(metadata, True))
                parts.append(error(code))
                parts.append(b"\x00")
            parts.append(b"\x00")
        parts.append(error(group_error))
        parts.append(b"\x00")
    parts.append(b"\x00")
    body = b"".join(parts)
    return INT32.pack(len(body)) + body
