"""What a SASL listener does with a request before its connection has authenticated (Kafka's
SaslServerAuthenticator): ApiVersions and SaslHandshake, then SaslAuthenticate; anything else closes the
connection with a log line. A failed authentication is answered SASL_AUTHENTICATION_FAILED after the
delay `security.auth_throttle` gives for its (address, user) — Kafka's
connections.failed.authentication.delay.ms at least, growing while that key keeps failing — and the
connection is closed. A correct credential is answered at once, whatever failed before it."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from coordinator_server import metrics
from coordinator_server.security.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    SaslFailed,
    SaslSession,
    SaslState,
)
from protocol.framing import ParsedHeader

log = structlog.get_logger("coordinator_server.net")


@dataclass(frozen=True, slots=True)
class GateAnswer:
    response: ApiMessage | None  # None: the request goes to the normal handlers (ApiVersions)
    close: bool = False  # close the connection after writing the response


def admitted(session: SaslSession, header: ParsedHeader) -> bool:
    """May this request be read at all before authentication? False: log and close (no response)."""
    key = header.api_key
    if session.state is SaslState.HANDSHAKE:
        ok = key in (ApiKey.ApiVersions, ApiKey.SaslHandshake)
    else:  # AUTHENTICATE via SaslAuthenticate; a second SaslHandshake is answered ILLEGAL_SASL_STATE
        ok = key in (ApiKey.SaslAuthenticate, ApiKey.SaslHandshake)
    if not ok:
        log.warning("sasl_unexpected_request", api=header.api_name, state=session.state.value,
                    correlation_id=header.correlation_id)
    return ok


async def answer(session: SaslSession, header: ParsedHeader, request: ApiMessage) -> GateAnswer:
    version = header.api_version
    if header.api_key == ApiKey.ApiVersions:
        return GateAnswer(None)
    if header.api_key == ApiKey.SaslHandshake:
        error = session.handshake(request.mechanism, version)
        if error:
            log.warning("sasl_handshake_failed", mechanism=request.mechanism, error_code=error,
                        enabled=list(session.config.mechanisms))
        return GateAnswer(SaslHandshakeResponse[version](error_code=error, mechanisms=list(session.config.mechanisms)),
                          close=error != 0)
    try:
        token = await session.step(request.auth_bytes)
    except SaslFailed as e:
        return GateAnswer(await _failed(session, version, str(e)), close=True)
    if session.state is SaslState.COMPLETE:
        log.info("sasl_authenticated", mechanism=session.mechanism, user=session.username)
    return GateAnswer(SaslAuthenticateResponse[version](error_code=0, error_message=None, auth_bytes=token,
                                                        session_lifetime_ms=0))


async def raw_token(session: SaslSession, token: bytes) -> bytes | None:
    """SaslHandshake v0: the token came without a Kafka header; the answer is a bare size-prefixed
    token. None: failed — Kafka cannot report an error in this mode and just closes."""
    try:
        reply = await session.step(token)
    except SaslFailed as e:
        await _failed(session, 0, str(e))
        return None
    if session.state is SaslState.COMPLETE:
        log.info("sasl_authenticated", mechanism=session.mechanism, user=session.username)
    return len(reply).to_bytes(4, "big") + reply


async def _failed(session: SaslSession, version: int, message: str) -> ApiMessage:
    throttle = session.config.throttle
    delay = throttle.failed(session.peer_ip, session.attempted_user, time.monotonic())
    metrics.AUTH_FAILURES.inc()
    metrics.AUTH_THROTTLE_KEYS.set(len(throttle))
    if delay.evicted:
        metrics.AUTH_THROTTLE_EVICTIONS.inc()
    log.warning("sasl_authentication_failed", mechanism=session.mechanism, user=session.attempted_user,
                reason=message, failures=delay.failures, delay_ms=round(delay.seconds * 1000))
    metrics.AUTH_FAILURE_DELAY.inc(delay.seconds)
    await asyncio.sleep(delay.seconds)
    return SaslAuthenticateResponse[version](error_code=SASL_AUTHENTICATION_FAILED, error_message=message,
                                             auth_bytes=b"", session_lifetime_ms=0)


def after_authentication(api_key: int, version: int) -> ApiMessage:
    """SaslHandshake/SaslAuthenticate once authenticated, or on a listener without SASL (KafkaApis)."""
    if api_key == ApiKey.SaslHandshake:
        return SaslHandshakeResponse[version](error_code=ILLEGAL_SASL_STATE, mechanisms=[])
    return SaslAuthenticateResponse[version](
        error_code=ILLEGAL_SASL_STATE, error_message="SaslAuthenticate request received after successful "
        "authentication or on a listener without SASL", auth_bytes=b"", session_lifetime_ms=0)
