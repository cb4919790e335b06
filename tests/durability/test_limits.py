"""Limits that protect the server from its clients (issue 5), over the real server: connection counts
(max.connections, max.connections.per.ip), the one-request-in-flight read-ahead bound, group.max.size
over the wire, and the size of a group record (Kafka's message.max.bytes of __consumer_offsets).

Each limit answers with Kafka's error code or closes just that connection, and logs one structured line.
"""
from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from kafka.protocol.consumer import JoinGroupResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from tests.integration.group_client import (
    NONE,
    Connection,
    GroupMember,
    close_all,
    wait_until,
)

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.durability

GROUP_MAX_SIZE_REACHED = 81
UNKNOWN_SERVER_ERROR = -1


def api_versions_ok(conn: Connection) -> bool:
    return int(conn.call(ApiVersionsRequest[3](client_software_name="limits", client_software_version="1"),
                         ApiVersionsResponse, timeout_s=5).error_code) == NONE


def connect_from(srv: ServerProcess, source_ip: str) -> Connection:
    conn = Connection.__new__(Connection)
    conn.client_id = "limits"
    conn.sock = socket.create_connection((srv.host, srv.port), timeout=5, source_address=(source_ip, 0))
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def closed_at_once(conn: Connection, timeout_s: float = 5.0) -> bool:
    """The server closed this connection without reading a request (EOF or reset, no bytes)."""
    conn.sock.settimeout(timeout_s)
    try:
        return conn.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def local_peer(conn: Connection) -> str:
    host, port = conn.sock.getsockname()[:2]
    return f"{host}:{port}"


def test_max_connections_closes_new_connections_and_keeps_open_ones(server_factory: ServerFactory) -> None:
    srv = server_factory(max_connections=3)
    conns = [Connection((srv.host, srv.port), f"c{i}") for i in range(3)]
    try:
        assert all(api_versions_ok(c) for c in conns)
        extra = Connection((srv.host, srv.port), "extra")
        assert closed_at_once(extra)
        refused = srv.wait_for_event("connection_refused", peer=local_peer(extra))
        assert (refused["reason"], refused["limit"], refused["open"], refused["level"]) == (
            "max_connections", 3, 3, "warning")
        extra.close()
        assert all(api_versions_ok(c) for c in conns), "open connections must be unaffected"
        # A slot frees when a connection closes.
        conns.pop().close()

        def reconnects() -> bool:
            c = Connection((srv.host, srv.port), "again")
            try:
                return api_versions_ok(c)
            except OSError:
                return False
            finally:
                c.close()

        wait_until(reconnects, timeout_s=5, what="a connection accepted again once one closed")
    finally:
        for c in conns:
            c.close()


def test_max_connections_per_ip_counts_each_client_address(server_factory: ServerFactory) -> None:
    srv = server_factory(max_connections_per_ip=2)
    mine = [connect_from(srv, "127.0.0.1") for _ in range(2)]
    others: list[Connection] = []
    try:
        assert all(api_versions_ok(c) for c in mine)
        third = connect_from(srv, "127.0.0.1")
        assert closed_at_once(third)
        refused = srv.wait_for_event("connection_refused", peer=local_peer(third))
        assert (refused["reason"], refused["limit"], refused["open"]) == ("max_connections_per_ip", 2, 2)
        third.close()
        # Another client address has its own count (the whole 127/8 is loopback on Linux).
        others = [connect_from(srv, "127.0.0.2") for _ in range(2)]
        assert all(api_versions_ok(c) for c in others + mine)
    finally:
        close_all_conns(mine + others)


def close_all_conns(conns: list[Connection]) -> None:
    for c in conns:
        c.close()


def test_pipelined_frames_are_not_read_ahead(server_factory: ServerFactory) -> None:
    """queued.max.request.bytes: with one request in flight and nothing read ahead, what a client sends
    behind a parked request stays in the socket buffers (plus at most asyncio's 2 x 64 KiB reader
    buffer), so the client's sends block long before it has written everything."""
    srv = server_factory(initial_rebalance_delay_ms=3000)
    member = GroupMember(srv, "parked", "p")
    try:
        parked = member.send_join(version=3)  # the initial rebalance delay parks it for 3 s
        frame_size = 1 << 20
        req = ApiVersionsRequest[3](client_software_name="x" * (frame_size - 64), client_software_version="1")
        req.with_header(correlation_id=7, client_id="pipe")
        frame = req.encode(header=True, framed=True)
        total = 128 * len(frame)
        sock = member.conn.sock
        sock.setblocking(False)
        written, deadline = 0, time.monotonic() + 1.0
        view = memoryview(frame)
        while written < total and time.monotonic() < deadline:
            try:
                n = sock.send(view[written % len(frame):])
            except BlockingIOError:
                time.sleep(0.01)
                continue
            written += n
        sock.setblocking(True)
        sock.settimeout(15)
        # Loopback socket buffers autotune to a few MiB at most; the server must not have taken 128 MiB.
        assert written < 24 * frame_size, f"the server read ahead: {written} bytes accepted"
        assert not parked.answered_within(0), "the JoinGroup should still be parked"
        assert parked.result(timeout_s=10).error_code == NONE
    finally:
        member.close()
    assert api_versions_ok(Connection((srv.host, srv.port), "after"))


def test_group_max_size_answers_group_max_size_reached(server_factory: ServerFactory) -> None:
    srv = server_factory(group_max_size=2, initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
    a, b, c = (GroupMember(srv, "full", name) for name in "abc")
    try:
        assert a.join().error_code == NONE
        a.sync({a.member_id: b"A"})
        pb = b.send_join()
        wait_until(lambda: a.heartbeat() == 27, what="rebalance for b")
        pa = a.send_join()
        assert [pa.result().error_code, pb.result().error_code] == [NONE, NONE]
        # v5 answers at the MEMBER_ID_REQUIRED step already (the size is checked first), v3 directly.
        assert c.send_join(version=3).result().error_code == GROUP_MAX_SIZE_REACHED
        first = c.conn.call(c.join_request(5, member_id=""), JoinGroupResponse)
        assert first.error_code == GROUP_MAX_SIZE_REACHED
        assert a.heartbeat() == NONE and b.heartbeat() == NONE, "the full group is unaffected"
    finally:
        close_all([a, b, c])


def test_group_record_over_message_max_bytes_fails_the_sync(server_factory: ServerFactory) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
    m = GroupMember(srv, "huge", "h")
    try:
        assert m.join().error_code == NONE
        resp: Any = m.sync({m.member_id: b"\x00" * (2 * 1_048_588)})
        assert resp.error_code == UNKNOWN_SERVER_ERROR
    finally:
        m.close()
