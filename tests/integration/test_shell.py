"""The network shell over real sockets: framing, limits, ApiVersions, Metadata, FindCoordinator,
connection-level errors, in-order responses, shutdown — and a real kafka-python client bootstrapping."""
from __future__ import annotations

import socket
import struct
import uuid
from typing import Any

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from .conftest import ServerProcess

pytestmark = pytest.mark.integration

OUR_RANGES = {3: (0, 12), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 18: (0, 4),
              # the topic store (data plane and topic admin)
              0: (0, 9), 1: (0, 13), 2: (0, 7), 23: (2, 4), 22: (0, 4), 19: (2, 7), 20: (1, 6), 37: (0, 3),
              # committed offsets and group administration
              8: (1, 9), 9: (1, 9), 47: (0, 0), 15: (0, 6), 16: (0, 5), 42: (0, 2),
              # topic configs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs)
              32: (1, 4), 33: (0, 2), 44: (0, 1),
              # brokers to the controller (ControlledShutdown; NOT_CONTROLLER on a single node)
              7: (1, 3),
              # transactions v1 (AddPartitionsToTxn, EndTxn)
              24: (0, 3), 26: (0, 4),
              # SASL (SaslHandshake, SaslAuthenticate)
              17: (0, 1), 36: (0, 2),
              # KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe)
              68: (0, 1), 69: (0, 1)}


# ---------------------------------------------------------------------------------------- helpers


def connect(srv: ServerProcess) -> socket.socket:
    sock = socket.create_connection((srv.host, srv.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(sock: socket.socket) -> bytes | None:
    """One response payload, or None if the server closed the connection."""
    size = recv_exactly(sock, 4)
    if size is None:
        return None
    return recv_exactly(sock, struct.unpack(">i", size)[0])


def send(sock: socket.socket, request: ApiMessage, correlation_id: int = 1, client_id: str = "shell-test") -> None:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    sock.sendall(request.encode(header=True, framed=True))


def call(srv: ServerProcess, request: ApiMessage, response_cls: Any, correlation_id: int = 7) -> Any:
    with connect(srv) as sock:
        send(sock, request, correlation_id)
        payload = recv_frame(sock)
    assert payload is not None, "server closed the connection"
    response = response_cls.decode(payload, version=request.API_VERSION, header=True)
    assert response.header.correlation_id == correlation_id
    return response


def assert_closed(sock: socket.socket) -> None:
    assert recv_frame(sock) is None


def assert_serves(srv: ServerProcess) -> None:
    resp = call(srv, ApiVersionsRequest[0](), ApiVersionsResponse)
    assert resp.error_code == 0


def ranges(resp: Any) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def raw_header(api_key: int, api_version: int, correlation_id: int, client_id: bytes, flexible: bool) -> bytes:
    head = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    return head + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# ----------------------------------------------------------------------------------- lifecycle


def test_listening_event_has_host_and_port(server: ServerProcess) -> None:
    [event] = server.events("listening")
    assert event["host"] == "127.0.0.1"
    assert isinstance(event["port"], int) and event["port"] > 0
    assert_serves(server)


@pytest.mark.parametrize("how", ["terminate", "interrupt"])
def test_signal_shutdown_exits_zero(server: ServerProcess, how: str) -> None:
    idle = connect(server)  # an idle connection must not hold up shutdown
    assert getattr(server, how)() == 0
    assert server.events("stopped")
    assert_closed(idle)
    idle.close()


def test_restart_keeps_data_dir(server: ServerProcess) -> None:
    data_dir = server.data_dir
    server.kill9()
    server.restart()
    assert server.data_dir == data_dir
    assert len(server.events("listening")) == 2
    assert_serves(server)


def admin_commit(srv: ServerProcess, group: str, partitions: list[int]) -> None:
    """OffsetCommit v8 of topic `a`, as an admin (generation -1, no member): creates an Empty group."""
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest[8](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1, topics=[T(name="a", partitions=[T.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=10 + p, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata="") for p in partitions])])
    resp = call(srv, req, OffsetCommitResponse)
    assert {p.error_code for t in resp.topics for p in t.partitions} == {0}


def test_startup_logs_one_load_summary_before_listening(server_factory: Any) -> None:
    srv = server_factory(topic=["a:3"])
    names = [e["event"] for e in srv.events()]
    # An empty data directory: one summary line at info, no line per __consumer_offsets partition.
    assert "partition_loaded" not in names
    [loaded] = srv.events("coordinator_loaded")
    assert names.index("coordinator_loaded") < names.index("listening")
    assert (loaded["partitions"], loaded["groups"], loaded["offsets"]) == (50, 0, 0)
    assert isinstance(loaded["seconds"], float) and loaded["seconds"] >= 0
    admin_commit(srv, "load-summary-1", [0, 1, 2])
    admin_commit(srv, "load-summary-2", [0])
    srv.restart(log_level="debug")
    loaded = srv.events("coordinator_loaded")[-1]
    assert (loaded["partitions"], loaded["groups"], loaded["offsets"]) == (50, 2, 4)
    # The per-partition detail is still there at debug, and adds up to the summary.
    per_partition = srv.events("partition_loaded")
    assert len(per_partition) == 50 and sum(e["groups"] for e in per_partition) == 2


def test_port_in_use_fails_startup_with_one_line(server_factory: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        srv = server_factory(port=port, start=False)
        srv.start(wait=False)
        assert srv.wait() != 0
    [failure] = srv.events("startup_failed")
    assert str(port) in failure["error"]


# --------------------------------------------------------------------------------- ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_lists_exactly_our_ranges(server: ServerProcess, version: int) -> None:
    req = (ApiVersionsRequest[version](client_software_name="shell-test", client_software_version="1.0")
           if version >= 3 else ApiVersionsRequest[version]())
    resp = call(server, req, ApiVersionsResponse)
    assert resp.error_code == 0
    assert ranges(resp) == OUR_RANGES
    if version >= 1:
        assert resp.throttle_time_ms == 0


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_api_versions_unsupported_version_answers_v0_layout(server: ServerProcess, version: int) -> None:
    with connect(server) as sock:
        # A future client: header v2 (flexible) and a body we cannot know.
        sock.sendall(frame(raw_header(18, version, 4242, b"future", flexible=True) + b"\x00\x01\x02"))
        payload = recv_frame(sock)
        assert payload is not None
        # Response header v0 (correlation id only), then error code 35 and the v0 array of ranges.
        correlation_id, error = struct.unpack_from(">ih", payload, 0)
        assert (correlation_id, error) == (4242, 35)
        resp = ApiVersionsResponse.decode(payload, version=0, header=True)
        assert ranges(resp) == OUR_RANGES
        assert len(payload) == 4 + 2 + 4 + 6 * len(OUR_RANGES)  # exactly the v0 layout
        # The connection stays usable: the client downgrades on it.
        send(sock, ApiVersionsRequest[3](client_software_name="x", client_software_version="1"), 4243)
        again = ApiVersionsResponse.decode(recv_frame(sock), version=3, header=True)
        assert again.error_code == 0 and again.header.correlation_id == 4243


# ------------------------------------------------------------------------------------ Metadata


def test_metadata_lists_configured_topics(server_factory: Any) -> None:
    srv = server_factory(topic=["orders:3", "payments:1"], node_id=7)
    resp = call(srv, MetadataRequest[1](topics=None), MetadataResponse)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(7, srv.host, srv.port)]
    assert resp.controller_id == 7
    topics = {t.name: t for t in resp.topics}
    assert set(topics) == {"orders", "payments", "__consumer_offsets"}
    assert topics["__consumer_offsets"].is_internal is True
    assert len(topics["__consumer_offsets"].partitions) == 50
    orders = topics["orders"]
    assert orders.error_code == 0 and orders.is_internal is False
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in orders.partitions] == [
        (i, 7, [7], [7]) for i in range(3)
    ]


@pytest.mark.parametrize("version", [0, 4, 9, 12])
def test_metadata_every_version_encodes(server_factory: Any, version: int) -> None:
    srv = server_factory(topic=["orders:2"])
    req = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
                                   allow_auto_topic_creation=False)
    resp = call(srv, req, MetadataResponse)
    [topic] = resp.topics
    assert (topic.name, topic.error_code, len(topic.partitions)) == ("orders", 0, 2)
    if version >= 7:
        assert {p.leader_epoch for p in topic.partitions} == {0}
    if version >= 2:
        assert resp.cluster_id == "coordinator-server-cluster"


def test_metadata_auto_creates_and_keeps_topic_id(server: ServerProcess) -> None:
    req = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="fresh", topic_id=None)],
                              allow_auto_topic_creation=True)
    first = call(server, req, MetadataResponse).topics[0]
    assert (first.name, first.error_code, len(first.partitions)) == ("fresh", 0, 1)
    assert isinstance(first.topic_id, uuid.UUID)
    listed = {t.name: t for t in call(server, MetadataRequest[12](topics=None), MetadataResponse).topics}
    assert listed["fresh"].topic_id == first.topic_id
    # and by id
    by_id = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=first.topic_id)])
    assert call(server, by_id, MetadataResponse).topics[0].name == "fresh"
    # as the Java client asks by id: the name beside it left at its default, the empty string
    java = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="", topic_id=first.topic_id)])
    assert [(t.name, t.error_code) for t in call(server, java, MetadataResponse).topics] == [("fresh", 0)]
    server.wait_for_event("topic_auto_created", topic="fresh")


def test_metadata_unknown_and_invalid_topics(server: ServerProcess) -> None:
    names = ["missing", "bad name!", "x" * 250, "..", "ok.name-1_x"]
    req = MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                             allow_auto_topic_creation=False)
    errors = {t.name: t.error_code for t in call(server, req, MetadataResponse).topics}
    assert errors == {"missing": 3, "bad name!": 17, "x" * 250: 17, "..": 17, "ok.name-1_x": 3}
    # v0-3 always allow auto-creation, invalid names are never created
    req = MetadataRequest[3](topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in ["auto3", "a b"]])
    errors = {t.name: t.error_code for t in call(server, req, MetadataResponse).topics}
    assert errors == {"auto3": 0, "a b": 17}


def test_metadata_empty_list_means_none_from_v1(server: ServerProcess) -> None:
    assert call(server, MetadataRequest[1](topics=[]), MetadataResponse).topics == []
    v0_all = call(server, MetadataRequest[0](topics=[]), MetadataResponse).topics
    assert [t.name for t in v0_all] == ["__consumer_offsets"]


# ----------------------------------------------------------------------------- FindCoordinator


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_group_flat(server: ServerProcess, version: int) -> None:
    req = (FindCoordinatorRequest[version](key="any-group", key_type=0) if version >= 1
           else FindCoordinatorRequest[0](key="any-group"))
    resp = call(server, req, FindCoordinatorResponse)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 0, server.host, server.port)
    if version >= 1:
        assert resp.error_message == "NONE"  # Kafka names the error even when there is none


@pytest.mark.parametrize(("version", "key_type", "error"), [
    (1, 2, 42), (3, 2, 42), (2, 9, 42),
])
def test_find_coordinator_flat_errors(server: ServerProcess, version: int, key_type: int, error: int) -> None:
    resp = call(server, FindCoordinatorRequest[version](key="k", key_type=key_type), FindCoordinatorResponse)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (error, -1, "", -1)
    assert resp.error_message


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched_in_request_order(server: ServerProcess, version: int) -> None:
    keys = ["zeta", "alpha", "", "group-\u00e9"]
    resp = call(server, FindCoordinatorRequest[version](key_type=0, coordinator_keys=keys), FindCoordinatorResponse)
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [
        (k, 0, 0, server.host, server.port) for k in keys
    ]


@pytest.mark.parametrize(("version", "key_type", "error"), [(5, 2, 42), (6, 2, 15), (6, 3, 42)])
def test_find_coordinator_batched_errors(server: ServerProcess, version: int, key_type: int, error: int) -> None:
    req = FindCoordinatorRequest[version](key_type=key_type, coordinator_keys=["a", "b"])
    resp = call(server, req, FindCoordinatorResponse)
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [
        ("a", error, -1, "", -1), ("b", error, -1, "", -1)
    ]
    assert all(c.error_message for c in resp.coordinators)


# ------------------------------------------------------------------ per-connection error handling


@pytest.mark.parametrize("size", [2000, -1, 0, 2**31 - 1])
def test_bad_frame_size_closes_only_that_connection(server_factory: Any, size: int) -> None:
    srv = server_factory(socket_request_max_bytes=1024)
    bystander = connect(srv)
    with connect(srv) as sock:
        # Only the size is sent: the server must refuse before waiting for the body.
        sock.sendall(struct.pack(">i", size))
        assert_closed(sock)
    srv.wait_for_event("invalid_frame_size", size=size)
    send(bystander, ApiVersionsRequest[0]())
    assert recv_frame(bystander) is not None
    bystander.close()
    assert_serves(srv)


def test_max_bytes_frame_is_accepted(server_factory: Any) -> None:
    srv = server_factory(socket_request_max_bytes=1024)
    req = ApiVersionsRequest[0]()
    req.with_header(correlation_id=3, client_id="c" * (1024 - 10))
    data = req.encode(header=True, framed=True)
    assert struct.unpack_from(">i", data)[0] == 1024
    with connect(srv) as sock:
        sock.sendall(data)
        assert recv_frame(sock) is not None


@pytest.mark.parametrize("payload", [
    b"\x00\x12\x00",  # too short for a header
    b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x50abc",  # client id longer than the frame
])
def test_garbage_header_closes_connection(server: ServerProcess, payload: bytes) -> None:
    with connect(server) as sock:
        sock.sendall(frame(payload))
        assert_closed(sock)
    server.wait_for_event("invalid_request_header")
    assert_serves(server)


def test_unknown_api_key_closes_connection(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(frame(raw_header(999, 0, 5, b"who", flexible=False)))
        assert_closed(sock)
    with connect(server) as sock:  # DeleteRecords is a real api we do not serve
        sock.sendall(frame(raw_header(21, 2, 6, b"who", flexible=True) + b"\x00" * 20))
        assert_closed(sock)
    server.wait_for_event("unknown_api_key", api_key=999)
    server.wait_for_event("unknown_api_key", api_key=21)
    assert_serves(server)


@pytest.mark.parametrize("version", [10, 99, -1])
def test_unsupported_join_group_version_closes_connection(server: ServerProcess, version: int) -> None:
    with connect(server) as sock:
        sock.sendall(frame(raw_header(11, version, 8, b"old", flexible=version >= 6) + b"\x00" * 30))
        assert_closed(sock)
    event = server.wait_for_event("unsupported_api_version", api_version=version)
    assert event["api"] == "JoinGroup" and event["client_id"] == "old"
    assert_serves(server)


def test_undecodable_body_closes_connection(server: ServerProcess) -> None:
    good = JoinGroupRequest[0](group_id="g", session_timeout_ms=10000, member_id="", protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])
    good.with_header(correlation_id=9, client_id="trunc")
    data = good.encode(header=True, framed=False)
    with connect(server) as sock:
        sock.sendall(frame(data[:-5]))  # body cut short
        assert_closed(sock)
    server.wait_for_event("invalid_request_body", api="JoinGroup")
    assert_serves(server)


# ------------------------------------------------------------------------------- ordering


def test_pipelined_requests_answered_in_order(server: ServerProcess) -> None:
    with connect(server) as sock:
        reqs: list[tuple[ApiMessage, Any]] = [
            (ApiVersionsRequest[2](), ApiVersionsResponse),
            (MetadataRequest[12](topics=None), MetadataResponse),
            (FindCoordinatorRequest[6](key_type=0, coordinator_keys=["g"]), FindCoordinatorResponse),
            (HeartbeatRequest[4](group_id="no-such-group", generation_id=1, member_id="m",
                                 group_instance_id=None), HeartbeatResponse),
            (ApiVersionsRequest[4](client_software_name="a", client_software_version="1"), ApiVersionsResponse),
        ]
        blob = b""
        for i, (req, _) in enumerate(reqs):
            req.with_header(correlation_id=100 + i, client_id="pipe")
            blob += req.encode(header=True, framed=True)
        sock.sendall(blob)  # all at once: the server must still answer one by one, in order
        for i, (req, resp_cls) in enumerate(reqs):
            payload = recv_frame(sock)
            assert payload is not None
            resp = resp_cls.decode(payload, version=req.API_VERSION, header=True)
            assert resp.header.correlation_id == 100 + i


def test_a_parked_join_holds_the_pipelined_requests_behind_it(server_factory: Any) -> None:
    """One request in flight per connection: a JoinGroup that parks (the group's initial rebalance delay)
    is answered first, and the four requests sent right behind it, which the server could answer at once,
    come after it, in order."""
    import time

    srv = server_factory(initial_rebalance_delay_ms=600)
    with connect(srv) as sock:
        reqs: list[tuple[ApiMessage, Any]] = [
            (join_request(3, "pipelined-join"), JoinGroupResponse),  # v3: no MEMBER_ID_REQUIRED round trip
            (ApiVersionsRequest[2](), ApiVersionsResponse),
            (MetadataRequest[12](topics=None), MetadataResponse),
            (HeartbeatRequest[4](group_id="no-such-group", generation_id=1, member_id="m",
                                 group_instance_id=None), HeartbeatResponse),
            (FindCoordinatorRequest[6](key_type=0, coordinator_keys=["g"]), FindCoordinatorResponse),
        ]
        blob = b""
        for i, (req, _) in enumerate(reqs):
            req.with_header(correlation_id=200 + i, client_id="pipe")
            blob += req.encode(header=True, framed=True)
        sent = time.monotonic()
        sock.sendall(blob)
        for i, (req, resp_cls) in enumerate(reqs):
            payload = recv_frame(sock)
            assert payload is not None
            resp = resp_cls.decode(payload, version=req.API_VERSION, header=True)
            assert resp.header.correlation_id == 200 + i
            if i == 0:
                assert resp.error_code == 0 and resp.leader == resp.member_id  # it parked, then led the group
                assert time.monotonic() - sent >= 0.5  # it waited out the delay; nothing overtook it


def offset_commit(group: str, partition: int, offset: int) -> ApiMessage:
    t = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest[8](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, retention_time_ms=-1,
        topics=[t(name="orders", partitions=[t.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata="")])])


def offset_fetch(group: str) -> ApiMessage:
    g = OffsetFetchRequest.OffsetFetchRequestGroup
    return OffsetFetchRequest[8](groups=[g(group_id=group, member_id=None, member_epoch=-1, topics=[
        g.OffsetFetchRequestTopics(name="orders", partition_indexes=[0, 1, 2])])], require_stable=True)


def fetched(resp: Any) -> dict[int, int]:
    return {p.partition_index: p.committed_offset for t in resp.groups[0].topics for p in t.partitions}


def test_pipelined_durable_commits_answered_in_order_and_seen_by_what_follows(server_factory: Any) -> None:
    """Durable commits are answered from their group-commit round's completion while the loop serves other
    connections: pipelined among requests answered at once, they are still answered in order, a fetch right
    behind a commit on the same connection sees it, and so does a fetch on another connection sent once the
    commit's answer is in."""
    srv = server_factory(topic=["orders:3"])  # fsync always, the default: commits wait for their round
    with connect(srv) as sock, connect(srv) as other:
        for n in range(1, 31):
            reqs: list[tuple[ApiMessage, Any]] = [
                (offset_commit("pipe-a", 0, 100 * n), OffsetCommitResponse),
                (offset_fetch("pipe-a"), OffsetFetchResponse),
                (HeartbeatRequest[4](group_id="no-such-group", generation_id=1, member_id="m",
                                     group_instance_id=None), HeartbeatResponse),
                (offset_commit("pipe-a", 1, 100 * n + 1), OffsetCommitResponse),
                (offset_commit("pipe-b", 2, 100 * n + 2), OffsetCommitResponse),
                (offset_fetch("pipe-a"), OffsetFetchResponse),
                (ApiVersionsRequest[3](client_software_name="a", client_software_version="1"), ApiVersionsResponse),
            ]
            blob = b""
            for i, (req, _) in enumerate(reqs):
                req.with_header(correlation_id=1000 * n + i, client_id="pipe")
                blob += req.encode(header=True, framed=True)
            sock.sendall(blob)
            answers = []
            for i, (req, resp_cls) in enumerate(reqs):
                payload = recv_frame(sock)
                assert payload is not None, f"closed before answer {i} of round {n}"
                resp = resp_cls.decode(payload, version=req.API_VERSION, header=True)
                assert resp.header.correlation_id == 1000 * n + i
                answers.append(resp)
            assert [p.error_code for i in (0, 3, 4) for t in answers[i].topics for p in t.partitions] == [0, 0, 0]
            assert fetched(answers[1])[0] == 100 * n
            after = fetched(answers[5])
            assert (after[0], after[1]) == (100 * n, 100 * n + 1)
            other_fetch = offset_fetch("pipe-b")
            other_fetch.with_header(correlation_id=n, client_id="other")
            other.sendall(other_fetch.encode(header=True, framed=True))
            payload = recv_frame(other)
            assert payload is not None
            assert fetched(OffsetFetchResponse.decode(payload, version=8, header=True))[2] == 100 * n + 2


def test_a_client_gone_before_its_durable_commit_is_answered_harms_no_one(server_factory: Any) -> None:
    """Connections reset right after sending a commit, whose answers come once their round is durable: the
    server keeps serving, and a commit on a live connection is answered and read back."""
    srv = server_factory(topic=["orders:3"])
    for n in range(30):
        sock = connect(srv)
        req = offset_commit("gone", 0, n)
        req.with_header(correlation_id=n, client_id="gone")
        sock.sendall(req.encode(header=True, framed=True))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        sock.close()
    with connect(srv) as sock:
        answer = exchange(sock, offset_commit("gone", 1, 77), OffsetCommitResponse, 1)
        assert [p.error_code for t in answer.topics for p in t.partitions] == [0]
        offsets = fetched(exchange(sock, offset_fetch("gone"), OffsetFetchResponse, 2))
        assert offsets[1] == 77
        assert offsets[0] in {-1, *range(30)}  # a reset may come before the server read a commit
    assert_serves(srv)


# ------------------------------------------------------------------- group APIs through the runtime


def join_request(version: int, group: str, member_id: str = "", session_ms: int = 30000) -> ApiMessage:
    return JoinGroupRequest[version](
        group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", reason=None,
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"sub")],
    )


def exchange(sock: socket.socket, request: ApiMessage, response_cls: Any, correlation_id: int) -> Any:
    send(sock, request, correlation_id)
    payload = recv_frame(sock)
    assert payload is not None, "server closed the connection"
    response = response_cls.decode(payload, version=request.API_VERSION, header=True)
    assert response.header.correlation_id == correlation_id
    return response


@pytest.mark.parametrize("version", [4, 6, 7, 9])
def test_join_group_member_id_required(server: ServerProcess, version: int) -> None:
    resp = call(server, join_request(version, "needs-id"), JoinGroupResponse)
    assert resp.error_code == 79  # MEMBER_ID_REQUIRED, with the id to rejoin with
    assert resp.member_id and resp.generation_id == -1
    assert resp.protocol_name == (None if version >= 7 else "")


def test_group_round_trip_over_one_connection(server_factory: Any) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0)
    with connect(srv) as sock:
        first = exchange(sock, join_request(5, "rt"), JoinGroupResponse, 1)
        assert first.error_code == 79
        joined = exchange(sock, join_request(5, "rt", first.member_id), JoinGroupResponse, 2)
        assert (joined.error_code, joined.generation_id, joined.protocol_name) == (0, 1, "range")
        assert joined.leader == joined.member_id == first.member_id
        assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, b"sub")]
        sync = SyncGroupRequest[5](
            group_id="rt", generation_id=1, member_id=joined.member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a")],
        )
        synced = exchange(sock, sync, SyncGroupResponse, 3)
        assert (synced.error_code, synced.assignment, synced.protocol_type, synced.protocol_name) == (
            0, b"a", "consumer", "range")
        hb = HeartbeatRequest[4](group_id="rt", generation_id=1, member_id=joined.member_id, group_instance_id=None)
        assert exchange(sock, hb, HeartbeatResponse, 4).error_code == 0
        leave = exchange(sock, LeaveGroupRequest[0](group_id="rt", member_id=joined.member_id), LeaveGroupResponse, 5)
        assert leave.error_code == 0
        # LeaveGroup v0 folds the member error: leaving again is UNKNOWN_MEMBER_ID at the top level.
        again = exchange(sock, LeaveGroupRequest[1](group_id="rt", member_id=joined.member_id), LeaveGroupResponse, 6)
        assert again.error_code == 25


def test_sigterm_answers_parked_join_then_exits_zero(server_factory: Any) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0)
    with connect(srv) as a, connect(srv) as b:
        joined = exchange(a, join_request(0, "parked"), JoinGroupResponse, 1)
        assert joined.error_code == 0
        # A second member starts a rebalance that waits for the first to rejoin: its JoinGroup parks.
        send(b, join_request(0, "parked"), 2)
        b.settimeout(0.5)
        with pytest.raises(TimeoutError):
            recv_frame(b)
        b.settimeout(15)
        assert srv.proc is not None
        srv.proc.send_signal(15)
        payload = recv_frame(b)
        assert payload is not None, "the parked JoinGroup was dropped instead of answered"
        resp = JoinGroupResponse.decode(payload, version=0, header=True)
        assert resp.header.correlation_id == 2
        assert resp.error_code == 16  # NOT_COORDINATOR: the client rediscovers and rejoins
        assert_closed(b)
    assert srv.wait() == 0


# ------------------------------------------------------------------------------- real clients


def test_kafka_python_admin_client_bootstraps(server_factory: Any) -> None:
    from kafka import KafkaAdminClient

    srv = server_factory(topic=["orders:3"])
    admin = KafkaAdminClient(bootstrap_servers=srv.address, client_id="shell-admin", request_timeout_ms=10000)
    try:
        assert "orders" in admin.list_topics()
        cluster = admin.describe_cluster()
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(0, srv.host, srv.port)]
        assert cluster["controller_id"] == 0
    finally:
        admin.close()


def test_kafka_python_consumer_sees_partitions(server_factory: Any) -> None:
    from kafka import KafkaConsumer

    srv = server_factory(topic=["orders:3"])
    consumer = KafkaConsumer(bootstrap_servers=srv.address, client_id="shell-consumer", request_timeout_ms=10000,
                             enable_auto_commit=False)
    try:
        assert consumer.partitions_for_topic("orders") == {0, 1, 2}
        assert "orders" in consumer.topics()
    finally:
        consumer.close()
