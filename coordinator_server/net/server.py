"""The listening socket and the set of live connections, with an orderly shutdown.

Shutdown order (driven by app.serve):
1. `stop_accepting()` closes the listener;
2. `drain(grace_s)` asks every connection to stop: idle ones close at once, busy ones finish their
   current request (a heartbeat or a commit completes in milliseconds) and then close;
3. the app closes the runtime, which answers the still-parked requests (JoinGroup, SyncGroup) with
   NOT_COORDINATOR so their connections can write that answer and close;
4. `close(timeout_s)` waits for the rest and cancels whatever is still stuck.

Connection limits (Kafka's max.connections and max.connections.per.ip): a connection accepted over either
limit is closed at once, before anything is read from it, with one `connection_refused` log line naming
the limit; the connections already open are not touched. (A Kafka acceptor *waits* for a free slot when
the broker-wide limit is reached; we close instead, so a flood of connections never queues up in the
accept backlog holding file descriptors — a client sees a disconnect and retries with backoff.)
"""
from __future__ import annotations

import asyncio
import functools
import socket
from collections import Counter
from dataclasses import dataclass

import structlog

from coordinator_server import metrics
from coordinator_server.config import INT32_MAX

from .connection import Connection
from .connection_policy import ConnectionRules
from .handlers import RequestHandlers
from .listener import ListenerContext

log = structlog.get_logger("coordinator_server.net")

TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that opens a TLS port and says nothing is dropped after this


async def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to one listener's address and not yet listening: its port (the real one for port 0)
    is known before anything that advertises it is built, and until `CoordinatorServer.serve` a client's
    connect is refused, as when nothing is bound.

    Like a Kafka listener we bind exactly one address: the first the host resolves to. (Binding every
    address of e.g. "localhost" would, with port 0, give each its own port.) An empty host binds all
    interfaces."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(f"cannot resolve {host!r}")
    family, sock_type, proto, _, addr = infos[0]
    sock = socket.socket(family, sock_type, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections may be open at once: in all (max.connections) and from one client address
    (max.connections.per.ip). Defaults are Kafka's: no practical limit."""

    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX


class CoordinatorServer:
    def __init__(self, handlers: RequestHandlers, max_request_bytes: int,
                 limits: ConnectionLimits | None = None, rules: ConnectionRules | None = None) -> None:
        self._handlers = handlers
        self._max_request_bytes = max_request_bytes
        self._limits = limits or ConnectionLimits()
        self._rules = rules or ConnectionRules()
        self._servers: list[asyncio.Server] = []  # one per listener
        self._connections: set[Connection] = set()
        self._per_ip: Counter[str] = Counter()
        self._all_closed: asyncio.Future[None] | None = None  # set while shutdown waits for the last one

    async def serve(self, sock: socket.socket, listener: ListenerContext | None = None) -> None:
        """Start listening on a socket `bind_listener` bound, and accepting. Called once per listener. A
        TLS listener's handshake happens before `_on_connection` runs; a failed one (e.g. plaintext sent to
        a TLS port) only closes that socket."""
        loop = asyncio.get_running_loop()
        tls = listener.ssl if listener is not None else None
        server = await loop.create_server(
            functools.partial(self._new_connection, listener), sock=sock, backlog=1024, ssl=tls,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None)
        self._servers.append(server)

    def _new_connection(self, listener: ListenerContext | None) -> Connection:
        return Connection(self._handlers, self._max_request_bytes, listener, admit=self._admit,
                          on_closed=self._closed, rules=self._rules)

    def _admit(self, conn: Connection) -> bool:
        refused = self._over_limit(conn.peer_ip)
        if refused is not None:
            reason, limit, count = refused
            log.warning("connection_refused", reason=reason, limit=limit, open=count, peer=conn.peer)
            return False
        self._connections.add(conn)
        self._per_ip[conn.peer_ip] += 1
        metrics.CONNECTIONS_OPENED.inc()
        metrics.CONNECTIONS.inc()
        return True

    def _closed(self, conn: Connection) -> None:
        if conn not in self._connections:
            return  # refused: never counted
        self._connections.discard(conn)
        self._per_ip[conn.peer_ip] -= 1
        if self._per_ip[conn.peer_ip] <= 0:
            del self._per_ip[conn.peer_ip]
        metrics.CONNECTIONS.dec()
        if not self._connections and self._all_closed is not None and not self._all_closed.done():
            self._all_closed.set_result(None)

    def _over_limit(self, peer_ip: str) -> tuple[str, int, int] | None:
        """(limit name, limit, open count) when one more connection from `peer_ip` would exceed a limit.
        Checked and counted with no await in between, so concurrent accepts cannot both slip under it."""
        if len(self._connections) >= self._limits.max_connections:
            return "max_connections", self._limits.max_connections, len(self._connections)
        if self._per_ip[peer_ip] >= self._limits.max_connections_per_ip:
            return "max_connections_per_ip", self._limits.max_connections_per_ip, self._per_ip[peer_ip]
        return None

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def stop_accepting(self) -> None:
        for server in self._servers:
            server.close()

    async def drain(self, grace_s: float) -> None:
        for conn in list(self._connections):
            conn.request_stop()
        await self._wait_connections(grace_s)

    async def close(self, timeout_s: float) -> None:
        for conn in list(self._connections):
            conn.request_stop()
        if not await self._wait_connections(timeout_s):
            stuck = list(self._connections)
            log.warning("connections_cancelled_at_shutdown", count=len(stuck))
            for conn in stuck:
                conn.cancel()
            await self._wait_connections(1.0)
        for server in self._servers:
            # Connections are gone, so this returns promptly.
            await server.wait_closed()

    async def _wait_connections(self, timeout_s: float) -> bool:
        """Wait until no connection is left; False on timeout."""
        if not self._connections:
            return True
        self._all_closed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._all_closed), timeout_s)
        except TimeoutError:
            return False
        finally:
            self._all_closed = None
        return True
