"""net/apis/join_group.py and sync_group.py encode their answers byte for byte as kafka-python's classes do
(tests/unit/kafka_reference.py), and parse their requests field for field as kafka-python decodes them, on
generated input at every version; what the parsers do not take they hand back (None) for the generic decode."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest

from coordinator_server.group.api import JoinGroupMember, JoinGroupResult, SyncGroupResult
from coordinator_server.net.apis import join_group, sync_group
from protocol.apis import API_TABLE
from protocol.errors import Errors
from protocol.framing import decode_request_body, encode_response, parse_request_header
from tests.unit import kafka_reference as ref

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
opt_text = st.one_of(st.none(), text)
blobs = st.binary(max_size=300)
errors = st.sampled_from(list(Errors))
int32 = st.integers(-(2**31), 2**31 - 1)

join_results = st.builds(
    JoinGroupResult, error=errors, generation_id=int32, protocol_type=opt_text, protocol_name=opt_text,
    leader=text, member_id=text,
    members=st.lists(st.builds(JoinGroupMember, member_id=text, group_instance_id=opt_text, metadata=blobs),
                     max_size=5),
    skip_assignment=st.booleans())
sync_results = st.builds(SyncGroupResult, error=errors, protocol_type=opt_text, protocol_name=opt_text,
                         assignment=blobs)


def test_versions_cover_what_we_serve() -> None:
    assert API_TABLE[11].max_version <= 9 and API_TABLE[14].max_version <= 5


@settings(max_examples=400)
@given(join_results, st.integers(0, API_TABLE[11].max_version), int32)
def test_join_group_response_is_kafka_pythons(result: JoinGroupResult, version: int, correlation_id: int) -> None:
    expected = encode_response(ref.join_group_response(result, version), correlation_id)
    assert encode_response(join_group.join_group_response(result, version), correlation_id) == expected


@settings(max_examples=300)
@given(sync_results, st.integers(0, API_TABLE[14].max_version), int32)
def test_sync_group_response_is_kafka_pythons(result: SyncGroupResult, version: int, correlation_id: int) -> None:
    expected = encode_response(ref.sync_group_response(result, version), correlation_id)
    assert encode_response(sync_group.sync_group_response(result, version), correlation_id) == expected


def test_error_codes_are_carried_for_the_metrics() -> None:
    assert sync_group.sync_group_response(SyncGroupResult(Errors.REBALANCE_IN_PROGRESS), 3).error_codes == (27,)


# -- requests: parsed by hand field for field as kafka-python decodes them ----------------------------

_JoinProtocol = JoinGroupRequest.JoinGroupRequestProtocol
_SyncAssignment = SyncGroupRequest.SyncGroupRequestAssignment
# Long enough that flexible versions need multi-byte varint lengths (a subscription is often over 127 bytes).
long_blobs = st.binary(max_size=400)
opt_str = st.one_of(st.none(), text)


def _frame(req: Any, correlation_id: int, client_id: str | None) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))[4:]


def _generic(payload: bytes) -> tuple[Any, Any]:
    header = parse_request_header(payload)
    return header, decode_request_body(header, payload)


@settings(max_examples=400)
@given(st.integers(0, join_group.MAX_VERSION), int32, opt_str, text, int32, int32, text, opt_str, text,
       st.lists(st.tuples(text, long_blobs), max_size=4), opt_str)
def test_join_group_request_parses_as_kafka_python_decodes(
        version: int, correlation_id: int, client_id: str | None, group_id: str, session_ms: int, rebalance_ms: int,
        member_id: str, instance_id: str | None, protocol_type: str, protocols: list[tuple[str, bytes]],
        reason: str | None) -> None:
    payload = _frame(JoinGroupRequest[version](
        group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, member_id=member_id,
        group_instance_id=instance_id, protocol_type=protocol_type,
        protocols=[_JoinProtocol(name=n, metadata=m) for n, m in protocols], reason=reason), correlation_id, client_id)
    parsed = join_group.parse_join_group(payload)
    header, body = _generic(payload)
    assert parsed is not None
    assert (parsed.correlation_id, parsed.client_id, parsed.api_version) == \
        (header.correlation_id, header.client_id, version)
    assert parsed == join_group.request_of(body, version, header.correlation_id, header.client_id)
    assert join_group.join_group_input(parsed, "/h").client_id == (client_id or "")


@settings(max_examples=400)
@given(st.integers(0, sync_group.MAX_VERSION), int32, opt_str, text, int32, text, opt_str, opt_str, opt_str,
       st.lists(st.tuples(text, long_blobs), max_size=4))
def test_sync_group_request_parses_as_kafka_python_decodes(
        version: int, correlation_id: int, client_id: str | None, group_id: str, generation: int, member_id: str,
        instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
        assignments: list[tuple[str, bytes]]) -> None:
    payload = _frame(SyncGroupRequest[version](
        group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
        protocol_type=protocol_type, protocol_name=protocol_name,
        assignments=[_SyncAssignment(member_id=m, assignment=a) for m, a in assignments]), correlation_id, client_id)
    parsed = sync_group.parse_sync_group(payload)
    header, body = _generic(payload)
    assert parsed is not None
    assert (parsed.correlation_id, parsed.client_id, parsed.api_version) == \
        (header.correlation_id, header.client_id, version)
    assert parsed == sync_group.request_of(body, version, header.correlation_id, header.client_id)


def test_a_leaders_sync_of_many_members_is_parsed_in_a_flexible_version() -> None:
    # 300 assignments: the array's compact count is a two-byte varint.
    assignments = [(f"member-{i}", b"x" * 200) for i in range(300)]
    payload = _frame(SyncGroupRequest[5](
        group_id="g", generation_id=3, member_id="member-0", group_instance_id=None, protocol_type="consumer",
        protocol_name="range", assignments=[_SyncAssignment(member_id=m, assignment=a) for m, a in assignments]),
        7, "c")
    parsed = sync_group.parse_sync_group(payload)
    assert parsed is not None and [(a.member_id, a.assignment) for a in parsed.assignments] == assignments


def test_what_the_request_parsers_do_not_take_goes_the_generic_way() -> None:
    join = _frame(JoinGroupRequest[6](
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[_JoinProtocol(name="range", metadata=b"m")]), 1, "c")
    assert join_group.parse_join_group(join) is not None
    assert join_group.parse_join_group(join[:-1]) is None  # truncated
    assert join_group.parse_join_group(join + b"\x00") is None  # trailing bytes
    assert join_group.parse_join_group(join[:-1] + b"\x01") is None  # a tagged field in the body
    assert sync_group.parse_sync_group(join) is None  # another api
    v5 = _frame(JoinGroupRequest[5](
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[_JoinProtocol(name="range", metadata=b"m")]), 1, "c")
    # A null member id, which Kafka forbids: the generic path closes the connection, with its log line.
    null_member = v5.replace(b"\x27\x10\x00\x00\xff\xff", b"\x27\x10\xff\xff\xff\xff", 1)
    assert null_member != v5 and join_group.parse_join_group(null_member) is None
    sync = _frame(SyncGroupRequest[3](group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                                      assignments=[]), 1, "c")
    assert sync_group.parse_sync_group(sync) is not None
    assert sync_group.parse_sync_group(sync[:-1]) is None
    assert sync_group.parse_sync_group(sync[:-4] + b"\xff\xff\xff\xff") is None  # a null assignment array


def test_request_parsers_cover_the_versions_we_serve() -> None:
    assert (API_TABLE[11].min_version, API_TABLE[11].max_version) == (0, join_group.MAX_VERSION)
    assert (API_TABLE[14].min_version, API_TABLE[14].max_version) == (0, sync_group.MAX_VERSION)
