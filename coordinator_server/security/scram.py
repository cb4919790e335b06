"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) on the server side, and PLAIN checked against the same data.

Only what the RFC defines, on hashlib/hmac: SaltedPassword = PBKDF2-HMAC(password, salt, i);
ClientKey = HMAC(SaltedPassword, "Client Key"); StoredKey = H(ClientKey);
ServerKey = HMAC(SaltedPassword, "Server Key"). We store (salt, i, StoredKey, ServerKey), never the
password. Channel binding is not supported (gs2 flag "p" is refused), as in Kafka.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """The exchange failed; the message is safe to send to the client (it names no secret)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, object]:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "iterations": self.iterations,
                "stored_key": b64(self.stored_key).decode(), "server_key": b64(self.server_key).decode()}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ScramCredential:
        d = base64.b64decode
        return cls(d(str(data["salt"])), int(data["iterations"]),  # type: ignore[call-overload]
                   d(str(data["stored_key"])), d(str(data["server_key"])))


def _hmac(alg: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, alg).digest()


def salted_password(alg: str, password: str, salt: bytes, iterations: int) -> bytes:
    # RFC 5802 Hi() is PBKDF2 with HMAC as the PRF; SASLprep of the password is not applied (neither does
    # Kafka's Java client), so non-ASCII passwords must be typed identically on both sides.
    return hashlib.pbkdf2_hmac(alg, password.encode("utf-8"), salt, iterations)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    alg = MECHANISMS[mechanism]
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be >= {MIN_ITERATIONS}")
    salt = salt if salt is not None else os.urandom(32)
    sp = salted_password(alg, password, salt, iterations)
    client_key = _hmac(alg, sp, b"Client Key")
    return ScramCredential(salt, iterations, hashlib.new(alg, client_key).digest(), _hmac(alg, sp, b"Server Key"))


def check_password(mechanism: str, cred: ScramCredential, password: str) -> bool:
    """SASL/PLAIN against SCRAM data: derive with the stored salt and iterations, compare StoredKey."""
    alg = MECHANISMS[mechanism]
    client_key = _hmac(alg, salted_password(alg, password, cred.salt, cred.iterations), b"Client Key")
    return hmac.compare_digest(hashlib.new(alg, client_key).digest(), cred.stored_key)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError("Invalid SCRAM message")
        out.append((part[0], part[2:]))
    return out


def _unescape_username(name: str) -> str:
    # RFC 5802 §5.1: "," and "=" are sent as "=2C" and "=3D"; any other "=" is malformed.
    out = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("Invalid username encoding")
    return out


class ScramServer:
    """One server-side exchange: client-first → server-first, client-final → server-final.

    `lookup` returns the user's credential or None; for an unknown user the exchange continues with a
    made-up salt and fails only at the proof, so the answers do not reveal which user names exist
    (RFC 5802 §9 suggests this)."""

    def __init__(self, mechanism: str, lookup: dict[str, ScramCredential] | None, fake_key: bytes) -> None:
        self.mechanism = mechanism
        self.alg = MECHANISMS[mechanism]
        self._lookup = lookup or {}
        self._fake_key = fake_key
        self.username: str | None = None
        self._cred: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.done = False

    def client_first(self, message: bytes) -> bytes:
        text = message.decode("utf-8")
        gs2_flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_flag not in ("n", "y"):
            raise ScramError("Channel binding is not supported")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("Invalid SCRAM client first message")
        username = _unescape_username(attrs[0][1])
        if authzid and authzid != "a=" + attrs[0][1]:
            raise ScramError("Authorization id must be the same as the username")
        extensions = [k for k, _ in attrs[2:]]
        if extensions:  # e.g. Kafka's tokenauth: delegation tokens are not served
            raise ScramError("SCRAM extensions are not supported")
        self.username = username
        self._cred = self._lookup.get(username)
        salt, iterations = (self._cred.salt, self._cred.iterations) if self._cred else self._fake(username)
        self._gs2_header = f"{gs2_flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def _fake(self, username: str) -> tuple[bytes, int]:
        return _hmac(self.alg, self._fake_key, username.encode()), DEFAULT_ITERATIONS

    def client_final(self, message: bytes) -> bytes:
        text = message.decode("utf-8")
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise ScramError("Invalid SCRAM client final message")
        attrs = dict(_attributes(without_proof))
        if attrs.get("r") != self._nonce:
            raise ScramError("Invalid nonce")
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("Invalid channel binding")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError as e:
            raise ScramError("Invalid proof encoding") from e
        cred = self._cred
        if cred is None or len(proof) != len(cred.stored_key):
            raise ScramError("Invalid credentials")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.alg, cred.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.alg, client_key).digest(), cred.stored_key):
            raise ScramError("Invalid credentials")
        self.done = True
        return b"v=" + base64.b64encode(_hmac(self.alg, cred.server_key, auth_message))
