"""TLS, SASL and ACLs against the real server with real clients (kafka-python, confluent-kafka, aiokafka)
and, where exact error codes matter, kafka-python's message classes over a raw SASL/PLAIN socket.
Certificates are made per session with the `openssl` CLI (the `cryptography` package is not installed)."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from coordinator_server.security.acls import Acl, save_acls
from coordinator_server.security.users import main as users_main
from protocol.consumer_group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.client_contract import (
    aiokafka_commit,
    aiokafka_wait_assigned,
    confluent_commit,
    kafka_python_commit,
    kafka_python_subscribe,
)

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.integration

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}


# ------------------------------------------------------------------------------------------ fixtures


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(d: Path, name: str, cn: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text(ext + "basicConstraints=CA:FALSE\nauthorityKeyIdentifier=keyid\n"
                                   "subjectKeyIdentifier=hash\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost, and client certificates CN=alice, CN=bob."""
    d = tmp_path_factory.mktemp("certs")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=d)
    _leaf(d, "server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    for user in ("alice", "bob"):
        _leaf(d, user, user, "extendedKeyUsage=clientAuth\n")
    return d


@pytest.fixture
def security_files(tmp_path: Path) -> tuple[Path, Path]:
    users = tmp_path / "users.json"
    for name, password in PASSWORDS.items():
        assert users_main(["--file", str(users), "add", name, "--password", password]) == 0
    acls = tmp_path / "acls.json"
    allow = "ALLOW"
    save_acls(acls, [
        Acl("User:alice", allow, "READ", "GROUP", "LITERAL", "app"),
        Acl("User:alice", allow, "DELETE", "GROUP", "LITERAL", "app"),
        Acl("User:alice", allow, "ALL", "TOPIC", "PREFIXED", "orders"),
        Acl("User:bob", allow, "DESCRIBE", "TOPIC", "PREFIXED", "orders"),
        Acl("User:bob", allow, "READ", "GROUP", "LITERAL", "shared"),
    ])
    return users, acls


def ports(srv: ServerProcess) -> dict[str, int]:
    return dict(srv.events("listening")[-1]["listeners"])


# ------------------------------------------------------------------------------- raw protocol client


class Raw:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation_id = 0

    def call(self, request: ApiMessage, response_cls: Any) -> Any:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="security-test")
        self.sock.sendall(request.encode(header=True, framed=True))
        payload = self.recv()
        assert payload is not None, "server closed the connection"
        return response_cls.decode(payload, version=request.API_VERSION, header=True)

    def recv(self) -> bytes | None:
        size = self._exactly(4)
        return None if size is None else self._exactly(struct.unpack(">i", size)[0])

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf


@contextlib.contextmanager
def plain_login(port: int, user: str, password: str) -> Iterator[Raw]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        raw = Raw(sock)
        assert raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse).error_code == 0
        resp = raw.call(SaslAuthenticateRequest[2](auth_bytes=f"\0{user}\0{password}".encode()),
                        SaslAuthenticateResponse)
        assert resp.error_code == 0, resp.error_message
        yield raw


# -------------------------------------------------------------------------------------- real clients


def produce_and_consume(cfg: dict[str, Any], topic: str, group: str, n: int = 5) -> None:
    """kafka-python: produce n records, consume them in a group, commit, and read the commit back."""
    producer = KafkaProducer(**cfg)
    for i in range(n):
        producer.send(topic, f"v{i}".encode())
    producer.flush(timeout=20)
    producer.close()
    consumer = KafkaConsumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **cfg)
    try:
        kafka_python_subscribe(consumer, [topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += records
        assert len(got) == n
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata
        tp = TopicPartition(topic, 0)
        kafka_python_commit(consumer, {tp: OffsetAndMetadata(n, "", -1)})
        assert consumer.committed(tp) == n
    finally:
        consumer.close()


# -------------------------------------------------------------------------------------------- TLS


def test_tls_listener_serves_a_group_and_refuses_plaintext(server_factory: ServerFactory, certs: Path) -> None:
    srv = server_factory(listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", tls_cert=certs / "server.pem",
                         tls_key=certs / "server.key", initial_rebalance_delay_ms=0)
    p = ports(srv)
    tls_cfg = {"bootstrap_servers": f"127.0.0.1:{p['SSL']}", "security_protocol": "SSL",
               "ssl_cafile": str(certs / "ca.pem")}
    produce_and_consume(tls_cfg, "orders", "app")

    # Metadata answers with the address of the listener the request came in on.
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with socket.create_connection(("127.0.0.1", p["SSL"]), timeout=10) as tcp, \
            ctx.wrap_socket(tcp, server_hostname="localhost") as tls:
        meta = Raw(tls).call(MetadataRequest[9](topics=None, allow_auto_topic_creation=False), MetadataResponse)
        assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", p["SSL"])]
    with socket.create_connection(("127.0.0.1", p["PLAINTEXT"]), timeout=10) as sock:
        meta = Raw(sock).call(MetadataRequest[9](topics=None, allow_auto_topic_creation=False), MetadataResponse)
        assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", p["PLAINTEXT"])]

    # A plaintext Kafka request to the TLS port: the handshake fails and only that socket is closed.
    with socket.create_connection(("127.0.0.1", p["SSL"]), timeout=10) as sock:
        request = ApiVersionsRequest[0]()
        request.with_header(correlation_id=1, client_id="plain")
        sock.sendall(request.encode(header=True, framed=True))
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        assert b"\x00\x00\x00\x01" not in data[:8]  # no Kafka response, at most a TLS alert
    assert srv.running
    produce_and_consume(tls_cfg, "orders-2", "app2")


def test_ssl_client_certificate_is_the_principal(server_factory: ServerFactory, certs: Path, tmp_path: Path) -> None:
    acls = tmp_path / "acls.json"
    save_acls(acls, [Acl("User:alice", "ALLOW", "ALL", "TOPIC", "LITERAL", "*"),
                     Acl("User:alice", "ALLOW", "READ", "GROUP", "LITERAL", "app")])
    srv = server_factory(listeners="SSL://127.0.0.1:0", tls_cert=certs / "server.pem", tls_key=certs / "server.key",
                         tls_ca=certs / "ca.pem", acl_file=acls, initial_rebalance_delay_ms=0)
    port = ports(srv)["SSL"]
    from confluent_kafka import Consumer, Producer
    base = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.pem")}
    alice = {**base, "ssl.certificate.location": str(certs / "alice.pem"), "ssl.key.location": str(certs / "alice.key")}
    producer = Producer(alice)
    for i in range(3):
        producer.produce("orders", f"v{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**alice, "group.id": "app", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == 3
    confluent_commit(consumer)
    consumer.close()

    # bob's certificate is valid but bob has no ACLs; a client without a certificate cannot connect at all.
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.load_cert_chain(str(certs / "bob.pem"), str(certs / "bob.key"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as tcp, \
            ctx.wrap_socket(tcp, server_hostname="localhost") as tls:
        resp = Raw(tls).call(FindCoordinatorRequest[2](key="app", key_type=0), FindCoordinatorResponse)
        assert resp.error_code == 30
    no_cert = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    # TLS 1.3 reports the missing certificate after the handshake: the first read fails or sees EOF.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as tcp, \
            no_cert.wrap_socket(tcp, server_hostname="localhost") as tls, \
            pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        Raw(tls).call(ApiVersionsRequest[0](), ApiVersionsResponse)
    assert srv.running


# ------------------------------------------------------------------------------------- SASL + ACLs


def test_sasl_scram_group_acls(server_factory: ServerFactory, security_files: tuple[Path, Path]) -> None:
    users, acls = security_files
    srv = server_factory(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_users_file=users, acl_file=acls,
                         super_users="User:admin", initial_rebalance_delay_ms=0)
    port = ports(srv)["SASL_PLAINTEXT"]
    scram = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SASL_PLAINTEXT",
             "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
             "sasl_plain_password": PASSWORDS["alice"]}
    produce_and_consume(scram, "orders", "app")

    with plain_login(port, "bob", PASSWORDS["bob"]) as bob:
        join = bob.call(JoinGroupRequest[5](group_id="app", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                            member_id="", group_instance_id=None, protocol_type="consumer",
                                            protocols=[]), JoinGroupResponse)
        assert join.error_code == 30
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        commit = bob.call(OffsetCommitRequest[8](group_id="app", generation_id_or_member_epoch=-1, member_id="",
                                                 group_instance_id=None, topics=[Topic(name="orders", partitions=[
                                                     Topic.OffsetCommitRequestPartition(
                                                         partition_index=0, committed_offset=1,
                                                         committed_leader_epoch=-1, committed_metadata="")])]),
                          OffsetCommitResponse)
        assert [p.error_code for t in commit.topics for p in t.partitions] == [30]
        fetch = bob.call(OffsetFetchRequest[7](group_id="app", topics=None, require_stable=False), OffsetFetchResponse)
        assert fetch.error_code == 30
        described = bob.call(DescribeGroupsRequest[5](groups=["app"], include_authorized_operations=False),
                             DescribeGroupsResponse)
        assert [g.error_code for g in described.groups] == [30]

        def consumer_heartbeat(group: str, topics: list[str]) -> Any:
            return bob.call(ConsumerGroupHeartbeatRequest[1](
                group_id=group, member_id="m-bob", member_epoch=0, instance_id=None, rack_id=None,
                rebalance_timeout_ms=10000, subscribed_topic_names=topics, subscribed_topic_regex=None,
                server_assignor=None, topic_partitions=[]), ConsumerGroupHeartbeatResponse)
        # KIP-848: READ on the group, then DESCRIBE on every subscribed topic, as Kafka's API layer checks.
        assert consumer_heartbeat("app", ["orders"]).error_code == 30
        assert consumer_heartbeat("shared", ["orders", "payroll"]).error_code == 29
        c_described = bob.call(ConsumerGroupDescribeRequest[1](group_ids=["app"], include_authorized_operations=False),
                               ConsumerGroupDescribeResponse)
        assert [g.error_code for g in c_described.groups] == [30]
        coordinator = bob.call(FindCoordinatorRequest[2](key="app", key_type=0), FindCoordinatorResponse)
        assert coordinator.error_code == 30
        listed = bob.call(ListGroupsRequest[4](states_filter=[]), ListGroupsResponse)
        assert "app" not in [g.group_id for g in listed.groups]
        deleted = bob.call(DeleteGroupsRequest[2](groups_names=["shared", "app"]), DeleteGroupsResponse)
        assert sorted((r.group_id, r.error_code) for r in deleted.results) == [("app", 30), ("shared", 30)]
        meta = bob.call(MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name="secret")],
                                           allow_auto_topic_creation=True), MetadataResponse)
        assert [(t.name, t.error_code) for t in meta.topics] == [("secret", 29)]
        PTopic = ProduceRequest.TopicProduceData
        produced = bob.call(ProduceRequest[8](transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
            PTopic(name="orders", partition_data=[PTopic.PartitionProduceData(index=0, records=b"")])]),
            ProduceResponse)
        assert [p.error_code for t in produced.responses for p in t.partition_responses] == [29]

    with plain_login(port, "alice", PASSWORDS["alice"]) as alice:
        # Group allowed, topic not: TOPIC_AUTHORIZATION_FAILED for that topic's partitions only.
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        part = Topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                  committed_metadata="")
        commit = alice.call(OffsetCommitRequest[8](group_id="app", generation_id_or_member_epoch=-1, member_id="",
                                                   group_instance_id=None,
                                                   topics=[Topic(name="payroll", partitions=[part])]),
                            OffsetCommitResponse)
        assert [p.error_code for t in commit.topics for p in t.partitions] == [29]
        deleted = alice.call(DeleteGroupsRequest[2](groups_names=["app"]), DeleteGroupsResponse)
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("app", 0)]

    with plain_login(port, "admin", PASSWORDS["admin"]) as admin:  # super user
        fetch = admin.call(OffsetFetchRequest[7](group_id="shared", topics=None, require_stable=False),
                           OffsetFetchResponse)
        assert fetch.error_code == 0


def test_sasl_failures_close_cleanly(server_factory: ServerFactory, security_files: tuple[Path, Path]) -> None:
    users, _acls = security_files
    # kafka-python retries fast: keep the failure delay of (127.0.0.1, alice) below the raw socket's timeout
    srv = server_factory(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_users_file=users,
                         failed_authentication_max_delay_ms=1000)
    port = ports(srv)["SASL_PLAINTEXT"]
    from kafka.errors import KafkaError
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="wrong",
                      max_block_ms=3000, reconnect_backoff_max_ms=200)
    srv.wait_for_event("sasl_authentication_failed", mechanism="SCRAM-SHA-512")

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        raw = Raw(sock)
        assert raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse).error_code == 0
        resp = raw.call(SaslAuthenticateRequest[2](auth_bytes=b"\0alice\0nope"), SaslAuthenticateResponse)
        assert resp.error_code == 58 and "invalid credentials" in resp.error_message
        assert raw.recv() is None  # closed after the answer
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        raw = Raw(sock)  # ApiVersions is served before authentication, anything else closes
        assert raw.call(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                        ApiVersionsResponse).error_code == 0
        meta = MetadataRequest[9](topics=None, allow_auto_topic_creation=False)
        meta.with_header(correlation_id=9, client_id="t")
        sock.sendall(meta.encode(header=True, framed=True))
        assert raw.recv() is None
    srv.wait_for_event("sasl_unexpected_request", api="Metadata")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        raw = Raw(sock)
        resp = raw.call(SaslHandshakeRequest[1](mechanism="GSSAPI"), SaslHandshakeResponse)
        assert resp.error_code == 33 and "SCRAM-SHA-256" in resp.mechanisms
    with plain_login(port, "alice", PASSWORDS["alice"]) as alice:  # still serving, and ILLEGAL_SASL_STATE after auth
        again = alice.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse)
        assert again.error_code == 34
        assert alice.call(ApiVersionsRequest[0](), ApiVersionsResponse).error_code == 0


def test_failed_authentications_are_delayed_never_refused(server_factory: ServerFactory,
                                                         security_files: tuple[Path, Path]) -> None:
    users, _acls = security_files
    srv = server_factory(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_users_file=users,
                         connections_failed_authentication_delay_ms=20, failed_authentication_max_delay_ms=200)
    port = ports(srv)["SASL_PLAINTEXT"]
    # Password guessing from one address: each failure of (address, alice) is answered later than the last,
    # up to the ceiling, and the right password is accepted at once in between and after.
    held = []
    for _ in range(6):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            raw = Raw(sock)
            raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse)
            started = time.monotonic()
            resp = raw.call(SaslAuthenticateRequest[2](auth_bytes=b"\0alice\0guess"), SaslAuthenticateResponse)
            held.append(time.monotonic() - started)
            assert resp.error_code == 58 and "invalid credentials" in resp.error_message
    delays = [e["delay_ms"] for e in srv.events("sasl_authentication_failed")]
    assert delays == [20, 40, 80, 160, 200, 200]
    assert held[-1] >= 0.19
    started = time.monotonic()
    with plain_login(port, "alice", PASSWORDS["alice"]) as alice:
        assert alice.call(ApiVersionsRequest[0](), ApiVersionsResponse).error_code == 0
    assert time.monotonic() - started < 2.0  # not held: the delay is for failures only


def test_sasl_ssl_with_aiokafka_scram512_and_confluent_plain(server_factory: ServerFactory, certs: Path,
                                                             security_files: tuple[Path, Path]) -> None:
    users, acls = security_files
    srv = server_factory(listeners="SASL_SSL://127.0.0.1:0", sasl_users_file=users, acl_file=acls,
                         tls_cert=certs / "server.pem", tls_key=certs / "server.key", initial_rebalance_delay_ms=0)
    port = ports(srv)["SASL_SSL"]
    from confluent_kafka import Consumer, Producer
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": PASSWORDS["alice"], "ssl.ca.location": str(certs / "ca.pem")}
    producer = Producer(conf)
    for i in range(3):
        producer.produce("orders-eu", f"v{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": "app", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders-eu"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == 3
    confluent_commit(consumer)
    consumer.close()
    asyncio.run(_aiokafka_scram512(port, certs))


async def _aiokafka_scram512(port: int, certs: Path) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context
    cfg: dict[str, Any] = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SASL_SSL",
                           "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
                           "sasl_plain_password": PASSWORDS["alice"],
                           "ssl_context": create_ssl_context(cafile=str(certs / "ca.pem"))}
    producer = AIOKafkaProducer(**cfg)
    await producer.start()
    try:
        await producer.send_and_wait("orders-eu", b"from-aiokafka")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer("orders-eu", group_id="app", auto_offset_reset="earliest",
                                enable_auto_commit=False, **cfg)
    await consumer.start()
    try:
        await aiokafka_wait_assigned(consumer, 1)
        records: list[Any] = []
        deadline = time.monotonic() + 20
        while not records and time.monotonic() < deadline:
            records += [r for rs in (await consumer.getmany(timeout_ms=500)).values() for r in rs]
        assert records
        await aiokafka_commit(consumer)
        assert await consumer.committed(TopicPartition("orders-eu", 0)) is not None
    finally:
        await consumer.stop()
