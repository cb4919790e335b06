"""SCRAM (RFC 7677 vector), PLAIN against SCRAM data, the ACL matcher, the failure limiter, the users and
ACL files and their subcommands."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from coordinator_server.security import scram
from coordinator_server.security.acls import Acl, load_acls
from coordinator_server.security.acls import main as acls_main
from coordinator_server.security.auth_throttle import AuthFailureThrottle
from coordinator_server.security.authorizer import Access, Authorizer
from coordinator_server.security.listeners import parse_listeners, peer_cert_cn
from coordinator_server.security.sasl import SaslConfig, SaslFailed, SaslSession, SaslState
from coordinator_server.security.users import load_users
from coordinator_server.security.users import main as users_main

# ----------------------------------------------------------------------------------------- SCRAM

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_SNONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def test_scram_sha256_rfc7677_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    cred = scram.make_credential("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda n: RFC7677_SNONCE)
    server = scram.ScramServer("SCRAM-SHA-256", {"user": cred}, b"k")
    first = server.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.client_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.done and server.username == "user"


def scram_client(mechanism: str, user: str, password: str, server: scram.ScramServer) -> bytes:
    """A minimal RFC 5802 client, to drive the server through a whole exchange."""
    alg = scram.MECHANISMS[mechanism]
    bare = f"n={user},r=clientnonce"
    first = server.client_first(f"n,,{bare}".encode()).decode()
    attrs = dict(a.split("=", 1) for a in first.split(","))
    sp = hashlib.pbkdf2_hmac(alg, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(sp, b"Client Key", alg).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{first},{without_proof}".encode()
    sig = hmac.new(hashlib.new(alg, client_key).digest(), auth, alg).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True))).decode()
    return server.client_final(f"{without_proof},p={proof}".encode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_wrong_password(mechanism: str) -> None:
    users = {"alice": scram.make_credential(mechanism, "secret")}
    assert scram_client(mechanism, "alice", "secret", scram.ScramServer(mechanism, users, b"k")).startswith(b"v=")
    with pytest.raises(scram.ScramError):
        scram_client(mechanism, "alice", "wrong", scram.ScramServer(mechanism, users, b"k"))


def test_scram_unknown_user_fails_only_at_the_proof() -> None:
    server = scram.ScramServer("SCRAM-SHA-256", {}, b"k")
    first = server.client_first(b"n,,n=mallory,r=abc")  # answered like a real user: no enumeration
    assert b",s=" in first and b",i=4096" in first
    with pytest.raises(scram.ScramError):
        scram_client("SCRAM-SHA-256", "mallory", "x", scram.ScramServer("SCRAM-SHA-256", {}, b"k"))


def test_scram_refuses_channel_binding_and_low_iterations() -> None:
    with pytest.raises(scram.ScramError):
        scram.ScramServer("SCRAM-SHA-256", {}, b"k").client_first(b"p=tls-unique,,n=a,r=b")
    with pytest.raises(ValueError):
        scram.make_credential("SCRAM-SHA-256", "pw", iterations=100)


def test_plain_checks_against_scram_data() -> None:
    cred = scram.make_credential("SCRAM-SHA-512", "pw")
    assert scram.check_password("SCRAM-SHA-512", cred, "pw")
    assert not scram.check_password("SCRAM-SHA-512", cred, "pW")


class _Users:
    def __init__(self, users: dict[str, dict[str, scram.ScramCredential]]) -> None:
        self.users = users

    def get(self) -> dict[str, dict[str, scram.ScramCredential]]:
        return self.users


async def test_sasl_session_plain_and_failures_never_lock_out() -> None:
    users = {"bob": {"SCRAM-SHA-256": scram.make_credential("SCRAM-SHA-256", "pw")}}
    config = SaslConfig(("PLAIN",), _Users(users), 0, AuthFailureThrottle(0, 0, 10))  # type: ignore[arg-type]
    s = SaslSession(config, "10.0.0.1")
    assert s.handshake("SCRAM-SHA-256", 1) == 33  # not enabled
    assert s.handshake("PLAIN", 1) == 0 and s.handshake("PLAIN", 1) == 34  # a second handshake: illegal state
    await s.step(b"\x00bob\x00pw")
    assert s.state is SaslState.COMPLETE and s.username == "bob"
    for _ in range(50):
        bad = SaslSession(config, "10.0.0.1")
        bad.handshake("PLAIN", 1)
        with pytest.raises(SaslFailed, match="invalid credentials"):
            await bad.step(b"\x00bob\x00nope")
        assert bad.attempted_user == "bob" and bad.username is None
    good = SaslSession(config, "10.0.0.1")  # the same address and user: the right password still works
    good.handshake("PLAIN", 1)
    await good.step(b"\x00bob\x00pw")
    assert good.state is SaslState.COMPLETE


def test_throttle_grows_per_address_and_user_and_resets() -> None:
    t = AuthFailureThrottle(floor_ms=100, max_delay_ms=1000, max_entries=100)
    delays = []
    now = 0.0
    for _ in range(6):  # a sequential guesser: each attempt after the previous answer
        d = t.failed("10.0.0.1", "bob", now)
        delays.append(round(d.seconds, 3))
        now += d.seconds
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]  # doubling from Kafka's delay, capped
    assert t.failed("10.0.0.1", "alice", now).seconds == pytest.approx(0.1)  # another user on the address
    assert t.failed("10.0.0.2", "bob", now).seconds == pytest.approx(0.1)  # the same user elsewhere
    later = now + 61.0  # a minute without failures: back to the floor
    assert t.failed("10.0.0.1", "bob", later).seconds == pytest.approx(0.1)


def test_throttle_spaces_parallel_failures_and_caps_the_hold() -> None:
    t = AuthFailureThrottle(floor_ms=100, max_delay_ms=1000, max_entries=100)
    held = [t.failed("10.0.0.1", "bob", 0.0).seconds for _ in range(8)]  # 8 connections at once
    # answers are spaced by the growing delay (0.1, +0.2, +0.4, ...) but no connection is held over the cap
    assert held[:3] == pytest.approx([0.1, 0.3, 0.7])
    assert all(h <= 1.0 for h in held) and held[-1] == pytest.approx(1.0)


def test_throttle_memory_is_bounded() -> None:
    t = AuthFailureThrottle(floor_ms=100, max_delay_ms=1000, max_entries=3)
    for i in range(3):
        t.failed("10.0.0.1", f"user{i}", 0.0)
    t.failed("10.0.0.1", "user0", 1.0)  # user0 is now the most recent
    d = t.failed("10.0.0.1", "user3", 1.0)
    assert d.evicted and len(t) == 3
    assert t.failed("10.0.0.1", "user0", 1.0).failures == 3  # kept; user1 was forgotten
    assert t.failed("10.0.0.1", "user1", 1.0).failures == 1
    assert t.failed("10.0.0.1", "x" * 10_000, 1.0).failures == 1 and len(t) == 3


# ------------------------------------------------------------------------------------------ ACLs


def acl(principal: str, op: str, rtype: str, name: str, pattern: str = "LITERAL", perm: str = "ALLOW",
        host: str = "*") -> Acl:
    return Acl(principal, perm, op, rtype, pattern, name, host)


def test_literal_prefixed_and_wildcard() -> None:
    auth = Authorizer([acl("User:alice", "READ", "GROUP", "orders"),
                       acl("User:alice", "READ", "TOPIC", "logs-", "PREFIXED"),
                       acl("User:*", "DESCRIBE", "TOPIC", "*")])
    assert auth.authorize("User:alice", "1.2.3.4", "READ", "GROUP", "orders")
    assert not auth.authorize("User:alice", "1.2.3.4", "READ", "GROUP", "orders2")
    assert auth.authorize("User:alice", "h", "READ", "TOPIC", "logs-app")
    assert not auth.authorize("User:alice", "h", "READ", "TOPIC", "log")
    assert auth.authorize("User:bob", "h", "DESCRIBE", "TOPIC", "anything")
    assert not auth.authorize("User:bob", "h", "READ", "GROUP", "orders")


def test_deny_wins_and_describe_is_implied() -> None:
    auth = Authorizer([acl("User:alice", "ALL", "GROUP", "g"),
                       acl("User:alice", "DELETE", "GROUP", "g", perm="DENY"),
                       acl("User:bob", "READ", "GROUP", "g"),
                       acl("User:*", "READ", "GROUP", "g", perm="DENY", host="6.6.6.6")])
    assert auth.authorize("User:alice", "h", "READ", "GROUP", "g")
    assert not auth.authorize("User:alice", "h", "DELETE", "GROUP", "g")
    assert auth.authorize("User:bob", "h", "DESCRIBE", "GROUP", "g")  # READ implies DESCRIBE
    assert not auth.authorize("User:bob", "h", "DELETE", "GROUP", "g")
    assert not auth.authorize("User:bob", "6.6.6.6", "READ", "GROUP", "g")  # host-specific deny


def test_super_users_and_allow_everyone_if_no_acl() -> None:
    acls = [acl("User:alice", "READ", "GROUP", "g")]
    strict = Authorizer(acls, super_users=["User:admin"])
    assert strict.authorize("User:admin", "h", "DELETE", "GROUP", "g")
    assert not strict.authorize("User:bob", "h", "READ", "GROUP", "no-acls-here")
    lax = Authorizer(acls, allow_everyone_if_no_acl_found=True)
    assert lax.authorize("User:bob", "h", "READ", "GROUP", "no-acls-here")
    assert not lax.authorize("User:bob", "h", "READ", "GROUP", "g")  # g has ACLs: only alice


def test_access_without_authorizer_allows_everything() -> None:
    assert Access(None).group("DELETE", "x") and Access(None).cluster("CREATE")


def test_acl_rejects_unknown_values() -> None:
    with pytest.raises(ValueError):
        acl("User:a", "FLY", "GROUP", "g")
    with pytest.raises(ValueError):
        acl("alice", "READ", "GROUP", "g")


# --------------------------------------------------------------------------------- files and CLIs


def test_users_file_holds_no_password(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    assert users_main(["--file", str(path), "add", "alice", "--password", "hunter2"]) == 0
    assert users_main(["--file", str(path), "add", "bob", "--password", "pw", "--mechanism", "SCRAM-SHA-512"]) == 0
    text = path.read_text()
    assert "hunter2" not in text and path.stat().st_mode & 0o077 == 0
    users = load_users(path)
    assert set(users) == {"alice", "bob"} and set(users["bob"]) == {"SCRAM-SHA-512"}
    assert scram.check_password("SCRAM-SHA-256", users["alice"]["SCRAM-SHA-256"], "hunter2")
    assert users_main(["--file", str(path), "remove", "bob"]) == 0
    assert users_main(["--file", str(path), "remove", "bob"]) == 1
    assert set(load_users(path)) == {"alice"}


def test_acls_cli_add_list_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "acls.json"
    assert acls_main(["--file", str(path), "add", "--allow-principal", "User:alice", "--operation", "read",
                      "--operation", "describe", "--group", "g", "--topic", "t"]) == 0
    assert acls_main(["--file", str(path), "add", "--deny-principal", "User:bob", "--operation", "all",
                      "--topic", "secret-", "--resource-pattern-type", "prefixed"]) == 0
    assert len(load_acls(path)) == 5
    assert json.loads(path.read_text())["version"] == 1
    capsys.readouterr()
    assert acls_main(["--file", str(path), "list", "--principal", "User:bob"]) == 0
    assert capsys.readouterr().out.strip() == "DENY User:bob ALL on TOPIC PREFIXED 'secret-' from *"
    assert acls_main(["--file", str(path), "remove", "--allow-principal", "User:alice", "--operation", "READ",
                      "--topic", "t"]) == 0
    assert len(load_acls(path)) == 4


def test_listeners_syntax() -> None:
    specs = parse_listeners("PLAINTEXT://127.0.0.1:9092, sasl_ssl://:9094,SSL://[::1]:9093")
    assert [(s.name, s.host, s.port) for s in specs] == [
        ("PLAINTEXT", "127.0.0.1", 9092), ("SASL_SSL", "", 9094), ("SSL", "::1", 9093)]
    assert specs[1].tls and specs[1].sasl and not specs[0].tls
    for bad in ("FOO://h:1", "PLAINTEXT://h", "PLAINTEXT://h:1,PLAINTEXT://h:2", ""):
        with pytest.raises(ValueError):
            parse_listeners(bad)


def test_peer_cert_cn() -> None:
    cert = {"subject": ((("countryName", "XX"),), (("commonName", "alice"),))}
    assert peer_cert_cn(cert) == "alice" and peer_cert_cn(None) is None
