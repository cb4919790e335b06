"""The floor: the least a uvloop server can do per request on this machine.

It answers each request with a canned response of the size the coordinator would send, carrying the
request's correlation id; whatever the coordinator spends above this is decoding, the handler, the core
and encoding. Two ways to frame, both with one request in flight per connection as the coordinator:

- `protocol` (the floor of the results table): an `asyncio.Protocol` on uvloop that cuts whole frames
  out of the bytes in `data_received` and writes each answer from that same call — no coroutine, no
  stream reader, no `drain()`. The fastest canned-answer server we know how to write in Python.
- `streams` (kept as a second row, the floor of earlier rounds): asyncio streams, read the 4-byte size,
  read the body, write, drain.

And one floor for durable commits:

- `durable DATA_DIR`: the `protocol` floor that also does what every server acknowledging a commit only
  once it is durable must do, and nothing else. Each request is written as it came (one pwrite(2)) to
  one of `PARTITIONS` files in DATA_DIR, the file chosen per connection as the coordinator chooses a
  `__consumer_offsets` partition per group (the commits scenario has one group per connection); the
  answers wait for a syncfs(2) that started after their writes, run by the coordinator's own C syncfs
  thread (coordinator_server/storage/syncfs_thread.py) and asked for once a loop turn, so the writes of
  one turn share a syncfs and those arriving during it share the next (group commit). No decoding, no
  record batch, no coordinator: what it reaches is the most commits a second a Python server doing the
  durable part of the work reaches here, and its 128-to-1 committer ratio the group commit such a server
  can show on this machine's CPU and disk.

    python -m benchmarks.floor RESPONSE_HEX [protocol|streams|durable DATA_DIR]
    # prints {"port": N}, serves until SIGTERM
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import signal
import socket
import sys
from pathlib import Path

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


# As many files as `__consumer_offsets` has partitions by default (offsets.topic.num.partitions).
PARTITIONS = 50


class _DurableLog:
    """The durable floor's files and its group commit: writes wait in `waiting` until the loop turn's end,
    then join a round with the number of the syncfs request that covers them."""

    def __init__(self, data_dir: Path) -> None:
        from coordinator_server.storage.syncfs_thread import SyncfsThread
        if SyncfsThread is None:
            raise SystemExit("the durable floor needs the compiled syncfs thread (make build, on Linux)")
        data_dir.mkdir(parents=True, exist_ok=True)
        self.fds = [os.open(data_dir / f"{p}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    for p in range(PARTITIONS)]
        self.sizes = [0] * PARTITIONS
        self.dir_fd = os.open(data_dir, os.O_RDONLY)
        self.thread = SyncfsThread(self.dir_fd)
        self.waiting: list[tuple[asyncio.Transport, bytes]] = []
        self.rounds: collections.deque[tuple[int, list[tuple[asyncio.Transport, bytes]]]] = collections.deque()
        self.connections = itertools.count()
        loop = asyncio.get_running_loop()
        loop.add_reader(self.thread.fileno(), self._synced)
        self._call_soon = loop.call_soon

    def write(self, partition: int, request: bytes, transport: asyncio.Transport, answer: bytes) -> None:
        fd, start = self.fds[partition], self.sizes[partition]
        written = 0
        while written < len(request):
            written += os.pwrite(fd, request[written:] if written else request, start + written)
        self.sizes[partition] = start + written
        if not self.waiting:
            self._call_soon(self._request_round)
        self.waiting.append((transport, answer))

    def _request_round(self) -> None:
        self.rounds.append((self.thread.request(), self.waiting))
        self.waiting = []

    def _synced(self) -> None:
        synced, answered, errno = self.thread.completed()
        if synced != answered:
            raise SystemExit(f"durable floor: syncfs failed: {os.strerror(errno)}")
        while self.rounds and self.rounds[0][0] <= synced:
            for transport, answer in self.rounds.popleft()[1]:
                if not transport.is_closing():
                    transport.write(answer)


class _DurableProtocol(_CannedProtocol):
    __slots__ = ("_log", "_partition")

    def __init__(self, canned: bytes, durable_log: _DurableLog) -> None:
        super().__init__(canned)
        self._log = durable_log
        self._partition = next(durable_log.connections) % PARTITIONS

    def data_received(self, data: bytes) -> None:
        buf = self._buffer + data if self._buffer else data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if end - pos - 4 < size:
                break
            assert self._transport is not None
            self._log.write(self._partition, buf[pos:pos + 4 + size], self._transport,
                            self._prefix + buf[pos + 8:pos + 12] + self._suffix)
            pos += 4 + size
        self._buffer = buf[pos:]


async def _serve_durable(canned: bytes, data_dir: Path) -> asyncio.AbstractServer:
    durable_log = _DurableLog(data_dir)
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _DurableProtocol(canned, durable_log), "127.0.0.1", 0, backlog=4096)


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


async def _serve(canned: bytes, kind: str, data_dir: Path | None) -> None:
    if data_dir is not None:
        server = await _serve_durable(canned, data_dir)
    else:
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
    if kind not in ("protocol", "streams", "durable"):
        raise SystemExit(f"unknown floor kind {kind!r}: protocol, streams or durable DATA_DIR")
    if kind == "durable" and len(sys.argv) != 4:
        raise SystemExit("the durable floor needs its DATA_DIR")
    uvloop.run(_serve(bytes.fromhex(sys.argv[1]), kind, Path(sys.argv[3]) if kind == "durable" else None))


if __name__ == "__main__":
    main()
