"""The rebalance driver's hand-built frames are the bytes kafka-python builds, and what it reads of the answers
is what kafka-python decodes (benchmarks/wire.py): the driver got cheaper, not different."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import wire

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
int32 = st.integers(-(2**31), 2**31 - 1)
blobs = st.binary(max_size=80)


@settings(max_examples=200)
@given(text, st.integers(0, 2**31 - 1), text, text, blobs, int32)
def test_join_frame_is_kafka_pythons(group_id: str, session_ms: int, member_id: str, protocol: str, metadata: bytes,
                                     correlation_id: int) -> None:
    req = wire.JoinGroupRequest[wire.JOIN_VERSION](
        group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms, member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=[wire.JoinGroupRequest.JoinGroupRequestProtocol(name=protocol, metadata=metadata)], reason=None)
    assert wire.join_frame(group_id, session_ms, member_id, protocol, metadata, correlation_id) == \
        wire.encode(req, correlation_id)


@settings(max_examples=200)
@given(text, int32, text, st.lists(st.tuples(text, blobs), max_size=5), int32)
def test_sync_frame_is_kafka_pythons(group_id: str, generation: int, member_id: str,
                                     assignments: list[tuple[str, bytes]], correlation_id: int) -> None:
    req = wire.SyncGroupRequest[wire.SYNC_VERSION](
        group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=None,
        assignments=[wire.SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in assignments])
    assert wire.sync_frame(group_id, generation, member_id, assignments, correlation_id) == \
        wire.encode(req, correlation_id)


@settings(max_examples=200)
@given(st.integers(-1, 120), int32, text, text, text,
       st.lists(st.tuples(text, st.one_of(st.none(), text), blobs), max_size=5), int32)
def test_join_answer_reads_as_kafka_python_decodes(error: int, generation: int, protocol: str, leader: str,
                                                   member_id: str, members: list[tuple[str, str | None, bytes]],
                                                   correlation_id: int) -> None:
    resp = wire.JoinGroupResponse[wire.JOIN_VERSION](
        throttle_time_ms=0, error_code=error, generation_id=generation, protocol_name=protocol, leader=leader,
        member_id=member_id, members=[wire.JoinGroupResponse.JoinGroupResponseMember(
            member_id=m, group_instance_id=i, metadata=md) for m, i, md in members])
    resp.with_header(correlation_id=correlation_id)
    payload = bytes(resp.encode(header=True, framed=True))[4:]
    decoded = wire.JoinGroupResponse.decode(payload, version=wire.JOIN_VERSION, header=True)
    assert wire.read_join_answer(payload) == wire.JoinAnswer(
        decoded.error_code, decoded.generation_id, decoded.leader, decoded.member_id,
        [m.member_id for m in decoded.members])


@settings(max_examples=100)
@given(st.integers(-1, 120), blobs, int32)
def test_sync_error_reads_as_kafka_python_decodes(error: int, assignment: bytes, correlation_id: int) -> None:
    resp = wire.SyncGroupResponse[wire.SYNC_VERSION](throttle_time_ms=0, error_code=error, assignment=assignment)
    resp.with_header(correlation_id=correlation_id)
    payload = bytes(resp.encode(header=True, framed=True))[4:]
    assert wire.sync_error(payload) == error
