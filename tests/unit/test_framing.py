"""Golden bytes for request headers (v1, v2), response headers (v0, v1, ApiVersions always v0) and the
ApiVersions answers, including the UNSUPPORTED_VERSION v0 layout."""
from __future__ import annotations

import warnings

import pytest

# kafka-python 3.0.12 reads its JSON schemas with the deprecated importlib.resources API at import.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    from protocol.apis import API_TABLE, advertised_ranges
    from protocol.errors import Errors
    from protocol.framing import (
        BodyDecodeError,
        InvalidHeaderError,
        api_versions_body,
        decode_request_body,
        encode_response,
        parse_request_header,
        unsupported_api_versions_response,
    )
    from tests.unit.kafka_reference import heartbeat_response

h = bytes.fromhex

# Our ranges as ApiVersion entries (api key, min, max), in api key order.
RANGES_V0 = h(
    "0000" "0000" "0009"  # Produce 0-9
    "0001" "0000" "000d"  # Fetch 0-13
    "0002" "0000" "0007"  # ListOffsets 0-7
    "0003" "0000" "000c"  # Metadata 0-12
    "0007" "0001" "0003"  # ControlledShutdown 1-3
    "0008" "0001" "0009"  # OffsetCommit 1-9
    "0009" "0001" "0009"  # OffsetFetch 1-9
    "000a" "0000" "0006"  # FindCoordinator 0-6
    "000b" "0000" "0009"  # JoinGroup 0-9
    "000c" "0000" "0004"  # Heartbeat 0-4
    "000d" "0000" "0005"  # LeaveGroup 0-5
    "000e" "0000" "0005"  # SyncGroup 0-5
    "000f" "0000" "0006"  # DescribeGroups 0-6
    "0010" "0000" "0005"  # ListGroups 0-5
    "0011" "0000" "0001"  # SaslHandshake 0-1
    "0012" "0000" "0004"  # ApiVersions 0-4
    "0013" "0002" "0007"  # CreateTopics 2-7
    "0014" "0001" "0006"  # DeleteTopics 1-6
    "0016" "0000" "0004"  # InitProducerId 0-4
    "0017" "0002" "0004"  # OffsetForLeaderEpoch 2-4
    "0018" "0000" "0003"  # AddPartitionsToTxn 0-3
    "001a" "0000" "0004"  # EndTxn 0-4
    "0020" "0001" "0004"  # DescribeConfigs 1-4
    "0021" "0000" "0002"  # AlterConfigs 0-2
    "0024" "0000" "0002"  # SaslAuthenticate 0-2
    "0025" "0000" "0003"  # CreatePartitions 0-3
    "002a" "0000" "0002"  # DeleteGroups 0-2
    "002c" "0000" "0001"  # IncrementalAlterConfigs 0-1
    "002f" "0000" "0000"  # OffsetDelete 0
    "0044" "0000" "0001"  # ConsumerGroupHeartbeat 0-1
    "0045" "0000" "0001"  # ConsumerGroupDescribe 0-1
)


def test_api_table_is_exactly_the_served_ranges() -> None:
    assert advertised_ranges() == [
        (0, 0, 9), (1, 0, 13), (2, 0, 7), (3, 0, 12), (7, 1, 3), (8, 1, 9), (9, 1, 9), (10, 0, 6), (11, 0, 9),
        (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 6), (16, 0, 5), (17, 0, 1), (18, 0, 4), (19, 2, 7),
        (20, 1, 6), (22, 0, 4), (23, 2, 4), (24, 0, 3), (26, 0, 4), (32, 1, 4), (33, 0, 2), (36, 0, 2), (37, 0, 3), (42, 0, 2), (44, 0, 1),
        (47, 0, 0), (68, 0, 1), (69, 0, 1),
    ]
    assert {k: API_TABLE[k].request.name for k in API_TABLE}[11] == "JoinGroupRequest"


# ------------------------------------------------------------------------------ request headers


def test_request_header_v1() -> None:
    # JoinGroup v5 is not flexible: header v1 = api key, version, correlation id, int16 client id.
    payload = h("000b" "0005" "00000007" "0003") + b"cli" + b"BODY"
    header = parse_request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (11, 5, 7, "cli")
    assert payload[header.body_offset:] == b"BODY"
    assert header.supported and header.api_name == "JoinGroup"


def test_request_header_v1_null_client_id() -> None:
    header = parse_request_header(h("0012" "0000" "00000001" "ffff"))
    assert header.client_id is None and header.body_offset == 10


def test_request_header_v2_flexible() -> None:
    # JoinGroup v9 is flexible: header v2 adds tagged fields, but client id keeps its int16 length.
    payload = h("000b" "0009" "00000007" "0003") + b"cli" + h("00") + b"BODY"
    header = parse_request_header(payload)
    assert (header.api_version, header.client_id, header.body_offset) == (9, "cli", 14)


def test_request_header_v2_skips_unknown_tagged_fields() -> None:
    payload = h("000b" "0009" "00000007" "ffff" "01" "00" "02" "01ff") + b"BODY"
    header = parse_request_header(payload)
    assert payload[header.body_offset:] == b"BODY"


def test_unsupported_api_versions_header_is_read_as_flexible() -> None:
    # ApiVersions v99: flexible ranges are open-ended, so its header is v2 like Kafka's parser assumes.
    payload = h("0012" "0063" "0000002a" "0001") + b"x" + h("00") + b"??"
    header = parse_request_header(payload)
    assert header.correlation_id == 42 and header.body_offset == 12
    assert header.is_unsupported_api_versions and not header.supported


def test_unknown_api_key_parses_as_v1_without_spec() -> None:
    header = parse_request_header(h("03e7" "0000" "00000005" "0000"))
    assert header.spec is None and header.api_name == "unknown(999)" and not header.supported
    assert not header.is_unsupported_api_versions


@pytest.mark.parametrize("payload", [
    b"",
    h("0012" "0000" "0000"),  # shorter than key + version + correlation id
    h("0012" "0000" "00000001" "0050") + b"short",  # client id runs past the frame
    h("0012" "0000" "00000001"),  # no client id at all
])
def test_unparsable_header_raises(payload: bytes) -> None:
    with pytest.raises(InvalidHeaderError):
        parse_request_header(payload)


def test_truncated_body_raises_decode_error() -> None:
    # Heartbeat v0 wants group id, generation and member id.
    payload = h("000c" "0000" "00000001" "ffff" "0001") + b"g"
    header = parse_request_header(payload)
    with pytest.raises(BodyDecodeError):
        decode_request_body(header, payload)


def test_body_decodes_at_header_version() -> None:
    payload = h("000c" "0000" "00000001" "ffff" "0001") + b"g" + h("00000003" "0001") + b"m"
    req = decode_request_body(parse_request_header(payload), payload)
    assert (req.group_id, req.generation_id, req.member_id) == ("g", 3, "m")


# ----------------------------------------------------------------------------- response headers


def test_response_header_v0_for_non_flexible() -> None:
    assert encode_response(heartbeat_response(Errors.REBALANCE_IN_PROGRESS, 0), 3) == h(
        "00000006" "00000003" "001b"
    )
    assert encode_response(heartbeat_response(Errors.NONE, 1), 3) == h(
        "0000000a" "00000003" "00000000" "0000"
    )


def test_response_header_v1_for_flexible() -> None:
    # Heartbeat v4: header v1 ends with an empty tagged-field section, and so does the body.
    assert encode_response(heartbeat_response(Errors.REBALANCE_IN_PROGRESS, 4), 3) == h(
        "0000000c" "00000003" "00" "00000000" "001b" "00"
    )


def test_api_versions_v0() -> None:
    body = h("0000" "0000001f") + RANGES_V0
    assert encode_response(api_versions_body(0), 9) == h("%08x" % (4 + len(body)) + "00000009") + body


def test_api_versions_v3_keeps_header_v0() -> None:
    entries = b"".join(RANGES_V0[i:i + 6] + h("00") for i in range(0, len(RANGES_V0), 6))
    group_version = h("0e") + b"group.version"
    epoch = h("01" "08" "0000000000000001")  # tag 1: FinalizedFeaturesEpoch
    finalized = h("02" "14" "02") + group_version + h("0001" "0001" "00")  # tag 2: [name, max level, min level]
    supported = h("00" "14" "02") + group_version + h("0000" "0001" "00")  # tag 0: [name, min, max]
    for version, tags in ((3, h("02") + epoch + finalized), (4, h("03") + supported + epoch + finalized)):
        # compact array (n+1), throttle, then the features as tagged fields; v3 leaves out a supported range
        # that starts at 0, as Kafka does.
        body = h("0000" "20") + entries + h("00000000") + tags
        expected = h("%08x" % (4 + len(body)) + "00000009") + body  # header v0: no tagged fields
        assert encode_response(api_versions_body(version), 9) == expected


def test_unsupported_version_answer_is_v0_layout_with_our_ranges() -> None:
    body = h("0023" "0000001f") + RANGES_V0
    assert unsupported_api_versions_response(42) == h("%08x" % (4 + len(body)) + "0000002a") + body


def _kafka_python_header(payload: bytes, flexible: bool) -> tuple[int, str | None, int]:
    import io

    from kafka.protocol.api_header import RequestHeader
    buf = io.BytesIO(payload)
    header = RequestHeader.decode(buf, flexible=flexible)
    return header.correlation_id, header.client_id, buf.tell()


def test_header_fast_path_agrees_with_kafka_python_for_every_api_and_version() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from kafka.protocol.api_header import RequestHeader

    cases = [(key, v) for key, spec in API_TABLE.items() for v in range(spec.min_version, spec.max_version + 1)]

    @settings(max_examples=400)
    @given(st.sampled_from(cases), st.integers(-(2**31), 2**31 - 1),
           st.one_of(st.none(), st.text(max_size=30)), st.binary(max_size=8))
    def check(case: tuple[int, int], correlation_id: int, client_id: str | None, body: bytes) -> None:
        key, version = case
        flexible = API_TABLE[key].request_header_flexible(version)
        header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=correlation_id,
                               client_id=client_id)
        payload = bytes(header.encode(flexible=flexible)) + body
        parsed = parse_request_header(payload)
        assert (parsed.api_key, parsed.api_version) == (key, version)
        assert (parsed.correlation_id, parsed.client_id, parsed.body_offset) == _kafka_python_header(payload, flexible)

    check()
