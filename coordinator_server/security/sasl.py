"""SASL on one connection (Kafka's SaslServerAuthenticator): the mechanism servers and the state machine,
plus the per-address limit on failed attempts. No I/O here; `net.sasl_gate` frames it.

States: HANDSHAKE (ApiVersions and SaslHandshake only) → AUTHENTICATE (SaslAuthenticate only, or raw
tokens after a v0 handshake) → COMPLETE. Anything out of order closes the connection, as in Kafka.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from .files import ReloadingFile
from .scram import MECHANISMS as SCRAM_MECHANISMS
from .scram import ScramError, ScramServer, check_password
from .users import Users

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
ALL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
WINDOW_S = 60.0


class SaslState(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"


class SaslFailed(Exception):
    """Authentication failed: answer SASL_AUTHENTICATION_FAILED with this message and close."""


def parse_mechanisms(text: str) -> tuple[str, ...]:
    mechs = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unknown = [m for m in mechs if m not in ALL_MECHANISMS]
    if unknown or not mechs:
        raise ValueError(f"unsupported SASL mechanism(s) {unknown or text!r}: use {', '.join(ALL_MECHANISMS)}")
    return mechs


class FailureLimiter:
    """At most `limit` failed authentications per client address in any 60 s; beyond that, attempts from
    the address fail at once without looking at the credentials, until the oldest failure ages out."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, ip: str, now: float) -> deque[float]:
        q = self._failures.setdefault(ip, deque())
        while q and now - q[0] >= WINDOW_S:
            q.popleft()
        return q

    def blocked(self, ip: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        q = self._recent(ip, now)
        if not q:
            del self._failures[ip]  # keep the map to the addresses failing right now
            return False
        return len(q) >= self.limit

    def record(self, ip: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._recent(ip, now).append(now)


@dataclass
class SaslConfig:
    """Server-wide SASL settings, shared by every connection of the SASL listeners."""

    mechanisms: tuple[str, ...]
    users: ReloadingFile[Users] | None
    failed_delay_ms: int = 100  # connections.failed.authentication.delay.ms
    limiter: FailureLimiter = field(default_factory=lambda: FailureLimiter(10))
    fake_key: bytes = field(default_factory=lambda: os.urandom(32))  # salts for unknown users

    def credentials(self, mechanism: str) -> dict[str, object]:
        users = self.users.get() if self.users is not None else {}
        return {u: c[mechanism] for u, c in users.items() if mechanism in c}


class SaslSession:
    def __init__(self, config: SaslConfig, peer_ip: str) -> None:
        self.config = config
        self.peer_ip = peer_ip
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens follow as bare size-prefixed frames
        self.username: str | None = None
        self._scram: ScramServer | None = None

    def handshake(self, mechanism: str, version: int) -> int:
        """The SaslHandshake error code; anything but 0 closes the connection after the answer."""
        if self.state is not SaslState.HANDSHAKE:
            return ILLEGAL_SASL_STATE
        if mechanism not in self.config.mechanisms:
            return UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATE
        return 0

    async def step(self, token: bytes) -> bytes:
        """One SaslAuthenticate token in, the server's token out; raises SaslFailed."""
        assert self.state is SaslState.AUTHENTICATE and self.mechanism is not None
        if self.config.limiter.blocked(self.peer_ip):
            raise SaslFailed("Authentication failed: too many failed attempts from this address, retry later")
        try:
            if self.mechanism == "PLAIN":
                await self._plain(token)
                return b""
            if self._scram is None:
                self._scram = ScramServer(self.mechanism, self.config.credentials(self.mechanism),  # type: ignore[arg-type]
                                          self.config.fake_key)
                return self._scram.client_first(token)
            reply = self._scram.client_final(token)
            self.username = self._scram.username
            self.state = SaslState.COMPLETE
            return reply
        except (ScramError, UnicodeDecodeError, ValueError) as e:
            self.config.limiter.record(self.peer_ip)
            raise SaslFailed(f"Authentication failed during authentication due to invalid credentials with "
                             f"SASL mechanism {self.mechanism}") from e

    async def _plain(self, token: bytes) -> None:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise ValueError("Invalid SASL/PLAIN message")
        authzid, user, password = (p.decode("utf-8") for p in parts)
        if authzid and authzid != user:
            raise ValueError("Authorization id must be the same as the username")
        users = self.config.users.get() if self.config.users is not None else {}
        creds = users.get(user, {})
        # Any stored SCRAM credential verifies a PLAIN password; PBKDF2 runs off the event loop.
        mech = next((m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256") if m in creds), None)
        ok = mech is not None and await asyncio.to_thread(check_password, mech, creds[mech], password)
        if not ok:
            raise ValueError("Invalid username or password")
        self.username = user
        self.state = SaslState.COMPLETE
