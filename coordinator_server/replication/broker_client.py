"""A connection from this broker to another one, for the requests brokers send each other (a follower's
Fetch and OffsetForLeaderEpoch to its leader, ControlledShutdown to the controller).

One request in flight at a time, as Kafka's NetworkClient does per broker connection for the replica
fetcher: the caller awaits each answer before sending the next. Requests are kafka-python message
classes, framed and decoded by kafka-python, so the same codec serves both ends.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from typing import Any

from kafka.protocol.api_message import ApiMessage


class BrokerUnreachable(ConnectionError):
    """The other broker could not be reached, closed the connection, or did not answer in time."""


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, request_timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self, timeout_s: float = 5.0) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), timeout_s)
        except (OSError, TimeoutError) as e:
            raise BrokerUnreachable(f"cannot connect to {self.host}:{self.port}: {e!r}") from e

    async def call(self, request: ApiMessage, response_cls: Any, timeout_s: float | None = None) -> Any:
        """Send one request and return its decoded response; BrokerUnreachable on any transport failure
        (the connection is then closed: the caller reconnects, as a fetcher thread does)."""
        if not self.connected:
            await self.connect()
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        correlation_id = next(self._correlation)
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        version = request.API_VERSION
        try:
            writer.write(request.encode(header=True, framed=True))
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(
                reader.readexactly(4), timeout_s or self.request_timeout_s))[0]
            payload = await asyncio.wait_for(reader.readexactly(size), timeout_s or self.request_timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
            await self.close()
            raise BrokerUnreachable(f"{self.host}:{self.port}: {e!r}") from e
        response = response_cls.decode(payload, version=version, header=True)
        if response.header.correlation_id != correlation_id:
            await self.close()
            raise BrokerUnreachable(f"{self.host}:{self.port}: answer out of order")
        return response

    def abort(self) -> None:
        """Drop the connection now: a call waiting on it fails with BrokerUnreachable (no cancellation,
        which a task may miss while it is inside asyncio.wait_for)."""
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.transport.abort()

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
