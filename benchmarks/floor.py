"""The floor: the least a uvloop server can do per request on this machine.

It answers each request with a canned response of the size the coordinator would send, carrying the
request's correlation id; whatever the coordinator spends above this is decoding, the handler, the core
and encoding. Two ways to frame, both with one request in flight per connection as the coordinator:

- `protocol` (the floor of the results table): an `asyncio.Protocol` on uvloop that cuts whole frames
  out of the bytes in `data_received` and writes each answer from that same call — no coroutine, no
  stream reader, no `drain()`. The fastest canned-answer server we know how to write in Python.
- `streams` (kept as a second row, the floor of earlier rounds): asyncio streams, read the 4-byte size,
  read the body, write, drain.

    python -m benchmarks.floor RESPONSE_HEX [protocol|streams]   # prints {"port": N}, serves until SIGTERM
"""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys

import uvloop


class _CannedProtocol(asyncio.Protocol):
    __slots__ = ("_buffer", "_prefix", "_suffix", "_transport")

    def __init__(self, canned: bytes) -> None:
        self._prefix, self._suffix = canned[:4], canned[8:]
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buf = self._buffer + data if self._buffer else data
        pos, end = 0, len(buf)
        out = []
        while end - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if end - pos - 4 < size:
                break
            # Correlation id: bytes 4-8 of the request header (after api key and version).
            out.append(self._prefix + buf[pos + 8:pos + 12] + self._suffix)
            pos += 4 + size
        self._buffer = buf[pos:]
        if out:
            assert self._transport is not None
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))


async def _serve_protocol(canned: bytes) -> asyncio.AbstractServer:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _CannedProtocol(canned), "127.0.0.1", 0, backlog=4096)


async def _serve_streams(canned: bytes) -> asyncio.AbstractServer:
    prefix, suffix = canned[:4], canned[8:]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                body = await reader.readexactly(size)
                writer.write(prefix + body[4:8] + suffix)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)


async def _serve(canned: bytes, kind: str) -> None:
    server = await (_serve_protocol if kind == "protocol" else _serve_streams)(canned)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    kind = sys.argv[2] if len(sys.argv) > 2 else "protocol"
    if kind not in ("protocol", "streams"):
        raise SystemExit(f"unknown floor kind {kind!r}: protocol or streams")
    uvloop.run(_serve(bytes.fromhex(sys.argv[1]), kind))


if __name__ == "__main__":
    main()
