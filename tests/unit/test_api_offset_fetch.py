"""net/apis/offset_fetch.py agrees with kafka-python's message classes, both ways, on generated
input; what it does not take it hands back (None) for the generic path."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from coordinator_server.net.apis.offset_fetch import (
    MAX_VERSION,
    MIN_VERSION,
    FetchGroupWire,
    OffsetFetchWire,
    offset_fetch_response_frame,
    parse_offset_fetch,
)
from protocol.apis import API_TABLE
from protocol.framing import decode_request_body, parse_request_header

names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
short_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
versions = st.integers(MIN_VERSION, MAX_VERSION)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
topic_lists = st.one_of(st.none(), st.lists(st.tuples(short_names, st.lists(int32, max_size=4)), max_size=3))
groups = st.lists(st.tuples(names, st.one_of(st.none(), names), int32, topic_lists), min_size=0, max_size=3)

_G = OffsetFetchRequest.OffsetFetchRequestGroup
_T = _G.OffsetFetchRequestTopics
_RG = OffsetFetchResponse.OffsetFetchResponseGroup
_RT = _RG.OffsetFetchResponseTopics
_RP = _RT.OffsetFetchResponsePartitions


def frame(version: int, correlation_id: int, client_id: str | None, group_list: list, require_stable: bool) -> bytes:
    req = OffsetFetchRequest[version](groups=[
        _G(group_id=g, member_id=m if version >= 9 else None, member_epoch=e if version >= 9 else -1,
           topics=None if ts is None else [_T(name=n, partition_indexes=ps) for n, ps in ts])
        for g, m, e, ts in group_list], require_stable=require_stable)
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))[4:]


def test_versions_match_what_we_serve() -> None:
    spec = API_TABLE[9]
    assert spec.max_version == MAX_VERSION and spec.min_version <= MIN_VERSION


@settings(max_examples=300)
@given(versions, int32, st.one_of(st.none(), names), groups, st.booleans())
def test_parse_agrees_with_kafka_python(version: int, correlation_id: int, client_id: str | None,
                                        group_list: list, require_stable: bool) -> None:
    payload = frame(version, correlation_id, client_id, group_list, require_stable)
    parsed = parse_offset_fetch(payload)
    header = parse_request_header(payload)
    body: Any = decode_request_body(header, payload)
    expected = OffsetFetchWire(header.correlation_id, header.client_id, version, tuple(
        FetchGroupWire(g.group_id, g.member_id if version >= 9 else None, g.member_epoch if version >= 9 else -1,
                       None if g.topics is None else tuple((t.name, p) for t in g.topics for p in t.partition_indexes))
        for g in body.groups), bool(body.require_stable))
    if parsed is None:
        # Only multi-byte compact lengths are handed back (strings over 126 bytes, arrays over 126 items).
        strings = [s for g, m, _, ts in group_list for s in [g, m or ""] + [n for n, _ in ts or []]]
        assert max((len(s.encode()) for s in strings), default=0) > 126
    else:
        assert parsed == expected


def test_other_versions_and_shapes_go_the_generic_way() -> None:
    old = OffsetFetchRequest[7](group_id="g", topics=None, require_stable=False)
    old.with_header(correlation_id=1, client_id="c")
    assert parse_offset_fetch(bytes(old.encode(header=True, framed=True))[4:]) is None
    payload = frame(8, 1, "c", [("g", None, -1, [("t", [0])])], False)
    assert parse_offset_fetch(payload[:-1]) is None  # truncated
    assert parse_offset_fetch(payload + b"\x00") is None  # trailing bytes
    assert parse_offset_fetch(payload[:-2] + b"\x02" + payload[-1:]) is None  # require_stable not a boolean
    assert parse_offset_fetch(payload[:-1] + b"\x01") is None  # a tagged field


answers = st.lists(st.tuples(names, int16, st.lists(st.tuples(short_names, st.lists(
    st.tuples(int32, int64, int32, st.one_of(st.none(), short_names), int16), max_size=3)), max_size=3)), max_size=3)


@settings(max_examples=300)
@given(versions, int32, answers)
def test_response_is_kafka_pythons_bytes(version: int, correlation_id: int, group_answers: list) -> None:
    resp = OffsetFetchResponse[version](throttle_time_ms=0, groups=[
        _RG(group_id=g, error_code=err, topics=[_RT(name=n, partitions=[
            _RP(partition_index=i, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=c)
            for i, o, e, m, c in ps]) for n, ps in ts]) for g, err, ts in group_answers])
    resp.with_header(correlation_id=correlation_id)
    assert offset_fetch_response_frame(correlation_id, group_answers) == bytes(resp.encode(header=True, framed=True))
