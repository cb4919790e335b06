"""One bad client must never hurt the others (issue 14): each misbehaving client runs beside a healthy
group of real clients (healthy_group.py) and the group must keep heartbeating, committing and consuming."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.consumer import JoinGroupResponse, OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from coordinator_server.group.partitioner import partition_for
from coordinator_server.security.users import main as users_main

from .conftest import ServerFactory
from .healthy_group import HealthyGroup
from .hostile_load import (
    api_versions_frame,
    capture,
    fds,
    fetch_frame,
    join_frames,
    offsets_log_bytes,
    rss_kb,
)
from .test_security import Raw, ports

pytestmark = pytest.mark.integration

WINDOW_S = 4.0
GROUPS_CREATED = 1000
CHURN_CONNECTIONS = 1000


def _sasl(user: str, password: str, mechanism: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def test_wrong_password_retrying_does_not_lock_out_its_address(server_factory: ServerFactory,
                                                               tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    for name in ("alice", "bob"):
        assert users_main(["--file", str(users), "add", name, "--password", f"{name}-secret"]) == 0
    srv = server_factory(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_users_file=users,
                         initial_rebalance_delay_ms=0, topic=["orders:2"],
                         connections_failed_authentication_delay_ms=20, failed_authentication_max_delay_ms=2000)
    bootstrap = f"127.0.0.1:{ports(srv)['SASL_PLAINTEXT']}"
    stop = threading.Event()

    def typo_client() -> None:  # one service's config has alice's password wrong; librdkafka retries fast
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": bootstrap, **_sasl("alice", "alice-secreT", "SCRAM-SHA-256"),
                      "group.id": "typo", "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
        c.subscribe(["orders"])
        while not stop.is_set():
            c.poll(0.1)
        c.close()

    def guesser() -> None:  # and someone guesses bob's password as fast as the server answers
        port = int(bootstrap.rsplit(":", 1)[1])
        i = 0
        while not stop.is_set():
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                raw = Raw(sock)
                raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse)
                raw.call(SaslAuthenticateRequest[2](auth_bytes=f"\0bob\0guess{i}".encode()), SaslAuthenticateResponse)
            i += 1

    bad = [threading.Thread(target=typo_client, daemon=True), threading.Thread(target=guesser, daemon=True)]
    for t in bad:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while len(srv.events("sasl_authentication_failed")) < 15 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(srv.events("sasl_authentication_failed")) >= 15  # past the old per-address lockout (10)
        # Correct clients on the same address, with the same user names as the failing ones, both SCRAMs.
        with HealthyGroup(bootstrap, "orders", "alice-app", members=2,
                          conf=_sasl("alice", "alice-secret", "SCRAM-SHA-256")) as alice, \
                HealthyGroup(bootstrap, "orders", "bob-app", members=1,
                             conf=_sasl("bob", "bob-secret", "SCRAM-SHA-512")) as bob:
            alice.wait_running()
            bob.wait_running()
            alice.assert_healthy(srv, WINDOW_S)
            bob.assert_healthy(srv, 1.0)
    finally:
        stop.set()
        for t in bad:
            t.join(15)
    failures = srv.events("sasl_authentication_failed")
    assert {e["user"] for e in failures} == {"alice", "bob"}
    assert max(e["delay_ms"] for e in failures if e["user"] == "bob") > 1000  # the guesser was slowed down


def test_client_that_never_reads_its_responses(server_factory: ServerFactory) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0, topic=["orders:2"], max_unsent_response_bytes=65536,
                         connections_max_idle_ms=3000)
    bootstrap = srv.address
    assert srv.proc is not None
    with HealthyGroup(bootstrap, "orders", "app", members=2) as group:
        group.wait_running()
        rss_before = rss_kb(srv.proc.pid)
        socks = []
        for _ in range(3):  # three clients send requests and never read a byte
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((srv.host, srv.port))
            sock.setblocking(False)
            socks.append(sock)
        sent = [0] * len(socks)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(srv.events("connection_reads_paused")) < len(socks):
            for i, sock in enumerate(socks):
                try:
                    sock.send(fetch_frame(sent[i]))  # each answered with all of orders/0 (up to 1 MiB)
                    sent[i] += 1
                except BlockingIOError:
                    pass  # the server stopped reading us: our send buffer is full
            time.sleep(0.01)
        paused = srv.events("connection_reads_paused")
        assert len(paused) >= len(socks), f"sent {sent}, paused {paused}"
        group.assert_healthy(srv, WINDOW_S)
        growth_kb = rss_kb(srv.proc.pid) - rss_before
        assert growth_kb < 30_000, f"server RSS grew {growth_kb} kB"
        # nothing read for connections.max.idle.ms: closed, with the reason
        srv.wait_for_event("connection_timed_out", timeout_s=10, reason="unsent_responses")
        group.assert_healthy(srv, 1.0)
        for sock in socks:
            sock.close()


def test_slow_loris_is_closed_after_max_idle(server_factory: ServerFactory) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0, topic=["orders:2"], connections_max_idle_ms=2000)
    with HealthyGroup(srv.address, "orders", "app", members=2) as group:
        group.wait_running()
        frame = api_versions_frame(1)
        socks = [socket.create_connection((srv.host, srv.port), timeout=10) for _ in range(20)]
        stop = threading.Event()

        def drip() -> None:  # one byte at a time, 5 a second, of a frame header then body
            i = 0
            while not stop.is_set() and i < len(frame):
                for sock in socks:
                    with contextlib.suppress(OSError):
                        sock.send(frame[i:i + 1])
                i += 1
                time.sleep(0.2)

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        started = time.monotonic()
        group.assert_healthy(srv, WINDOW_S)
        stop.set()
        dripper.join(5)
        closed = srv.events("connection_timed_out")
        assert len([e for e in closed if e["reason"] == "partial_frame"]) >= len(socks), closed
        for sock in socks:  # closed by the server: EOF
            sock.settimeout(5)
            assert sock.recv(100) == b""
            sock.close()
        assert time.monotonic() - started < 10


def test_join_flood_without_member_id_keeps_pending_members_bounded(server_factory: ServerFactory) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0, topic=["orders:2"], group_max_pending_members=100)
    assert srv.proc is not None
    with HealthyGroup(srv.address, "orders", "app", members=2) as group:
        group.wait_running()
        rss_before = rss_kb(srv.proc.pid)
        answered = 0
        with socket.create_connection((srv.host, srv.port), timeout=10) as sock:
            raw = Raw(sock)
            deadline = time.monotonic() + WINDOW_S
            errors: list[BaseException] = []  # the healthy group is watched while this thread floods
            checker = threading.Thread(target=capture, args=(errors, group.assert_healthy, srv, WINDOW_S - 0.5))
            checker.start()
            while time.monotonic() < deadline:  # pipelined, 200 at a time, into the healthy group itself
                sock.sendall(join_frames("app", answered, 200))
                for _ in range(200):
                    payload = raw.recv()
                    assert payload is not None
                    assert JoinGroupResponse.decode(payload, version=5, header=True).error_code == 79
                    answered += 1
            checker.join()
            assert not errors, errors[0]
        assert answered > 1000
        evicted = srv.events("pending_members_evicted")
        assert evicted and evicted[-1]["group_id"] == "app" and evicted[-1]["evicted"] >= answered // 2 - 100
        assert rss_kb(srv.proc.pid) - rss_before < 30_000
        group.assert_healthy(srv, 1.0)




def test_connection_churn_leaks_no_descriptors_or_memory(server_factory: ServerFactory) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0, topic=["orders:2"])
    assert srv.proc is not None
    pid = srv.proc.pid
    with HealthyGroup(srv.address, "orders", "app", members=2) as group:
        group.wait_running()
        fds_before, rss_before = fds(pid), rss_kb(pid)
        frame = api_versions_frame(1)
        started, n = time.monotonic(), 0
        errors: list[BaseException] = []
        checker = threading.Thread(target=capture, args=(errors, group.assert_healthy, srv, WINDOW_S - 0.5))
        checker.start()
        # Connect and close, in four manners, as fast as we can, for the window and at least CHURN_CONNECTIONS
        # times (a count, not a rate: speed belongs to the benchmarks; a CI machine may be slow).
        while time.monotonic() - started < WINDOW_S or n < CHURN_CONNECTIONS:
            with socket.create_connection((srv.host, srv.port), timeout=10) as sock:
                kind = n % 4
                if kind == 1:
                    sock.sendall(frame)
                    assert Raw(sock).recv() is not None
                elif kind == 2:
                    sock.sendall(frame[:7])  # closed mid-frame
                elif kind == 3:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
            n += 1
        checker.join()
        assert not errors, errors[0]
        deadline = time.monotonic() + 5
        while fds(pid) > fds_before + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fds(pid) <= fds_before + 2, f"{n} connections: fds {fds_before} -> {fds(pid)}"
        assert rss_kb(pid) - rss_before < 20_000, f"{n} connections: RSS {rss_before} -> {rss_kb(pid)} kB"


def test_groups_created_and_deleted_return_to_baseline(server_factory: ServerFactory) -> None:
    srv = server_factory(initial_rebalance_delay_ms=0, topic=["orders:2"], offsets_partitions=4,
                         log_roll_ms=1000, log_cleaner_backoff_ms=300, delete_retention_ms=0)
    assert srv.proc is not None
    pid = srv.proc.pid
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    part = T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                          committed_metadata="")
    # A segment rolls only when something is appended to its partition (as in Kafka), and only sealed
    # segments are compacted: a keeper group in every partition commits all along, so every partition rolls.
    keepers = [next(f"keeper-{i}" for i in range(1000) if partition_for(f"keeper-{i}", 4) == p) for p in range(4)]
    stop = threading.Event()

    def keep() -> None:
        with socket.create_connection((srv.host, srv.port), timeout=10) as sock:
            raw = Raw(sock)
            while not stop.wait(0.25):
                for name in keepers:
                    raw.call(OffsetCommitRequest[8](group_id=name, generation_id_or_member_epoch=-1, member_id="",
                                                    group_instance_id=None, topics=[T(name="orders", partitions=[part])]),
                             OffsetCommitResponse)

    keeper = threading.Thread(target=keep, daemon=True)
    keeper.start()
    try:
        with HealthyGroup(srv.address, "orders", "app", members=2) as group:
            group.wait_running()
            time.sleep(3)  # a few rolls and cleanings of the steady load's own commits
            bytes_before, rss_before = offsets_log_bytes(srv.data_dir), rss_kb(pid)
            groups_before = len(srv.events("group_deleted"))
            created = 0
            with socket.create_connection((srv.host, srv.port), timeout=10) as sock:
                raw = Raw(sock)
                # A count, not a rate (speed belongs to the benchmarks): CI machines run this beside other
                # suites. The deadline only guards against a hang.
                deadline = time.monotonic() + 120
                while created < GROUPS_CREATED:
                    assert time.monotonic() < deadline, f"only {created} groups created and deleted in 120 s"
                    names = [f"tmp-{created + i}" for i in range(100)]
                    for name in names:
                        commit = raw.call(OffsetCommitRequest[8](group_id=name, generation_id_or_member_epoch=-1,
                                                                 member_id="", group_instance_id=None,
                                                                 topics=[T(name="orders", partitions=[part])]),
                                          OffsetCommitResponse)
                        assert commit.topics[0].partitions[0].error_code == 0
                    deleted = raw.call(DeleteGroupsRequest[2](groups_names=names), DeleteGroupsResponse)
                    assert {r.error_code for r in deleted.results} == {0}
                    created += len(names)
            assert created == GROUPS_CREATED
            # The server logs each `group_deleted` before its answer, but this process reads the server's
            # stderr on a thread of its own, which can be a few lines behind the socket on a loaded machine.
            deadline = time.monotonic() + 10
            while len(srv.events("group_deleted")) - groups_before < created and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(srv.events("group_deleted")) - groups_before == created
            grown = offsets_log_bytes(srv.data_dir)
            deadline = time.monotonic() + 20
            while offsets_log_bytes(srv.data_dir) > bytes_before + 16_384 and time.monotonic() < deadline:
                time.sleep(0.2)
            after = offsets_log_bytes(srv.data_dir)
            assert after <= bytes_before + 16_384, f"log bytes {bytes_before} -> {grown} -> {after}"
            group.assert_healthy(srv, 1.0)
            assert rss_kb(pid) - rss_before < 20_000, f"{created} groups: RSS {rss_before} -> {rss_kb(pid)} kB"
    finally:
        stop.set()
        keeper.join(5)
