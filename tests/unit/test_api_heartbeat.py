"""net/apis/heartbeat.py's parser and encoder agree with kafka-python's message classes, both ways, on generated input;
what it does not take it hands back (None) for the generic path."""
from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

from coordinator_server.group.api import HeartbeatInput
from coordinator_server.net.apis.heartbeat import MAX_VERSION, heartbeat_response_frame, parse_heartbeat
from coordinator_server.net.apis.heartbeat import HeartbeatRequest as Parsed
from protocol.apis import API_TABLE
from protocol.framing import decode_request_body, parse_request_header

names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
versions = st.integers(0, MAX_VERSION)
int32 = st.integers(-(2**31), 2**31 - 1)


def frame(version: int, correlation_id: int, client_id: str | None, group_id: str, generation: int,
          member_id: str, instance_id: str | None) -> bytes:
    req = HeartbeatRequest[version](group_id=group_id, generation_id=generation, member_id=member_id,
                                    group_instance_id=instance_id if version >= 3 else None)
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))[4:]


def test_max_version_matches_what_we_serve() -> None:
    spec = API_TABLE[12]
    assert (spec.min_version, spec.max_version) == (0, MAX_VERSION)


@settings(max_examples=300)
@given(versions, int32, st.one_of(st.none(), names), names, int32, names, st.one_of(st.none(), names))
def test_parse_agrees_with_kafka_python(version: int, correlation_id: int, client_id: str | None,
                                        group_id: str, generation: int, member_id: str,
                                        instance_id: str | None) -> None:
    payload = frame(version, correlation_id, client_id, group_id, generation, member_id, instance_id)
    parsed = parse_heartbeat(payload)
    header = parse_request_header(payload)
    body = decode_request_body(header, payload)
    expected = Parsed(header.correlation_id, header.client_id, HeartbeatInput(
        body.group_id, body.generation_id, body.member_id, body.group_instance_id if version >= 3 else None, version))
    if parsed is None:
        # Only shapes with multi-byte compact lengths are handed back (flexible versions, > 126 bytes).
        assert version >= 4 and max(len(s.encode()) for s in (group_id, member_id, instance_id or "")) > 126
    else:
        assert parsed == expected


@given(versions, int32, st.sampled_from([0, 15, 16, 22, 25, 27, 79, 82, -1]))
def test_response_is_byte_for_byte_kafka_pythons(version: int, correlation_id: int, error_code: int) -> None:
    kwargs = {"throttle_time_ms": 0} if version >= 1 else {}
    resp = HeartbeatResponse[version](error_code=error_code, **kwargs)
    resp.with_header(correlation_id=correlation_id)
    assert heartbeat_response_frame(version, correlation_id, error_code) == bytes(resp.encode(header=True, framed=True))


def test_long_compact_strings_go_the_generic_way() -> None:
    payload = frame(4, 1, "c", "g" * 200, 1, "m", None)
    assert parse_heartbeat(payload) is None
    assert parse_request_header(payload).api_key == 12  # and the generic path still reads it


@given(versions, st.data())
def test_truncated_or_padded_payloads_are_handed_back(version: int, data: st.DataObject) -> None:
    payload = frame(version, 7, "client", "group", 3, "member", "inst")
    cut = data.draw(st.integers(0, len(payload) - 1))
    assert parse_heartbeat(payload[:cut]) is None
    assert parse_heartbeat(payload + b"\x00") is None


def test_other_apis_and_versions_are_handed_back() -> None:
    payload = bytearray(frame(4, 1, "c", "g", 1, "m", None))
    payload[1] = 11  # JoinGroup's api key
    assert parse_heartbeat(bytes(payload)) is None
    payload[1], payload[3] = 12, 5  # Heartbeat v5: not served
    assert parse_heartbeat(bytes(payload)) is None


def test_null_group_id_is_handed_back() -> None:
    # A null in a non-nullable field closes the connection on the generic path; never accepted here.
    v3 = frame(3, 1, "c", "g", 1, "m", None)
    header = RequestHeader.decode(io.BytesIO(v3), flexible=False)
    assert header.client_id == "c"
    body_at = 2 + 2 + 4 + 2 + 1
    null_group = v3[:body_at] + b"\xff\xff" + v3[body_at + 2 + 1:]
    assert parse_heartbeat(null_group) is None
    v4 = frame(4, 1, "c", "g", 1, "m", None)
    null_group4 = v4[:body_at + 1] + b"\x00" + v4[body_at + 1 + 2:]
    assert parse_heartbeat(null_group4) is None
