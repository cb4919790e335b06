"""The load generator: many connections, one request in flight on each, raw prebuilt frames.

Runs in its own process (`python -m benchmarks.loadgen SPEC.json`), so it never shares an event loop or a
GIL with the server. Per response it only splits the stream by the size prefix, reads two error-code bytes
at a fixed offset and notes the latency: nothing is decoded, so it stays cheaper than any server it
measures (the report includes its own CPU time to show that).

The spec (JSON): host, port, connections, warmup_s, duration_s, error_offset, frames (path of a pickle:
a list of frame lists, connection i cycling through frames[i % len(frames)]), and optionally addresses
(a [host, port] per connection, for a cluster: each connection to the coordinator of its own group).
Prints one JSON object: requests, seconds, rps, p50_us, p99_us, errors, first_error, cpu_s.
"""
from __future__ import annotations

import asyncio
import json
import pickle
import resource
import socket
import sys
import time
from typing import Any

import uvloop


class _Stats:
    def __init__(self) -> None:
        self.measuring = False
        self.stopping = False
        self.count = 0
        self.errors = 0
        self.first_error: int | None = None
        self.latencies_ns: list[int] = []


class _LoadConnection(asyncio.Protocol):
    def __init__(self, frames: list[bytes], stats: _Stats, error_offset: int, done: asyncio.Future[None]) -> None:
        self.frames = frames
        self.next = 0
        self.stats = stats
        self.error_offset = error_offset
        self.buf = b""
        self.sent_ns = 0
        self.done = done
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport is no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        frame = self.frames[self.next]
        self.next = (self.next + 1) % len(self.frames)
        self.sent_ns = time.perf_counter_ns()
        self.transport.write(frame)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        # One request in flight: at most one response is ever buffered.
        if len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            self.buf = buf
            return
        now = time.perf_counter_ns()
        size = 4 + int.from_bytes(buf[:4], "big")
        self.buf = buf[size:]
        stats = self.stats
        if stats.measuring:
            stats.count += 1
            stats.latencies_ns.append(now - self.sent_ns)
            if self.error_offset >= 0 and (buf[self.error_offset] or buf[self.error_offset + 1]):
                stats.errors += 1
                if stats.first_error is None:
                    stats.first_error = int.from_bytes(buf[self.error_offset:self.error_offset + 2], "big")
        if stats.stopping:
            if not self.done.done():
                self.done.set_result(None)
            return
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"server closed the connection: {exc}"))


async def run(spec: dict[str, Any], frames: list[list[bytes]]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    stats = _Stats()
    dones: list[asyncio.Future[None]] = []
    transports = []
    protos = []
    # Connect all first, so every connection is sending when the measurement starts.
    addresses = spec.get("addresses") or [[spec["host"], spec["port"]]] * spec["connections"]
    for i in range(spec["connections"]):
        done: asyncio.Future[None] = loop.create_future()
        dones.append(done)
        # Connections are opened idle and started together below.
        transport, proto = await loop.create_connection(
            lambda i=i, done=done: _Idle(frames[i % len(frames)], stats, spec["error_offset"], done),
            addresses[i][0], addresses[i][1])
        transports.append(transport)
        protos.append(proto)
    for p in protos:
        p.start()
    await asyncio.sleep(spec["warmup_s"])
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    stats.measuring = True
    t0 = time.perf_counter()
    await asyncio.sleep(spec["duration_s"])
    stats.measuring = False
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    stats.stopping = True
    await asyncio.wait_for(asyncio.gather(*dones), 30)
    for t in transports:
        t.close()
    lat = sorted(stats.latencies_ns)
    return {
        "requests": stats.count,
        "seconds": seconds,
        "rps": stats.count / seconds,
        "p50_us": lat[len(lat) // 2] / 1000 if lat else None,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000 if lat else None,
        "errors": stats.errors,
        "first_error": stats.first_error,
        "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
        # The measured window on the monotonic clock (perf_counter), which other processes share: the
        # server's CPU time inside it is read from a sampler running beside the load.
        "window": [t0, t0 + seconds],
        "connections": spec["connections"],
    }


class _Idle(_LoadConnection):
    """A load connection that waits for `start()` before its first request."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport is no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start(self) -> None:
        self._send()


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    with open(spec["frames"], "rb") as f:
        frames = pickle.load(f)
    result = uvloop.run(run(spec, frames))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
