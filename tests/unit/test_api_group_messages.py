"""Classic group APIs (net/apis/): requests of every version -> core inputs; core results -> golden response bytes."""
from __future__ import annotations

import warnings

import pytest

# kafka-python 3.0.12 reads its JSON schemas with the deprecated importlib.resources API at import.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        SyncGroupRequest,
    )

    from coordinator_server.group.api import (
        JoinGroupMember,
        JoinGroupResult,
        LeaveGroupResult,
        LeaveMember,
        LeaveMemberResult,
        SyncGroupResult,
    )
    from coordinator_server.net.apis import heartbeat, join_group, leave_group, sync_group
    from coordinator_server.net.apis.context import java_inet_address_string
    from protocol.errors import Errors
    from protocol.framing import encode_response

h = bytes.fromhex


def cat(*parts: str | bytes) -> bytes:
    """Golden bytes written as hex strings interleaved with raw byte strings."""
    return b"".join(h(p) if isinstance(p, str) else p for p in parts)


def roundtrip(request: object, version: int) -> object:
    """Encode with kafka-python as a client would, decode as the server does."""
    data = request.encode(version=version)  # type: ignore[attr-defined]
    return type(request).decode(data, version=version)


def join_request(version: int, **overrides: object) -> object:
    fields: dict[str, object] = {
        "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 60000, "member_id": "m-1",
        "group_instance_id": "i-1", "protocol_type": "consumer", "reason": "because",
        "protocols": [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x01\x02"),
                      JoinGroupRequest.JoinGroupRequestProtocol(name="roundrobin", metadata=b"")],
    }
    fields.update(overrides)
    return roundtrip(JoinGroupRequest[version](**fields), version)


# ------------------------------------------------------------------------------------ JoinGroup


def test_join_group_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    inp = join_group.join_group_input(join_group.request_of(join_request(0), 0, client_id="client-a"), "/127.0.0.1")
    assert (inp.session_timeout_ms, inp.rebalance_timeout_ms) == (10000, 10000)
    assert (inp.group_instance_id, inp.reason, inp.api_version) == (None, None, 0)
    assert (inp.client_id, inp.client_host) == ("client-a", "/127.0.0.1")
    assert inp.protocols == (("range", b"\x01\x02"), ("roundrobin", b""))


@pytest.mark.parametrize(("version", "instance", "reason"), [
    (1, None, None), (4, None, None), (5, "i-1", None), (7, "i-1", None), (8, "i-1", "because"), (9, "i-1", "because"),
])
def test_join_group_fields_by_version(version: int, instance: str | None, reason: str | None) -> None:
    inp = join_group.join_group_input(join_group.request_of(join_request(version), version), "/10.0.0.1")
    assert inp.rebalance_timeout_ms == 60000
    assert (inp.group_instance_id, inp.reason, inp.client_id) == (instance, reason, "")


def _join_result(protocol_name: str | None = "range") -> JoinGroupResult:
    return JoinGroupResult(
        error=Errors.NONE, generation_id=1, protocol_type="consumer", protocol_name=protocol_name,
        leader="m1", member_id="m1", members=[JoinGroupMember("m1", None, b"md")], skip_assignment=False,
    )


def test_join_group_response_v0_golden() -> None:
    assert encode_response(join_group.join_group_response(_join_result(), 0), 1) == cat(
        "00000027", "00000001",  # size, correlation id (header v0)
        "0000", "00000001",  # error, generation
        "0005", b"range", "0002", b"m1", "0002", b"m1",  # protocol name, leader, member id
        "00000001", "0002", b"m1", "00000002", b"md",  # members: [id, metadata]
    )


def test_join_group_response_v5_golden() -> None:
    # v2 adds throttle time; v5 adds the members' group instance id (null here).
    assert encode_response(join_group.join_group_response(_join_result(), 5), 1) == cat(
        "0000002d", "00000001", "00000000", "0000", "00000001",
        "0005", b"range", "0002", b"m1", "0002", b"m1",
        "00000001", "0002", b"m1", "ffff", "00000002", b"md",
    )


def test_join_group_response_v9_golden() -> None:
    # Flexible: header v1, compact strings/arrays, protocol type (v7), skip assignment (v9), tags.
    assert encode_response(join_group.join_group_response(_join_result(), 9), 1) == cat(
        "0000002f", "00000001", "00",  # size, correlation id, header tags
        "00000000", "0000", "00000001",  # throttle, error, generation
        "09", b"consumer", "06", b"range", "03", b"m1",  # protocol type, name, leader
        "00", "03", b"m1",  # skip assignment, member id
        "02", "03", b"m1", "00", "03", b"md", "00",  # members: [id, null instance, metadata, tags]
        "00",  # body tags
    )


def test_join_group_absent_protocol_name_is_empty_below_v7_and_null_from_v7() -> None:
    result = JoinGroupResult(error=Errors.MEMBER_ID_REQUIRED, member_id="new-id")
    v6 = join_group.join_group_response(result, 6)
    v7 = join_group.join_group_response(result, 7)
    # "" as compact length 1 (v6), null protocol type and name as 0 (v7), "" as an int16 length 0 (v0)
    assert encode_response(v6, 1)[4 + 4 + 1 + 4 + 2 + 4:][:1] == h("01")
    assert encode_response(v7, 1)[4 + 4 + 1 + 4 + 2 + 4:][:2] == h("00" "00")
    assert encode_response(join_group.join_group_response(result, 0), 1)[4 + 4 + 2 + 4:][:2] == h("0000")


# ------------------------------------------------------------------------------------ SyncGroup


@pytest.mark.parametrize("version", [0, 3, 5])
def test_sync_group_input(version: int) -> None:
    req = roundtrip(SyncGroupRequest[version](
        group_id="g", generation_id=4, member_id="m", group_instance_id="i", protocol_type="consumer",
        protocol_name="range", assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id="m", assignment=b"a")],
    ), version)
    inp = sync_group.sync_group_input(sync_group.request_of(req, version))
    assert (inp.group_id, inp.generation_id, inp.member_id, inp.assignments) == ("g", 4, "m", (("m", b"a"),))
    assert inp.group_instance_id == ("i" if version >= 3 else None)
    assert (inp.protocol_type, inp.protocol_name) == (("consumer", "range") if version >= 5 else (None, None))


def test_sync_group_response_golden() -> None:
    result = SyncGroupResult(Errors.NONE, "consumer", "range", b"as")
    assert encode_response(sync_group.sync_group_response(result, 0), 3) == cat("0000000c", "00000003", "0000", "00000002", b"as")
    # v5 (flexible) carries protocol type and name.
    assert encode_response(sync_group.sync_group_response(result, 5), 3) == cat(
        "0000001e", "00000003", "00", "00000000", "0000", "09", b"consumer", "06", b"range", "03", b"as", "00"
    )


# ------------------------------------------------------------------------------------ Heartbeat


@pytest.mark.parametrize("version", [0, 3, 4])
def test_heartbeat_input(version: int) -> None:
    req = roundtrip(HeartbeatRequest[version](group_id="g", generation_id=2, member_id="m", group_instance_id="i"),
                    version)
    inp = heartbeat.heartbeat_input(req, version)
    assert (inp.group_id, inp.generation_id, inp.member_id, inp.api_version) == ("g", 2, "m", version)
    assert inp.group_instance_id == ("i" if version >= 3 else None)


# ----------------------------------------------------------------------------------- LeaveGroup


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_group_v0_2_normalized_into_one_member(version: int) -> None:
    req = roundtrip(LeaveGroupRequest[version](group_id="g", member_id="m-1"), version)
    inp = leave_group.leave_group_input(req, version)
    assert inp.members == (LeaveMember("m-1", None),)


@pytest.mark.parametrize(("version", "reason"), [(3, None), (5, "bye")])
def test_leave_group_batch(version: int, reason: str | None) -> None:
    member = LeaveGroupRequest.MemberIdentity
    req = roundtrip(LeaveGroupRequest[version](group_id="g", members=[
        member(member_id="a", group_instance_id=None, reason="bye"),
        member(member_id="", group_instance_id="i-2", reason="bye"),
    ]), version)
    inp = leave_group.leave_group_input(req, version)
    assert inp.members == (LeaveMember("a", None, reason), LeaveMember("", "i-2", reason))


def test_leave_group_v0_folds_member_error() -> None:
    result = LeaveGroupResult(Errors.NONE, [LeaveMemberResult("m", None, Errors.NONE),
                                            LeaveMemberResult("x", None, Errors.UNKNOWN_MEMBER_ID)])
    assert encode_response(leave_group.leave_group_response(result, 0), 1) == h("00000006" "00000001" "0019")
    assert encode_response(leave_group.leave_group_response(result, 1), 1) == h("0000000a" "00000001" "00000000" "0019")


def test_leave_group_fold_prefers_top_level_error() -> None:
    result = LeaveGroupResult(Errors.COORDINATOR_NOT_AVAILABLE,
                              [LeaveMemberResult("m", None, Errors.UNKNOWN_MEMBER_ID)])
    assert leave_group.folded_leave_error(result) == Errors.COORDINATOR_NOT_AVAILABLE
    assert leave_group.folded_leave_error(LeaveGroupResult(Errors.NONE, [])) == Errors.NONE


def test_leave_group_v3_and_v4_golden() -> None:
    result = LeaveGroupResult(Errors.NONE, [LeaveMemberResult("m", None, Errors.UNKNOWN_MEMBER_ID)])
    assert encode_response(leave_group.leave_group_response(result, 3), 1) == cat(
        "00000015", "00000001", "00000000", "0000", "00000001", "0001", b"m", "ffff", "0019"
    )
    assert encode_response(leave_group.leave_group_response(result, 4), 1) == cat(
        "00000013", "00000001", "00", "00000000", "0000", "02", "02", b"m", "00", "0019", "00", "00"
    )


# ------------------------------------------------------------------------------------ client host


@pytest.mark.parametrize(("ip", "expected"), [
    ("127.0.0.1", "/127.0.0.1"),
    ("::1", "/0:0:0:0:0:0:0:1"),
    ("fe80::1%eth0", "/fe80:0:0:0:0:0:0:1%eth0"),
    ("::ffff:10.1.2.3", "/10.1.2.3"),
])
def test_client_host_in_java_inet_address_form(ip: str, expected: str) -> None:
    assert java_inet_address_string(ip) == expected
