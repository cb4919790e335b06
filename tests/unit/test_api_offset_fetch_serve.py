"""OffsetFetch has one path (net/apis/offset_fetch.py's `serve`): over a real runtime and a real log, with and
without ACLs, its answer to every served version is byte for byte kafka-python's encode of the answer the
generic path gave (kafka-python's decode, the authorization rules, one fetch per group); a shape the parser
does not take (a tagged field, v1-7) is decoded generically into the same request and answered alike; and a
fetch waits behind the group's lock holder."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kafka.protocol.consumer import OffsetFetchRequest

from coordinator_server.config import load_config
from coordinator_server.group.api import (
    CommitPartition,
    OffsetCommitInput,
    OffsetFetchInput,
    OffsetFetchResult,
)
from coordinator_server.net.apis import offset_fetch
from coordinator_server.net.apis.context import ApiContext
from coordinator_server.net.awaiting import as_future
from coordinator_server.runtime import CoordinatorRuntime, open_coordinator_log, shared_timer
from coordinator_server.security.acls import Acl
from coordinator_server.security.authorizer import Access, Authorizer
from protocol.errors import Errors
from protocol.framing import decode_request_body, encode_response, parse_request_header

_G = OffsetFetchRequest.OffsetFetchRequestGroup
_T = _G.OffsetFetchRequestTopics
_OldT = OffsetFetchRequest.OffsetFetchRequestTopic
KNOWN = {"a": 3, "b": 2, "secret": 1}


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[CoordinatorRuntime]:
    config = load_config(["--data-dir", str(tmp_path), "--offsets-partitions", "3", "--fsync", "never"], {})
    rt = await CoordinatorRuntime.open(config, open_coordinator_log(config), shared_timer(asyncio.get_running_loop()))
    try:
        yield rt
    finally:
        await rt.close()


async def commit(rt: CoordinatorRuntime, group: str, offsets: dict[tuple[str, int], int]) -> None:
    result = await as_future(rt.offset_commit, OffsetCommitInput(group, -1, "", None, -1, tuple(
        CommitPartition(t, p, o, 7, f"m{o}") for (t, p), o in offsets.items()), 8))
    assert {r.error for r in result.partitions} == {Errors.NONE}


def payload(version: int, groups: list[tuple[str, dict[str, list[int]] | None]]) -> bytes:
    if version >= 8:
        req = OffsetFetchRequest[version](require_stable=False, groups=[
            _G(group_id=g, member_id=None, member_epoch=-1,
               topics=None if ts is None else [_T(name=t, partition_indexes=ps) for t, ps in ts.items()])
            for g, ts in groups])
    else:
        [(group, ts)] = groups
        req = OffsetFetchRequest[version](group_id=group, require_stable=False, topics=None if ts is None else [
            _OldT(name=t, partition_indexes=ps) for t, ps in ts.items()])
    req.with_header(correlation_id=42, client_id="fast-or-not")
    return bytes(req.encode(header=True, framed=True))[4:]


def api(rt: CoordinatorRuntime, access: Access) -> ApiContext:
    return ApiContext(rt, lambda t, p: p < KNOWN.get(t, 0), access, "/127.0.0.1")


async def generic(rt: CoordinatorRuntime, raw: bytes, access: Access) -> bytes:
    """What the generic path answered: kafka-python's decode, one fetch per group, kafka-python's encode."""
    header = parse_request_header(raw)
    req = offset_fetch.request_of(decode_request_body(header, raw), header.api_version)
    results: list[tuple[OffsetFetchInput, OffsetFetchResult]] = []
    for g in req.groups:
        inp = OffsetFetchInput(g.group_id, g.partitions, req.require_stable, req.api_version, g.member_id,
                               g.member_epoch)
        query, finish = offset_fetch.fetch_query(inp, access)
        results.append((inp, finish(await as_future(rt.offset_fetch, query) if query is not None else None)))
    return encode_response(offset_fetch.offset_fetch_response_message(results, header.api_version),
                           header.correlation_id)


REQUESTS: list[list[tuple[str, dict[str, list[int]] | None]]] = [
    [("g1", {"a": [0, 1, 2], "b": [0]})],
    [("g1", None)],
    [("g1", {"a": [2, 0], "zz": [0]}), ("g2", None), ("never", None), ("never", {"a": [0]})],
    [("g2", {"secret": [0], "b": [1, 0]})],
    [("", None), ("g1", {})],
    [],  # v8+ with no group at all (found by the fuzzer: it once went unanswered)
]


async def test_every_version_and_shape_is_answered_as_the_generic_path_answered(runtime: CoordinatorRuntime) -> None:
    await commit(runtime, "g1", {("a", 0): 5, ("a", 2): 9, ("b", 0): 1, ("secret", 0): 3})
    await commit(runtime, "g2", {("b", 1): 4, ("secret", 0): 8})
    acls = Authorizer([Acl("User:bob", "ALLOW", "DESCRIBE", "GROUP", "LITERAL", "g1"),
                       Acl("User:bob", "ALLOW", "DESCRIBE", "GROUP", "LITERAL", "never"),
                       Acl("User:bob", "ALLOW", "DESCRIBE", "TOPIC", "PREFIXED", "a"),
                       Acl("User:bob", "ALLOW", "DESCRIBE", "TOPIC", "LITERAL", "b")])
    accesses = [Access(None), Access(acls, "User:bob", "127.0.0.1"), Access(acls, "User:eve", "127.0.0.1")]
    for version in range(1, 10):
        # Before v8 one group; before v2 no fetch-all (a null topic list is refused).
        for groups in REQUESTS if version >= 8 else [g for g in REQUESTS if len(g) == 1 and (
                version >= 2 or g[0][1] is not None)]:
            raw = payload(version, groups)
            assert (offset_fetch.parse_offset_fetch(raw) is not None) == (version >= 8)
            shapes = [raw]
            if version >= 6:  # flexible: the same request with a tagged field, which the parser hands back
                shapes.append(raw[:-1] + b"\x01\x05\x01\x00")
                assert offset_fetch.parse_offset_fetch(shapes[-1]) is None
            for shape in shapes:
                for access in accesses:
                    answer = offset_fetch.serve(shape, api(runtime, access))
                    assert isinstance(answer, bytes)  # no lock held: answered in the call, with no future
                    assert answer == await generic(runtime, raw, access), (version, groups, access.principal)


async def test_fetch_waits_behind_the_groups_lock_holder(runtime: CoordinatorRuntime) -> None:
    assert runtime.locks.try_hold("g1")  # a request of g1 holds its lock
    waiting = offset_fetch.serve(payload(8, [("g1", {"a": [0]})]), api(runtime, Access(None)))
    other = offset_fetch.serve(payload(8, [("g2", {"b": [1]})]), api(runtime, Access(None)))
    await asyncio.sleep(0.01)
    assert isinstance(waiting, asyncio.Future) and not waiting.done()  # g1's fetch waits to see the outcome
    assert isinstance(other, bytes)  # g2's is answered at once
    runtime.locks.release("g1")
    assert await waiting == await generic(runtime, payload(8, [("g1", {"a": [0]})]), Access(None))
    assert len(runtime.locks) == 0
