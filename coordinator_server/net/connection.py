"""One client connection as an `asyncio.Protocol`: whole frames are cut out of the bytes in
`data_received`, and a request the core answers at once is answered from that same call.

Theory of operation. A Kafka broker mutes a channel while one of its requests is in flight, so a
client's requests are answered strictly in order and a parked JoinGroup holds its connection. We keep
that rule with one request in flight per connection:

- A heartbeat (the bulk of a coordinator's requests) is parsed, handled and answered synchronously in
  `data_received`: no task, no coroutine, no `drain()`; several pipelined heartbeats in one read are
  answered in order, in one call.
- An OffsetCommit is parsed by hand too and goes to the runtime without a task; its answer is written
  from the future the log's completion resolves (at once when it is refused before writing).
- JoinGroup and SyncGroup are parsed by hand too and go to the runtime without a task; the answer is
  written from the future the core's reply resolves (a JoinGroup parks until its join phase completes).
- Any other request leaves that path: it runs as one task (`_handle`), and nothing more is served on the
  connection until its response is written (from the task's done callback); then the frames that arrived
  meanwhile are served, in order.
- Backpressure: while a request is in flight, or while the transport has paused our writing (the client
  does not read its responses), reading stops once `READ_AHEAD_BYTES` are buffered, so the socket's
  receive buffer and TCP flow control hold the client back, as with asyncio streams before.

What a connection may cost between requests — how long it may go without sending a whole request
(connections.max.idle.ms) and how many response bytes it may leave unread — is decided by
`ConnectionPolicy` (connection_policy.py): the transport's high-water mark is its unsent bound (so
`pause_writing` is its "pause reading"), and one watchdog timer per connection, re-armed only when it
fires, asks it whether to close. The hot path only moves the policy's clock: one clock read per
`data_received` that answered something.

Three severities of failure:
- per request: an error code inside the response (decided by the handler or the core);
- per connection: bad frame size, unparsable header, unknown api key, unsupported version (other than
  ApiVersions), undecodable body, or a handler that raised — log one line and close this socket only;
- per process: never from here. No exception escapes a protocol callback.

Why a handler crash closes the connection rather than answering UNKNOWN_SERVER_ERROR: a crash is a bug
on our side and the request's effects are unknown; a disconnect makes every client forget the
coordinator, rediscover it and retry, while UNKNOWN_SERVER_ERROR is fatal for several group calls in
the Java consumer.

Log lines of a connection carry its peer, listener, principal and client id: they are bound in a
`contextvars.Context` of its own, which every callback of this connection and its request tasks run in.
"""
from __future__ import annotations

import asyncio
import contextvars
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

import structlog
from kafka.protocol.api_message import ApiMessage

from coordinator_server import metrics
from coordinator_server.security.authorizer import ANONYMOUS, Access
from coordinator_server.security.sasl import SaslSession, SaslState
from protocol.framing import (
    BodyDecodeError,
    EncodedResponse,
    InvalidHeaderError,
    ParsedHeader,
    decode_request_body,
    encode_response,
    parse_request_header,
    unsupported_api_versions_response,
)
from protocol.group_messages import java_inet_address_string
from protocol.group_wire import (
    JOIN_GROUP_API_KEY,
    SYNC_GROUP_API_KEY,
    JoinGroupWire,
    parse_join_group,
    parse_sync_group,
)
from protocol.heartbeat_wire import HEARTBEAT_API_KEY, heartbeat_response_frame, parse_heartbeat
from protocol.offset_commit_wire import OFFSET_COMMIT_API_KEY, parse_offset_commit
from protocol.offset_fetch_wire import OFFSET_FETCH_API_KEY, parse_offset_fetch

from . import sasl_gate
from .connection_policy import ConnectionPolicy, ConnectionRules, Reading
from .handlers import RequestContext, RequestHandlers
from .listener import ListenerContext
from .request_checks import null_in_non_nullable

log = structlog.get_logger("coordinator_server.net")

# Final: compiled, each of these is a C static rather than a lookup in this module's dictionary (and, for
# the metrics and the clock, an attribute of another module) on every request.
_HEARTBEAT_KEY_BYTES: Final = HEARTBEAT_API_KEY.to_bytes(2, "big")
_OFFSET_COMMIT_KEY_BYTES: Final = OFFSET_COMMIT_API_KEY.to_bytes(2, "big")
_OFFSET_FETCH_KEY_BYTES: Final = OFFSET_FETCH_API_KEY.to_bytes(2, "big")
_REBALANCE_KEYS_BYTES: Final = (JOIN_GROUP_API_KEY.to_bytes(2, "big"), SYNC_GROUP_API_KEY.to_bytes(2, "big"))
_BYTES_IN: Final = metrics.BYTES_IN.count
_BYTES_OUT: Final = metrics.BYTES_OUT.count
_observe_request_error: Final = metrics.observe_request_error
_perf_counter: Final = time.perf_counter
# A frame's size prefix, read in place (`int.from_bytes` sliced the buffer and looked the method up on `int`).
_frame_size: Final = struct.Struct(">i").unpack_from

# Bytes read ahead of the request being served before reading stops (asyncio streams' default limit,
# which the connection read through before, paused its transport at twice this).
READ_AHEAD_BYTES: Final = 128 * 1024


class _CloseConnection(Exception):
    """Stop serving this connection; the reason was logged where it was raised."""


class Connection(asyncio.Protocol):
    """`admit(connection)` is asked once the transport is known: False refuses it (closed at once, nothing
    read); `on_closed(connection)` runs once it is closed and no request of it is still running."""

    def __init__(
        self,
        handlers: RequestHandlers,
        max_request_bytes: int,
        listener: ListenerContext | None = None,
        *,
        admit: Callable[[Connection], bool] = lambda _c: True,
        on_closed: Callable[[Connection], None] = lambda _c: None,
        rules: ConnectionRules | None = None,
    ) -> None:
        self._handlers = handlers
        self._max_request_bytes = max_request_bytes
        self._listener = listener
        self._admit = admit
        self._on_closed = on_closed
        self._transport: asyncio.Transport | None = None
        self._rules = rules or ConnectionRules()
        self._policy: ConnectionPolicy | None = None  # from connection_made, when the clock is known
        self._watchdog: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop  # set with the policy
        self._ctx = contextvars.Context()
        self._buffer = b""
        # The request in flight when not answered at once: its task, or a fast path's future.
        self._task: asyncio.Future[bytes] | asyncio.Future[bytes | None] | None = None
        self._write_paused = False
        self._reading_paused = False
        self._eof = False
        self._draining = False
        self._close_after_write = False
        self._closing = False
        self._lost = False
        self._finished = False
        self.peer_ip = "unknown"
        self.peer = "unknown"
        self.client_host = "/unknown"  # Java's InetAddress.toString, set once the peer is known
        self._client_id: str | None = None
        self._sasl: SaslSession | None = None
        self._access = Access(None, ANONYMOUS)

    # -- what the server sees --

    @property
    def busy(self) -> bool:
        """A request has been read and its response is not yet written."""
        return self._task is not None

    @property
    def finished(self) -> bool:
        return self._finished

    def request_stop(self) -> None:
        """Shutdown: an idle connection closes now; a busy one after writing its current response."""
        self._draining = True
        if self._task is None:
            self._close()

    def cancel(self) -> None:
        """Shutdown's last resort: abandon the request in flight and close."""
        if self._task is not None:
            self._task.cancel()
        self._close()

    # -- protocol callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer_ip = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"
            self.client_host = java_inet_address_string(self.peer_ip)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Responses are single writes; don't let Nagle hold them back behind a delayed ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener = self._listener
        # Who this connection is (docs/security.md): set by TLS now, or by SASL once authenticated.
        self._sasl = SaslSession(listener.sasl, self.peer_ip) if listener and listener.sasl else None
        principal = listener.transport_principal(transport.get_extra_info("peercert")) if listener else ANONYMOUS
        self._access = Access(listener.authorizer if listener else None, principal, host=self.peer_ip)
        if not self._admit(self):
            self._closing = True
            transport.close()
            return
        self._loop = asyncio.get_running_loop()
        self._policy = ConnectionPolicy(self._rules, self._loop.time())
        # pause_writing then comes exactly when the policy's unsent bound is passed (resume at a quarter).
        transport.set_write_buffer_limits(high=self._rules.max_unsent_bytes)  # type: ignore[attr-defined]
        self._ctx.run(self._bind_context)
        self._arm_watchdog()

    def _bind_context(self) -> None:
        structlog.contextvars.bind_contextvars(peer=self.peer)
        if self._listener is not None:
            structlog.contextvars.bind_contextvars(listener=self._listener.name, principal=self._access.principal)
        log.debug("connection_opened")

    def data_received(self, data: bytes | bytearray) -> None:
        if self._closing:
            return
        # bytes() of bytes is the same object; a transport handing over a bytearray gets a copy, since the
        # compiled module (setup.py) holds the buffer as bytes.
        self._buffer = self._buffer + data if self._buffer else bytes(data)
        self._ctx.run(self._serve_buffered)

    def eof_received(self) -> bool:
        # Keep the transport open to write the answers of what is already buffered or in flight (where
        # the transport allows a half-closed connection; a TLS one closes now).
        self._eof = True
        self._ctx.run(self._serve_buffered)
        return not self._closing

    def pause_writing(self) -> None:
        # Called from inside our own transport.write(), so in this connection's context already.
        self._write_paused = True
        if self._unsent_changed() is Reading.PAUSE:
            metrics.READS_PAUSED.inc()
            log.info("connection_reads_paused", unsent_bytes=self._transport.get_write_buffer_size(),  # type: ignore[union-attr]
                     max_unsent_bytes=self._rules.max_unsent_bytes)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._unsent_changed()
        if not self._closing:
            self._ctx.run(self._serve_buffered)

    def _unsent_changed(self) -> Reading | None:
        if self._policy is None or self._transport is None:
            return None
        return self._policy.unsent_changed(self._loop.time(), self._transport.get_write_buffer_size())

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if exc is not None:
            self._ctx.run(log.debug, "connection_lost", error=repr(exc))
        # A request still running (a parked JoinGroup) completes; its answer goes nowhere.
        self._maybe_finished()

    # -- serving frames, one request in flight --

    def _serve_buffered(self) -> None:
        served = False
        try:
            while (self._task is None and not self._closing and not self._write_paused and not self._draining
                   and not self._close_after_write):
                payload = self._next_frame()
                if payload is None:
                    break
                served = True
                self._serve(payload)
        except _CloseConnection:
            self._close()
        except Exception:
            log.exception("connection_failed")
            self._close()
        else:
            if self._closing:
                return
            if self._task is None and (self._draining or self._close_after_write):
                self._close()
            elif self._eof and self._task is None and not self._write_paused:
                if self._buffer:
                    log.warning("connection_closed_mid_frame", received=len(self._buffer))
                self._close()
            else:
                if served and self._task is None:
                    # Requests were answered: the idle clock starts again. Bytes of a frame that is not
                    # complete do not restart it (a client sending a byte a second is idle).
                    self._answered()
                self._flow_control()

    def _next_frame(self) -> bytes | None:
        buf = self._buffer
        if len(buf) < 4:
            return None
        size: int = _frame_size(buf)[0]
        if size <= 0 or size > self._max_request_bytes:
            # Refuse before reading the body: never buffer an oversized frame (socket.request.max.bytes).
            log.warning("invalid_frame_size", size=size, max_bytes=self._max_request_bytes)
            raise _CloseConnection
        end = 4 + size
        if len(buf) < end:
            return None
        self._buffer = buf[end:]
        return buf[4:end]

    def _serve(self, payload: bytes) -> None:
        _BYTES_IN.value += 4 + len(payload)
        sasl = self._sasl
        if sasl is not None and sasl.state is not SaslState.COMPLETE:
            if sasl.raw_tokens and sasl.state is SaslState.AUTHENTICATE:
                self._start(self._raw_sasl_token(payload))
            else:
                self._start(self._handle(payload))
            return
        key = payload[:2]
        if key == _HEARTBEAT_KEY_BYTES:
            response = self._heartbeat(payload)
            if response is not None:
                self._write(response)
                return
        elif (key == _OFFSET_COMMIT_KEY_BYTES and self._offset_commit(payload)) or (key == _OFFSET_FETCH_KEY_BYTES and self._offset_fetch(payload)) or (key in _REBALANCE_KEYS_BYTES and self._rebalance_request(payload)):
            return
        self._start(self._handle(payload))

    def _start(self, coro: Coroutine[Any, Any, bytes | None]) -> None:
        self._wait_for(asyncio.get_running_loop().create_task(coro, context=self._ctx))

    def _wait_for(self, pending: asyncio.Future[bytes] | asyncio.Future[bytes | None]) -> None:
        """Serve nothing else until `pending` (a request's task, or a fast path's future) is answered."""
        self._task = pending
        if self._policy is not None:
            self._policy.request_started()  # no idle clock while the server works (or parks) for it
        pending.add_done_callback(self._request_done, context=self._ctx)

    def _offset_commit(self, payload: bytes) -> bool:
        """The OffsetCommit fast path (protocol/offset_commit_wire.py): answered without a task, from the
        log's completion. False: not a shape it takes — the generic way."""
        req = parse_offset_commit(payload)
        if req is None:
            return False
        self._note_client_id(req.client_id)
        try:
            pending = self._handlers.offset_commit_nowait(req, self._access)
        except Exception:
            log.exception("handler_failed", api="OffsetCommit", api_version=req.api_version,
                          correlation_id=req.correlation_id)
            raise _CloseConnection from None
        self._answer(pending)
        return True

    def _offset_fetch(self, payload: bytes) -> bool:
        """The OffsetFetch fast path (protocol/offset_fetch_wire.py): answered in this call unless a group's
        lock is taken. False: not a shape it takes — the generic way."""
        req = parse_offset_fetch(payload)
        if req is None:
            return False
        self._note_client_id(req.client_id)
        try:
            pending = self._handlers.offset_fetch_now(req, self._access)
        except Exception:
            log.exception("handler_failed", api="OffsetFetch", api_version=req.api_version,
                          correlation_id=req.correlation_id)
            raise _CloseConnection from None
        self._answer(pending)
        return True

    def _answer(self, pending: asyncio.Future[bytes]) -> None:
        if pending.done() and pending.exception() is None:
            self._write(pending.result())  # answered at once
        else:
            self._wait_for(pending)

    def _rebalance_request(self, payload: bytes) -> bool:
        """JoinGroup and SyncGroup parsed by hand (protocol/group_wire.py) and handed to the runtime without a
        task; the answer is written from the future the core's reply resolves (a JoinGroup parks until its
        join phase completes). False: not a shape the parser takes — the generic way."""
        req = parse_join_group(payload) if payload[1] == JOIN_GROUP_API_KEY else parse_sync_group(payload)
        if req is None:
            return False
        self._note_client_id(req.client_id)
        try:
            pending = self._handlers.rebalance_nowait(req, self._access, self.client_host)
        except Exception:
            log.exception("handler_failed", api="JoinGroup" if isinstance(req, JoinGroupWire) else "SyncGroup",
                          api_version=req.api_version, correlation_id=req.correlation_id)
            raise _CloseConnection from None
        self._answer(pending)
        return True

    def _note_client_id(self, client_id: str | None) -> None:
        if client_id != self._client_id:
            self._client_id = client_id
            structlog.contextvars.bind_contextvars(client_id=client_id)

    def _request_done(self, task: asyncio.Future[bytes] | asyncio.Future[bytes | None]) -> None:
        self._task = None
        try:
            response = task.result()
        except _CloseConnection:
            self._close()
        except asyncio.CancelledError:
            log.debug("connection_cancelled", busy=True)
            self._close()
        except Exception:
            log.exception("connection_failed")
            self._close()
        else:
            if response is not None and not self._closing:  # None: no response at all (acks=0)
                self._write(response)
            self._answered()
            self._serve_buffered()
        self._maybe_finished()

    def _write(self, response: bytes) -> None:
        assert self._transport is not None
        self._transport.write(response)
        _BYTES_OUT.value += len(response)

    def _flow_control(self) -> None:
        """Read on while a frame is being received; stop once enough is buffered behind a request in
        flight or unwritten answers."""
        transport = self._transport
        if transport is None or self._closing:
            return
        blocked = self._task is not None or self._write_paused
        if blocked and len(self._buffer) >= READ_AHEAD_BYTES:
            if not self._reading_paused:
                self._reading_paused = True
                transport.pause_reading()
        elif self._reading_paused and not blocked:
            self._reading_paused = False
            transport.resume_reading()

    def _answered(self) -> None:
        if self._policy is not None:
            self._policy.answered(self._loop.time())
            if self._watchdog is None and not self._closing:
                self._arm_watchdog()

    def _arm_watchdog(self) -> None:
        assert self._policy is not None
        deadline = self._policy.deadline()
        self._watchdog = None if deadline is None else self._loop.call_at(deadline, self._on_watchdog,
                                                                          context=self._ctx)

    def _on_watchdog(self) -> None:
        """Requests only move the policy's deadline; the timer is re-armed here, when it fires."""
        self._watchdog = None
        if self._closing or self._transport is None or self._policy is None:
            return
        unsent = self._transport.get_write_buffer_size()
        reason = self._policy.expired(self._loop.time(), unsent, partial_frame=bool(self._buffer))
        if reason is None:
            self._arm_watchdog()
            return
        metrics.CONNECTIONS_TIMED_OUT.labels(reason).inc()
        log.info("connection_timed_out", reason=reason, max_idle_ms=self._rules.max_idle_ms, unsent_bytes=unsent,
                 buffered_bytes=len(self._buffer))
        # abort, not close: close would wait to flush answers a client that does not read never takes.
        self._closing = True
        self._transport.abort()
        self._maybe_finished()

    def _close(self) -> None:
        if not self._closing:
            self._closing = True
            log.debug("connection_closed")
            if self._transport is not None:
                self._transport.close()
        self._maybe_finished()

    def _maybe_finished(self) -> None:
        if not self._finished and self._lost and self._task is None:
            self._finished = True
            self._on_closed(self)

    # -- one request --

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
        response: ApiMessage | EncodedResponse | None = None
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
        started = _perf_counter()
        self._note_client_id(hb.client_id)
        version = hb.input.api_version
        try:
            error = self._handlers.heartbeat(hb.input, self._access)
        except Exception:
            log.exception("handler_failed", api="Heartbeat", api_version=version, correlation_id=hb.correlation_id)
            raise _CloseConnection from None
        _observe_request_error("Heartbeat", version, _perf_counter() - started, error)
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
        self._note_client_id(header.client_id)
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

    async def _call_handler(self, header: ParsedHeader, request: ApiMessage) -> ApiMessage | EncodedResponse | None:
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
