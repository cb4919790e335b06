"""The floor: the least a uvloop server can do per request on this machine.

It frames requests exactly as the coordinator's connection loop does (asyncio streams, read 4-byte size,
read the body, write, drain, one request in flight) and answers each with a canned response of the size
the coordinator would send, carrying the request's correlation id. Whatever the coordinator spends above
this is decoding, the handler, the core and encoding.

    python -m benchmarks.floor RESPONSE_HEX   # prints {"port": N} on stdout, serves until SIGTERM
"""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys

import uvloop


async def _serve(canned: bytes) -> None:
    prefix, suffix = canned[:4], canned[8:]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                body = await reader.readexactly(size)
                # Correlation id: bytes 4-8 of the request header (after api key and version).
                writer.write(prefix + body[4:8] + suffix)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    uvloop.run(_serve(bytes.fromhex(sys.argv[1])))


if __name__ == "__main__":
    main()
