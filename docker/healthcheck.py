#!/usr/bin/env python3
"""Container healthcheck: speak the Kafka protocol to the coordinator and expect ApiVersions v0 error 0.

Exit 0 when healthy, 1 otherwise (one line on stderr says why). The target defaults to what the server
itself is configured with: COORDINATOR_HOST (a wildcard bind is checked on loopback) and COORDINATOR_PORT
(default 9092); --host/--port override.
"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import warnings

CORRELATION_ID = 0x0C0FFEE


def default_host() -> str:
    host = os.environ.get("COORDINATOR_HOST", "127.0.0.1")
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def default_port() -> int:
    return int(os.environ.get("COORDINATOR_PORT") or 9092)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def check(host: str, port: int, timeout_s: float) -> None:
    """Raise if the server does not answer ApiVersions v0 with error 0."""
    # kafka-python loads its JSON schemas with importlib.resources functions deprecated in 3.11.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    request = ApiVersionsRequest[0]()
    request.with_header(correlation_id=CORRELATION_ID, client_id="coordinator-healthcheck")
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        if not 0 < size <= 1 << 20:
            raise ValueError(f"implausible response size {size}")
        response = ApiVersionsResponse.decode(recv_exactly(sock, size), version=0, header=True)
    if response.header.correlation_id != CORRELATION_ID:
        raise ValueError(f"correlation id {response.header.correlation_id}, expected {CORRELATION_ID}")
    if response.error_code != 0:
        raise ValueError(f"ApiVersions error code {response.error_code}")
    if not response.api_keys:
        raise ValueError("ApiVersions lists no APIs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=None, help="default: COORDINATOR_HOST, wildcard -> loopback")
    parser.add_argument("--port", type=int, default=None, help="default: COORDINATOR_PORT or 9092")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for connect and each read")
    args = parser.parse_args(argv)
    host = args.host if args.host is not None else default_host()
    port = args.port if args.port is not None else default_port()
    try:
        check(host, port, args.timeout)
    except Exception as e:
        print(f"unhealthy: {host}:{port}: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
