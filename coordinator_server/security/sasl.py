"""SASL on one connection (Kafka's SaslServerAuthenticator): the mechanism servers and the state machine,
no I/O here; `net.sasl_gate` frames it and holds failure answers as `auth_throttle` says.

States: HANDSHAKE (ApiVersions and SaslHandshake only) → AUTHENTICATE (SaslAuthenticate only, or raw
tokens after a v0 handshake) → COMPLETE. Anything out of order closes the connection, as in Kafka.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from enum import Enum

from .auth_throttle import AuthFailureThrottle
from .files import ReloadingFile
from .scram import MECHANISMS as SCRAM_MECHANISMS
from .scram import ScramError, ScramServer, check_password
from .users import Users

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
ALL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


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


@dataclass
class SaslConfig:
    """Server-wide SASL settings, shared by every connection of the SASL listeners."""

    mechanisms: tuple[str, ...]
    users: ReloadingFile[Users] | None
    failed_delay_ms: int = 100  # connections.failed.authentication.delay.ms: the throttle's floor
    throttle: AuthFailureThrottle = field(default_factory=lambda: AuthFailureThrottle(100, 10_000, 10_000))
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
        self.username: str | None = None  # set once authenticated
        self.attempted_user: str | None = None  # the user name the client gave, known or not
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
        try:
            if self.mechanism == "PLAIN":
                await self._plain(token)
                return b""
            if self._scram is None:
                self._scram = ScramServer(self.mechanism, self.config.credentials(self.mechanism),  # type: ignore[arg-type]
                                          self.config.fake_key)
                reply = self._scram.client_first(token)
                self.attempted_user = self._scram.username
                return reply
            reply = self._scram.client_final(token)
            self.username = self._scram.username
            self.state = SaslState.COMPLETE
            return reply
        except (ScramError, UnicodeDecodeError, ValueError) as e:
            raise SaslFailed(f"Authentication failed during authentication due to invalid credentials with "
                             f"SASL mechanism {self.mechanism}") from e

    async def _plain(self, token: bytes) -> None:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise ValueError("Invalid SASL/PLAIN message")
        authzid, user, password = (p.decode("utf-8") for p in parts)
        self.attempted_user = user
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
