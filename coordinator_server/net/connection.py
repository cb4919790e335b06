"""One client connection: read a frame, handle it to completion, write the response, repeat.

Theory of operation. A Kafka broker mutes a channel while one of its requests is in flight, so a
client's requests are answered strictly in order and a parked JoinGroup holds its connection. We get
the same by never reading the next frame before the current response is written: the socket's receive
buffer (and TCP flow control) is the backpressure, and nothing is read ahead.

Three severities of failure (style §10):
- per request: an error code inside the response (decided by the handler or the core);
- per connection: bad frame size, unparsable header, unknown api key, unsupported version (other than
  ApiVersions), undecodable body, or a handler that raised — log one line and close this socket only;
- per process: never from here. No exception escapes `serve()`.

Why a handler crash closes the connection rather than answering UNKNOWN_SERVER_ERROR: a crash is a bug
on our side and the request's effects are unknown; a disconnect makes every client forget the
coordinator, rediscover it and retry, while UNKNOWN_SERVER_ERROR is fatal for several group calls in
the Java consumer.
"""
from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from kafka.protocol.api_message import ApiMessage

from coordinator_server import metrics
from coordinator_server.security.authorizer import ANONYMOUS, Access
from coordinator_server.security.sasl import SaslSession, SaslState
from protocol.framing import (
    BodyDecodeError,
    InvalidHeaderError,
    ParsedHeader,
    decode_request_body,
    encode_response,
    parse_request_header,
    unsupported_api_versions_response,
)
from protocol.group_messages import java_inet_address_string
from protocol.heartbeat_wire import HEARTBEAT_API_KEY, heartbeat_response_frame, parse_heartbeat

from . import sasl_gate
from .handlers import RequestContext, RequestHandlers
from .listener import ListenerContext
from .request_checks import null_in_non_nullable

log = structlog.get_logger("coordinator_server.net")

_HEARTBEAT_KEY_BYTES = HEARTBEAT_API_KEY.to_bytes(2, "big")


class _CloseConnection(Exception):
    """Stop serving this connection; the reason was logged where it was raised."""


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handlers: RequestHandlers,
        max_request_bytes: int,
        listener: ListenerContext | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._transport = writer.transport
        self._handlers = handlers
        self._max_request_bytes = max_request_bytes
        peer = writer.get_extra_info("peername")
        self.peer_ip: str = peer[0] if peer else "unknown"
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "unknown"
        self.client_host = java_inet_address_string(self.peer_ip)
        self._client_id: str | None = None
        self._busy = False  # a request has been read and its response is not yet written
        self._draining = False
        self.task: asyncio.Task[None] | None = None
        self._listener = listener
        self._close_after_write = False
        # Who this connection is (docs/security.md): set by TLS now, or by SASL once authenticated.
        self._sasl = SaslSession(listener.sasl, self.peer_ip) if listener and listener.sasl else None
        principal = listener.transport_principal(writer.get_extra_info("peercert")) if listener else ANONYMOUS
        self._access = Access(listener.authorizer if listener else None, principal, host=self.peer_ip)

    @property
    def busy(self) -> bool:
        return self._busy

    def request_stop(self) -> None:
        """Shutdown: an idle connection closes now; a busy one after writing its current response."""
        self._draining = True
        if not self._busy and self.task is not None:
            self.task.cancel()

    async def serve(self) -> None:
        # Runs in its own task, so context variables bound here label every log line of this
        # connection, including those the runtime emits while handling its requests.
        structlog.contextvars.bind_contextvars(peer=self.peer)
        if self._listener is not None:
            structlog.contextvars.bind_contextvars(listener=self._listener.name, principal=self._access.principal)
        log.debug("connection_opened")
        try:
            while not self._draining:
                payload = await self._read_frame()
                if payload is None:
                    break
                self._busy = True
                metrics.BYTES_IN.value += 4 + len(payload)
                response: bytes | None
                if self._sasl is not None and self._sasl.state is not SaslState.COMPLETE:
                    if self._sasl.raw_tokens and self._sasl.state is SaslState.AUTHENTICATE:
                        response = await self._raw_sasl_token(payload)
                    else:
                        response = await self._handle(payload)
                else:
                    response = self._heartbeat(payload) if payload[:2] == _HEARTBEAT_KEY_BYTES else None
                    if response is None:
                        response = await self._handle(payload)
                if response is not None:  # None: a request answered with no response (acks=0)
                    self._writer.write(response)
                    metrics.BYTES_OUT.value += len(response)
                    if self._transport.get_write_buffer_size():
                        # Backpressure only when the kernel did not take it all; usually it did (a coroutine
                        # saved per request), and a lost connection still shows at the next read.
                        await self._writer.drain()
                self._busy = False
                if self._close_after_write:
                    break
        except _CloseConnection:
            pass
        except asyncio.CancelledError:
            log.debug("connection_cancelled", busy=self._busy)
        except (ConnectionError, OSError) as e:
            log.debug("connection_lost", error=repr(e))
        except Exception:
            log.exception("connection_failed")
        finally:
            await self._close()

    async def _read_frame(self) -> bytes | None:
        try:
            size_bytes = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.warning("connection_closed_mid_frame", received=len(e.partial))
            return None  # orderly EOF between requests
        size = int.from_bytes(size_bytes, "big", signed=True)
        if size <= 0 or size > self._max_request_bytes:
            # Refuse before reading the body: never buffer an oversized frame (socket.request.max.bytes).
            log.warning("invalid_frame_size", size=size, max_bytes=self._max_request_bytes)
            raise _CloseConnection
        try:
            return await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            log.warning("connection_closed_mid_frame", size=size, received=len(e.partial))
            return None

    async def _handle(self, payload: bytes) -> bytes | None:
        header = self._parse_header(payload)
        if header.is_unsupported_api_versions:
            log.info("unsupported_api_versions_version", api_version=header.api_version,
                     correlation_id=header.correlation_id)
            return unsupported_api_versions_response(header.correlation_id)
        if header.spec is None:
            log.warning("unknown_api_key", api_key=header.api_key, api_version=header.api_version,
                        correlation_id=header.correlation_id)
            raise _CloseConnection
        if not header.supported:
            # What a Kafka broker does too: an unsupported version of any other api closes the socket.
            log.warning("unsupported_api_version", api=header.api_name, api_version=header.api_version,
                        min_version=header.spec.min_version, max_version=header.spec.max_version,
                        correlation_id=header.correlation_id)
            raise _CloseConnection
        started = time.perf_counter()
        sasl_pending = self._sasl is not None and self._sasl.state is not SaslState.COMPLETE
        if sasl_pending and not sasl_gate.admitted(self._sasl, header):  # type: ignore[arg-type]
            raise _CloseConnection  # Kafka closes too: nothing else is served before authentication
        request = self._decode_body(header, payload)
        response: ApiMessage | None = None
        if sasl_pending:
            gate = await sasl_gate.answer(self._sasl, header, request)  # type: ignore[arg-type]
            self._close_after_write = gate.close
            response = gate.response
            self._maybe_authenticated()
        if response is None:
            response = await self._call_handler(header, request)
        if response is None:
            metrics.observe_request(header.api_name, header.api_version, time.perf_counter() - started, None)
            return None
        try:
            encoded = encode_response(response, header.correlation_id)
        except Exception:
            log.exception("response_encode_failed", api=header.api_name, api_version=header.api_version,
                          correlation_id=header.correlation_id)
            raise _CloseConnection from None
        metrics.observe_request(header.api_name, header.api_version, time.perf_counter() - started, response)
        return encoded

    def _heartbeat(self, payload: bytes) -> bytes | None:
        """Heartbeats skip kafka-python's generic classes (protocol/heartbeat_wire.py): the hot path.
        None: not a heartbeat the fast parser takes; it goes the generic way, with the generic checks."""
        hb = parse_heartbeat(payload)
        if hb is None:
            return None
        started = time.perf_counter()
        if hb.client_id != self._client_id:
            self._client_id = hb.client_id
            structlog.contextvars.bind_contextvars(client_id=hb.client_id)
        version = hb.input.api_version
        try:
            error = self._handlers.heartbeat(hb.input, self._access)
        except Exception:
            log.exception("handler_failed", api="Heartbeat", api_version=version, correlation_id=hb.correlation_id)
            raise _CloseConnection from None
        metrics.observe_request_error("Heartbeat", version, time.perf_counter() - started, error)
        return heartbeat_response_frame(version, hb.correlation_id, error)

    async def _raw_sasl_token(self, payload: bytes) -> bytes:
        reply = await sasl_gate.raw_token(self._sasl, payload)  # type: ignore[arg-type]
        if reply is None:
            raise _CloseConnection
        self._maybe_authenticated()
        return reply

    def _maybe_authenticated(self) -> None:
        if self._sasl is not None and self._sasl.state is SaslState.COMPLETE and self._sasl.username:
            principal = f"User:{self._sasl.username}"
            if principal != self._access.principal:
                self._access = Access(self._access.authorizer, principal, host=self.peer_ip)
                structlog.contextvars.bind_contextvars(principal=principal)

    def _parse_header(self, payload: bytes) -> ParsedHeader:
        try:
            header = parse_request_header(payload)
        except InvalidHeaderError as e:
            log.warning("invalid_request_header", error=str(e), size=len(payload))
            raise _CloseConnection from None
        if header.client_id != self._client_id:
            self._client_id = header.client_id
            structlog.contextvars.bind_contextvars(client_id=header.client_id)
        return header

    def _decode_body(self, header: ParsedHeader, payload: bytes) -> ApiMessage:
        try:
            request = decode_request_body(header, payload)
        except BodyDecodeError as e:
            log.warning("invalid_request_body", api=header.api_name, api_version=header.api_version,
                        correlation_id=header.correlation_id, error=str(e))
            raise _CloseConnection from None
        assert header.spec is not None
        null_field = null_in_non_nullable(request, header.spec.request.json["fields"], header.api_version)
        if null_field is not None:
            log.warning("invalid_request_body", api=header.api_name, api_version=header.api_version,
                        correlation_id=header.correlation_id,
                        error=f"non-nullable field {null_field} was serialized as null")
            raise _CloseConnection
        return request

    async def _call_handler(self, header: ParsedHeader, request: ApiMessage) -> ApiMessage | None:
        ctx = RequestContext(header=header, client_host=self.client_host, access=self._access,
                             endpoint=self._listener.endpoint if self._listener else None)
        try:
            return await self._handlers.handle(request, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handler_failed", api=header.api_name, api_version=header.api_version,
                          correlation_id=header.correlation_id)
            raise _CloseConnection from None

    async def _close(self) -> None:
        log.debug("connection_closed")
        self._writer.close()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self._writer.wait_closed()
