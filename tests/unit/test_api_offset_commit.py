"""net/apis/offset_commit.py agrees with kafka-python's message classes, both ways, on generated
input; what it does not take it hands back (None) for the generic path."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from coordinator_server.net.apis.offset_commit import (
    MAX_VERSION,
    MIN_VERSION,
    CommitPartitionWire,
    CommitTopicWire,
    OffsetCommitWire,
    offset_commit_response_frame,
    parse_offset_commit,
)
from protocol.apis import API_TABLE
from protocol.framing import decode_request_body, parse_request_header

names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
short_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
versions = st.integers(MIN_VERSION, MAX_VERSION)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
partitions = st.lists(st.tuples(int32, int64, int32, st.one_of(st.none(), short_names)), max_size=4)
topics = st.lists(st.tuples(short_names, partitions), max_size=3)

_T = OffsetCommitRequest.OffsetCommitRequestTopic
_P = _T.OffsetCommitRequestPartition


def request(version: int, group_id: str, generation: int, member_id: str, instance_id: str | None,
            retention: int, topic_list: list) -> OffsetCommitRequest:
    return OffsetCommitRequest[version](
        group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=instance_id if version >= 7 else None,
        retention_time_ms=retention if version <= 4 else -1,
        topics=[_T(name=name, partitions=[
            _P(partition_index=i, committed_offset=o, committed_leader_epoch=e if version >= 6 else -1,
               commit_timestamp=-1, committed_metadata=m) for i, o, e, m in parts]) for name, parts in topic_list])


def frame(req: OffsetCommitRequest, correlation_id: int, client_id: str | None) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))[4:]


def test_versions_match_what_we_serve() -> None:
    spec = API_TABLE[8]
    assert spec.max_version == MAX_VERSION and spec.min_version <= MIN_VERSION


@settings(max_examples=300)
@given(versions, int32, st.one_of(st.none(), names), names, int32, names, st.one_of(st.none(), names), int64, topics)
def test_parse_agrees_with_kafka_python(version: int, correlation_id: int, client_id: str | None, group_id: str,
                                        generation: int, member_id: str, instance_id: str | None, retention: int,
                                        topic_list: list) -> None:
    payload = frame(request(version, group_id, generation, member_id, instance_id, retention, topic_list),
                    correlation_id, client_id)
    parsed = parse_offset_commit(payload)
    header = parse_request_header(payload)
    body = decode_request_body(header, payload)
    expected = OffsetCommitWire(
        header.correlation_id, header.client_id, version, body.group_id, body.generation_id_or_member_epoch,
        body.member_id, body.group_instance_id if version >= 7 else None,
        body.retention_time_ms if version <= 4 else -1,
        tuple(CommitTopicWire(t.name, tuple(
            CommitPartitionWire(p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata)
            for p in t.partitions)) for t in body.topics))
    if parsed is None:
        # Only multi-byte compact lengths are handed back (flexible versions, strings over 126 bytes).
        strings = [group_id, member_id, instance_id or ""] + [n for n, _ in topic_list] + \
            [m or "" for _, ps in topic_list for *_, m in ps]
        assert version >= 8 and max(len(s.encode()) for s in strings) > 126
    else:
        assert parsed == expected


@settings(max_examples=200)
@given(versions, int32, topics, st.data())
def test_response_is_byte_for_byte_kafka_pythons(version: int, correlation_id: int, topic_list: list,
                                                 data: st.DataObject) -> None:
    payload = frame(request(version, "g", 1, "m", None, -1, topic_list), correlation_id, "c")
    req = parse_offset_commit(payload)
    assert req is not None
    codes = st.sampled_from([0, 3, 12, 22, 25, 27, 28, 29, 30, 79, 82])
    errors = {(t.name, p.partition_index): data.draw(codes) for t in req.topics for p in t.partitions}
    _RT = OffsetCommitResponse.OffsetCommitResponseTopic
    resp = OffsetCommitResponse[version](throttle_time_ms=0, topics=[
        _RT(name=t.name, partitions=[_RT.OffsetCommitResponsePartition(
            partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)]) for p in t.partitions])
        for t in req.topics])
    resp.with_header(correlation_id=correlation_id)
    assert offset_commit_response_frame(req, errors) == bytes(resp.encode(header=True, framed=True))


def test_what_it_does_not_take_goes_the_generic_way() -> None:
    ok = frame(request(8, "g", 1, "m", None, -1, [("t", [(0, 5, -1, "")])]), 1, "c")
    assert parse_offset_commit(ok) is not None
    assert parse_offset_commit(ok[:-1]) is None  # truncated
    assert parse_offset_commit(ok + b"\x00") is None  # trailing bytes
    assert parse_offset_commit(ok[:-1] + b"\x01") is None  # a tagged field in the body
    v1 = frame(OffsetCommitRequest[1](group_id="g", generation_id_or_member_epoch=1, member_id="m", topics=[]), 1, "c")
    assert parse_offset_commit(v1) is None  # v1 (commit timestamps) is not taken
