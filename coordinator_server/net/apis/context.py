"""What an API module's `serve` gets besides the frame: the runtime, the connection's principal and client
host, and the client id its log lines carry. One per connection (the connection owns it and updates its
access once SASL authenticates); a native class when compiled, so the hot path reads its fields directly."""
from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Callable
from typing import Final, Protocol

import structlog

from coordinator_server.group.api import (
    HeartbeatInput,
    JoinGroupInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    OffsetCommitInput,
    OffsetCommitResult,
    OffsetFetchInput,
    OffsetFetchResult,
    SyncGroupInput,
    SyncGroupResult,
)
from coordinator_server.security.authorizer import ANONYMOUS, Access
from protocol.errors import Errors


class ApiRuntime(Protocol):
    """The slice of coordinator_server.runtime.CoordinatorRuntime the API modules call: one entry per API."""

    def join_group(self, inp: JoinGroupInput, on_result: Callable[[JoinGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None: ...
    def sync_group(self, inp: SyncGroupInput, on_result: Callable[[SyncGroupResult], None],
                   on_failure: Callable[[BaseException], None]) -> None: ...
    def heartbeat(self, inp: HeartbeatInput) -> Errors: ...
    def leave_group(self, inp: LeaveGroupInput, on_result: Callable[[LeaveGroupResult], None],
                    on_failure: Callable[[BaseException], None]) -> None: ...
    def offset_commit(self, inp: OffsetCommitInput, on_result: Callable[[OffsetCommitResult], None],
                      on_failure: Callable[[BaseException], None]) -> None: ...
    def offset_fetch(self, inp: OffsetFetchInput, on_result: Callable[[OffsetFetchResult], None],
                     on_failure: Callable[[BaseException], None]) -> None: ...


# Before the connection knows its peer and principal.
_NOBODY: Final = Access(None, ANONYMOUS)


class ApiContext:
    def __init__(self, runtime: ApiRuntime, partition_exists: Callable[[str, int], bool],
                 access: Access = _NOBODY, client_host: str = "/unknown") -> None:
        self.runtime = runtime
        # Kafka's API layer answers commits to unknown topics or partitions itself.
        self.partition_exists = partition_exists
        self.access = access  # the connection's principal and what it may do
        self.client_host = client_host  # Java's InetAddress.toString form, e.g. "/127.0.0.1"
        self.client_id: str | None = None

    def note_client_id(self, client_id: str | None) -> None:
        """The client id the connection's log lines carry: bound when it changes (rarely: once)."""
        if client_id != self.client_id:
            self.client_id = client_id
            structlog.contextvars.bind_contextvars(client_id=client_id)


# What an API module answers a frame with: the framed response, or a future of it (answered when done).
Serve = Callable[[bytes, ApiContext], "bytes | asyncio.Future[bytes]"]


@functools.lru_cache(maxsize=4096)  # per connection, and clients come back from the same few addresses
def java_inet_address_string(ip: str) -> str:
    """Java's InetAddress.toString() for an address without a resolved host name: "/" + host address.

    Kafka puts this in the member's client host (DescribeGroups shows it). Java prints IPv6 in full
    eight-group form without zero compression ("/0:0:0:0:0:0:0:1"), so we do too.
    """
    addr, _, scope = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(addr)
    except ValueError:
        return "/" + ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            # Java turns an IPv4-mapped IPv6 address into an Inet4Address.
            return "/" + str(parsed.ipv4_mapped)
        text = ":".join(f"{int(g, 16):x}" for g in parsed.exploded.split(":"))
        return "/" + text + (f"%{scope}" if scope else "")
    return "/" + str(parsed)
