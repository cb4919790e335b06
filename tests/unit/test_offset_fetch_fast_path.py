"""The OffsetFetch fast path (OffsetHandlers.offset_fetch_now) answers byte for byte what the generic path
(kafka-python's decode, the handler as a coroutine, kafka-python's encode) answers, over a real runtime and
a real log, with and without ACLs; and it steps aside while a group's lock is held."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import OffsetFetchRequest

from coordinator_server.config import load_config
from coordinator_server.group.api import CommitPartition, OffsetCommitInput
from coordinator_server.net.awaiting import as_future
from coordinator_server.net.offset_handlers import OffsetHandlers
from coordinator_server.runtime import CoordinatorRuntime
from coordinator_server.security.acls import Acl
from coordinator_server.security.authorizer import Access, Authorizer
from protocol.errors import Errors
from protocol.framing import decode_request_body, encode_response, parse_request_header
from protocol.offset_fetch_wire import parse_offset_fetch

_G = OffsetFetchRequest.OffsetFetchRequestGroup
_T = _G.OffsetFetchRequestTopics
KNOWN = {"a": 3, "b": 2, "secret": 1}


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[CoordinatorRuntime]:
    config = load_config(["--data-dir", str(tmp_path), "--offsets-partitions", "3", "--fsync", "never"], {})
    rt = await CoordinatorRuntime.open(config)
    try:
        yield rt
    finally:
        await rt.close()


async def commit(rt: CoordinatorRuntime, group: str, offsets: dict[tuple[str, int], int]) -> None:
    result = await as_future(rt.offset_commit, OffsetCommitInput(group, -1, "", None, -1, tuple(
        CommitPartition(t, p, o, 7, f"m{o}") for (t, p), o in offsets.items()), 8))
    assert {r.error for r in result.partitions} == {Errors.NONE}


def payload(version: int, groups: list[tuple[str, dict[str, list[int]] | None]]) -> bytes:
    req = OffsetFetchRequest[version](require_stable=False, groups=[
        _G(group_id=g, member_id=None, member_epoch=-1,
           topics=None if ts is None else [_T(name=t, partition_indexes=ps) for t, ps in ts.items()])
        for g, ts in groups])
    req.with_header(correlation_id=42, client_id="fast-or-not")
    return bytes(req.encode(header=True, framed=True))[4:]


async def generic(handlers: OffsetHandlers, raw: bytes, access: Access) -> bytes:
    header = parse_request_header(raw)
    req: Any = decode_request_body(header, raw)
    return encode_response(await handlers.offset_fetch(req, header.api_version, access), header.correlation_id)


REQUESTS: list[list[tuple[str, dict[str, list[int]] | None]]] = [
    [("g1", {"a": [0, 1, 2], "b": [0]})],
    [("g1", None)],
    [("g1", {"a": [2, 0], "zz": [0]}), ("g2", None), ("never", None), ("never", {"a": [0]})],
    [("g2", {"secret": [0], "b": [1, 0]})],
    [("", None), ("g1", {})],
]


async def test_fast_path_answers_what_the_generic_path_answers(runtime: CoordinatorRuntime) -> None:
    await commit(runtime, "g1", {("a", 0): 5, ("a", 2): 9, ("b", 0): 1, ("secret", 0): 3})
    await commit(runtime, "g2", {("b", 1): 4, ("secret", 0): 8})
    handlers = OffsetHandlers(runtime, lambda t, p: p < KNOWN.get(t, 0))
    acls = Authorizer([Acl("User:bob", "ALLOW", "DESCRIBE", "GROUP", "LITERAL", "g1"),
                       Acl("User:bob", "ALLOW", "DESCRIBE", "GROUP", "LITERAL", "never"),
                       Acl("User:bob", "ALLOW", "DESCRIBE", "TOPIC", "PREFIXED", "a"),
                       Acl("User:bob", "ALLOW", "DESCRIBE", "TOPIC", "LITERAL", "b")])
    accesses = [Access(None), Access(acls, "User:bob", "127.0.0.1"), Access(acls, "User:eve", "127.0.0.1")]
    for version in (8, 9):
        for groups in REQUESTS:
            raw = payload(version, groups)
            parsed = parse_offset_fetch(raw)
            assert parsed is not None
            for access in accesses:
                fast = handlers.offset_fetch_now(parsed, access)
                assert fast.done()  # no lock held: answered in the call
                assert fast.result() == await generic(handlers, raw, access), (version, groups, access.principal)


async def test_fetch_waits_behind_the_groups_lock_holder(runtime: CoordinatorRuntime) -> None:
    handlers = OffsetHandlers(runtime, lambda t, p: p < KNOWN.get(t, 0))
    parsed = parse_offset_fetch(payload(8, [("g1", {"a": [0]})]))
    assert parsed is not None
    assert runtime.locks.hold_or_queue("g1", lambda: None) is None  # a request of g1 holds its lock
    waiting = handlers.offset_fetch_now(parsed, Access(None))
    other = handlers.offset_fetch_now(parse_offset_fetch(payload(8, [("g2", {"b": [1]})])), Access(None))
    await asyncio.sleep(0.01)
    assert not waiting.done() and other.done()  # only g1's fetch waits to see the holder's outcome
    runtime.locks.release("g1")
    assert await waiting == await generic(handlers, payload(8, [("g1", {"a": [0]})]), Access(None))
    assert len(runtime.locks) == 0
