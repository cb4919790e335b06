"""One client connection as an `asyncio.Protocol`: whole frames are cut out of the bytes in
`data_received`, and a request the core answers at once is answered from that same call.

Theory of operation. A Kafka broker mutes a channel while one of its requests is in flight, so a
client's requests are answered strictly in order and a parked JoinGroup holds its connection. We keep
that rule with one request in flight per connection:

- The APIs of `net/apis/` (table.py: Heartbeat, JoinGroup, SyncGroup, LeaveGroup, OffsetCommit,
  OffsetFetch) are handed the frame in `data_received`; each module parses it, calls the runtime once and
  answers bytes (a heartbeat: answered in this call, no task, no coroutine, no `drain()`; several pipelined
  heartbeats in one read are answered in order, in one call) or a future of bytes, written once done (a
  commit once the log has it, a JoinGroup once its join phase completes).
- Any other request runs as one task (`_handle`: the generic decode of `request_decode.py`, the handler
  table of `handlers.py`, kafka-python's encode), and nothing more is served on the connection until its
  response is written (from the task's or the future's done callback); then the frames that arrived
  meanwhile are served, in order. Until SASL has authenticated, every request goes that way, through the
  SASL gate.
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
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from coordinator_server import metrics
from coordinator_server.security.authorizer import ANONYMOUS, Access
from coordinator_server.security.sasl import SaslSession, SaslState
from protocol.framing import EncodedResponse, ParsedHeader, encode_response, unsupported_api_versions_response

from . import sasl_gate
from .apis.context import ApiContext, java_inet_address_string
from .apis.table import SERVED
from .connection_policy import ConnectionPolicy, ConnectionRules, Reading
from .handlers import RequestContext, RequestHandlers
from .listener import ListenerContext
from .request_decode import CloseConnection, check_served, decode_body, parse_header

log = structlog.get_logger("coordinator_server.net")

# Final: compiled, each of these is a C static rather than a lookup in this module's dictionary (and, for
# the metrics, an attribute of another module) on every request.
_SERVED: Final = SERVED
_BYTES_IN: Final = metrics.BYTES_IN.count
_BYTES_OUT: Final = metrics.BYTES_OUT.count
# A frame's api key, version and correlation id, for the log line of a request whose module raised.
_request_ids: Final = struct.Struct(">hhi").unpack_from
# A frame's size prefix, read in place (`int.from_bytes` sliced the buffer and looked the method up on `int`).
_frame_size: Final = struct.Struct(">i").unpack_from

# Bytes read ahead of the request being served before reading stops (asyncio streams' default limit,
# which the connection read through before, paused its transport at twice this).
READ_AHEAD_BYTES: Final = 128 * 1024


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
        self._sasl: SaslSession | None = None
        # What the API modules are served with: the runtime, and this connection's principal, client host
        # (Java's InetAddress.toString, set once the peer is known) and client id.
        self._api = ApiContext(handlers.runtime, handlers.partition_exists)

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
            self._api.client_host = java_inet_address_string(self.peer_ip)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Responses are single writes; don't let Nagle hold them back behind a delayed ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener = self._listener
        # Who this connection is (docs/security.md): set by TLS now, or by SASL once authenticated.
        self._sasl = SaslSession(listener.sasl, self.peer_ip) if listener and listener.sasl else None
        principal = listener.transport_principal(transport.get_extra_info("peercert")) if listener else ANONYMOUS
        self._api.access = Access(listener.authorizer if listener else None, principal, host=self.peer_ip)
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
            structlog.contextvars.bind_contextvars(listener=self._listener.name, principal=self._api.access.principal)
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
        except CloseConnection:
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
            raise CloseConnection
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
        serve = _SERVED.get(payload[:2])
        if serve is None:
            self._start(self._handle(payload))
            return
        try:
            answer = serve(payload, self._api)
        except CloseConnection:
            raise
        except Exception:
            self._handler_failed(payload)
            raise CloseConnection from None
        if isinstance(answer, bytes):
            self._write(answer)  # answered at once
        elif answer.done() and answer.exception() is None:
            self._write(answer.result())
        else:
            self._wait_for(answer)

    def _handler_failed(self, payload: bytes) -> None:
        """The log line of a request whose module raised (our bug): the connection closes."""
        api_key, version, correlation_id = _request_ids(payload)
        log.exception("handler_failed", api=ApiKey(api_key).name, api_version=version,
                      correlation_id=correlation_id)

    def _start(self, coro: Coroutine[Any, Any, bytes | None]) -> None:
        self._wait_for(asyncio.get_running_loop().create_task(coro, context=self._ctx))

    def _wait_for(self, pending: asyncio.Future[bytes] | asyncio.Future[bytes | None]) -> None:
        """Serve nothing else until `pending` (a request's task, or a fast path's future) is answered."""
        self._task = pending
        if self._policy is not None:
            self._policy.request_started()  # no idle clock while the server works (or parks) for it
        pending.add_done_callback(self._request_done, context=self._ctx)

    def _request_done(self, task: asyncio.Future[bytes] | asyncio.Future[bytes | None]) -> None:
        self._task = None
        try:
            response = task.result()
        except CloseConnection:
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
        header = parse_header(payload, self._api.note_client_id)
        if header.is_unsupported_api_versions:
            log.info("unsupported_api_versions_version", api_version=header.api_version,
                     correlation_id=header.correlation_id)
            return unsupported_api_versions_response(header.correlation_id)
        check_served(header)
        started = time.perf_counter()
        sasl_pending = self._sasl is not None and self._sasl.state is not SaslState.COMPLETE
        if sasl_pending and not sasl_gate.admitted(self._sasl, header):  # type: ignore[arg-type]
            raise CloseConnection  # Kafka closes too: nothing else is served before authentication
        request = decode_body(header, payload)
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
            raise CloseConnection from None
        metrics.observe_request(header.api_name, header.api_version, time.perf_counter() - started, response)
        return encoded

    async def _raw_sasl_token(self, payload: bytes) -> bytes:
        reply = await sasl_gate.raw_token(self._sasl, payload)  # type: ignore[arg-type]
        if reply is None:
            raise CloseConnection
        self._maybe_authenticated()
        return reply

    def _maybe_authenticated(self) -> None:
        if self._sasl is not None and self._sasl.state is SaslState.COMPLETE and self._sasl.username:
            principal = f"User:{self._sasl.username}"
            if principal != self._api.access.principal:
                self._api.access = Access(self._api.access.authorizer, principal, host=self.peer_ip)
                structlog.contextvars.bind_contextvars(principal=principal)

    async def _call_handler(self, header: ParsedHeader, request: ApiMessage) -> ApiMessage | EncodedResponse | None:
        ctx = RequestContext(header=header, client_host=self._api.client_host, access=self._api.access,
                             endpoint=self._listener.endpoint if self._listener else None)
        try:
            return await self._handlers.handle(request, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handler_failed", api=header.api_name, api_version=header.api_version,
                          correlation_id=header.correlation_id)
            raise CloseConnection from None
