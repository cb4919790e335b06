"""One bad client must never hurt the others (issue 14): each misbehaving client runs beside a healthy
group of real clients (healthy_group.py) and the group must keep heartbeating, committing and consuming."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from coordinator_server.security.users import main as users_main

from .conftest import ServerFactory
from .healthy_group import HealthyGroup
from .test_security import Raw, ports

pytestmark = pytest.mark.integration

WINDOW_S = 4.0


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
