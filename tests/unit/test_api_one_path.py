"""Each API of net/apis/ has one request path: a shape its hand parser does not take (a tagged field, a
version outside the parser's range, a compact length over one byte) is decoded generically into the same
request, reaches the runtime as the same input, and is answered byte for byte as kafka-python encodes the
expected response; a frame the generic decode refuses closes the connection."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
)

from coordinator_server.group.api import (
    HeartbeatInput,
    JoinGroupInput,
    JoinGroupMember,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    LeaveMemberResult,
    OffsetCommitInput,
    OffsetCommitResult,
    PartitionResult,
    SyncGroupInput,
    SyncGroupResult,
)
from coordinator_server.net.apis import heartbeat, join_group, leave_group, offset_commit, sync_group
from coordinator_server.net.apis.context import ApiContext
from coordinator_server.net.request_decode import CloseConnection
from coordinator_server.security.authorizer import Access
from protocol.errors import Errors
from protocol.framing import encode_response
from tests.unit import kafka_reference as ref

TAGGED = b"\x01\x05\x01\x00"  # one tagged field (tag 5, one byte): what the hand parsers hand back


class Runtime:
    """Answers every call at once with a canned result and keeps the inputs it was given."""

    def __init__(self) -> None:
        self.inputs: list[object] = []
        self.join = JoinGroupResult(Errors.NONE, 3, "consumer", "range", "m1", "m1",
                                    [JoinGroupMember("m1", "i1", b"sub")])
        self.sync = SyncGroupResult(Errors.NONE, "consumer", "range", b"assigned")

    def _answer(self, inp: object, result: object, on_result: Callable[[Any], None]) -> None:
        self.inputs.append(inp)
        on_result(result)

    def heartbeat(self, inp: HeartbeatInput) -> Errors:
        self.inputs.append(inp)
        return Errors.REBALANCE_IN_PROGRESS

    def join_group(self, inp: JoinGroupInput, on_result: Callable[[JoinGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None:
        self._answer(inp, self.join, on_result)

    def sync_group(self, inp: SyncGroupInput, on_result: Callable[[SyncGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None:
        self._answer(inp, self.sync, on_result)

    def leave_group(self, inp: LeaveGroupInput, on_result: Callable[[LeaveGroupResult], None],
                    on_failure: Callable[[BaseException], None]) -> None:
        self._answer(inp, LeaveGroupResult(Errors.NONE, [
            LeaveMemberResult(m.member_id, m.group_instance_id, Errors.UNKNOWN_MEMBER_ID) for m in inp.members]),
            on_result)

    def offset_commit(self, inp: OffsetCommitInput, on_result: Callable[[OffsetCommitResult], None],
                      on_failure: Callable[[BaseException], None]) -> None:
        self._answer(inp, OffsetCommitResult([PartitionResult(p.topic, p.partition, Errors.NONE)
                                              for p in inp.partitions]), on_result)

    def offset_fetch(self, *args: object) -> None:
        raise AssertionError("not asked here")


def frame(req: Any, correlation_id: int = 7, client_id: str | None = "c") -> bytes:
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))[4:]


def kafka_frame(response: Any, correlation_id: int = 7) -> bytes:
    return encode_response(response, correlation_id)


async def answered(serve: Callable[[bytes, ApiContext], Any], payload: bytes, api: ApiContext) -> bytes:
    answer = serve(payload, api)
    return answer if isinstance(answer, bytes) else await asyncio.wait_for(answer, 1)


def context(runtime: Runtime) -> ApiContext:
    return ApiContext(runtime, lambda topic, index: topic != "unknown", Access(None), "/10.0.0.1")  # type: ignore[arg-type]


async def both_shapes(serve: Callable[[bytes, ApiContext], Any], parse: Callable[[bytes], Any] | None,
                      payload: bytes, unusual: bytes) -> tuple[bytes, list[object]]:
    """The answer to the plain shape and to the unusual one (asserted equal, as are the runtime's inputs)."""
    if parse is not None:
        assert parse(payload) is not None and parse(unusual) is None
    plain_rt, unusual_rt = Runtime(), Runtime()
    plain = await answered(serve, payload, context(plain_rt))
    assert await answered(serve, unusual, context(unusual_rt)) == plain
    assert unusual_rt.inputs == plain_rt.inputs
    return plain, plain_rt.inputs


async def test_heartbeat_with_a_tagged_field() -> None:
    payload = frame(HeartbeatRequest[4](group_id="g", generation_id=2, member_id="m", group_instance_id=None))
    answer, inputs = await both_shapes(heartbeat.serve, heartbeat.parse_heartbeat, payload, payload[:-1] + TAGGED)
    assert inputs == [HeartbeatInput("g", 2, "m", None, 4)]
    assert answer == kafka_frame(ref.heartbeat_response(Errors.REBALANCE_IN_PROGRESS, 4))


async def test_join_group_with_a_tagged_field() -> None:
    payload = frame(JoinGroupRequest[9](
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=30_000, member_id="m1", group_instance_id="i1",
        protocol_type="consumer", reason="r",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"sub")]))
    answer, inputs = await both_shapes(join_group.serve, join_group.parse_join_group, payload, payload[:-1] + TAGGED)
    [inp] = inputs
    assert isinstance(inp, JoinGroupInput) and (inp.client_id, inp.client_host, inp.reason) == ("c", "/10.0.0.1", "r")
    assert answer == kafka_frame(ref.join_group_response(Runtime().join, 9))


async def test_sync_group_with_a_tagged_field() -> None:
    payload = frame(SyncGroupRequest[5](
        group_id="g", generation_id=3, member_id="m1", group_instance_id=None, protocol_type="consumer",
        protocol_name="range", assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id="m1",
                                                                                        assignment=b"a")]))
    answer, _ = await both_shapes(sync_group.serve, sync_group.parse_sync_group, payload, payload[:-1] + TAGGED)
    assert answer == kafka_frame(ref.sync_group_response(Runtime().sync, 5))


@pytest.mark.parametrize("version", [0, 2, 3, 5])
async def test_leave_group_has_one_decode_and_kafka_pythons_encode(version: int) -> None:
    member = LeaveGroupRequest.MemberIdentity
    payload = frame(LeaveGroupRequest[version](group_id="g", member_id="a", members=[
        member(member_id="a", group_instance_id=None, reason="bye")]))
    shapes = [payload] + ([payload[:-1] + TAGGED] if version >= 4 else [])
    for shape in shapes:
        runtime = Runtime()
        answer = await answered(leave_group.serve, shape, context(runtime))
        result = LeaveGroupResult(Errors.NONE, [LeaveMemberResult("a", None, Errors.UNKNOWN_MEMBER_ID)])
        assert answer == kafka_frame(leave_group.leave_group_response(result, version))
        [inp] = runtime.inputs
        assert isinstance(inp, LeaveGroupInput) and [m.member_id for m in inp.members] == ["a"]


def _commit(version: int) -> Any:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic.OffsetCommitRequestPartition
    return OffsetCommitRequest[version](
        group_id="g", generation_id_or_member_epoch=4, member_id="m", group_instance_id=None,
        retention_time_ms=-1, topics=[
            topic(name="t", partitions=[partition(partition_index=0, committed_offset=10, committed_leader_epoch=-1,
                                                  commit_timestamp=-1, committed_metadata="x")]),
            topic(name="unknown", partitions=[partition(partition_index=1, committed_offset=3, committed_leader_epoch=-1,
                                                        commit_timestamp=-1, committed_metadata=None)])])


def _commit_answer(version: int) -> bytes:
    topic = OffsetCommitResponse.OffsetCommitResponseTopic
    return kafka_frame(OffsetCommitResponse[version](throttle_time_ms=0, topics=[
        topic(name="t", partitions=[topic.OffsetCommitResponsePartition(partition_index=0, error_code=0)]),
        topic(name="unknown", partitions=[topic.OffsetCommitResponsePartition(partition_index=1, error_code=3)])]))


async def test_offset_commit_with_a_tagged_field() -> None:
    payload = frame(_commit(9))
    answer, inputs = await both_shapes(offset_commit.serve, offset_commit.parse_offset_commit, payload,
                                       payload[:-1] + TAGGED)
    [inp] = inputs
    assert isinstance(inp, OffsetCommitInput) and [p.topic for p in inp.partitions] == ["t"]
    assert answer == _commit_answer(9)


async def test_offset_commit_v1_is_decoded_generically_and_answered_by_the_same_encoder() -> None:
    payload = frame(_commit(1))
    assert offset_commit.parse_offset_commit(payload) is None
    runtime = Runtime()
    assert await answered(offset_commit.serve, payload, context(runtime)) == _commit_answer(1)
    [inp] = runtime.inputs
    assert isinstance(inp, OffsetCommitInput) and inp.api_version == 1


@pytest.mark.parametrize("serve", [heartbeat.serve, join_group.serve, sync_group.serve, leave_group.serve,
                                   offset_commit.serve])
async def test_a_frame_the_generic_decode_refuses_closes_the_connection(
        serve: Callable[[bytes, ApiContext], Any]) -> None:
    payload = frame(HeartbeatRequest[4](group_id="g", generation_id=2, member_id="m", group_instance_id=None))
    key = {heartbeat.serve: 12, join_group.serve: 11, sync_group.serve: 14, leave_group.serve: 13,
           offset_commit.serve: 8}[serve]
    with pytest.raises(CloseConnection):
        serve(bytes([0, key, 0, 99]) + payload[4:], context(Runtime()))  # version 99: not served
    with pytest.raises(CloseConnection):
        serve(payload[:6], context(Runtime()))  # a header cut short


def test_every_advertised_api_has_exactly_one_path() -> None:
    from unittest.mock import Mock

    from coordinator_server.net.apis.table import SERVED_API_KEYS
    from coordinator_server.net.handlers import BrokerEndpoint, RequestHandlers
    from protocol.apis import API_TABLE

    handlers = RequestHandlers(Mock(), Mock(), BrokerEndpoint(0, "h", 1), "cluster", Mock())
    generic = set(handlers._handlers)
    assert {8, 9, 11, 12, 13, 14} == SERVED_API_KEYS
    assert not generic & SERVED_API_KEYS and generic | SERVED_API_KEYS == set(API_TABLE)
