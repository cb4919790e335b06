"""A small synchronous group-protocol client for integration tests: one socket per member, requests
built with kafka-python's message classes, any version.

A JoinGroup (or a SyncGroup of a follower) may stay parked on the server until other members arrive,
so every request can be *sent* without waiting (`send_*` returns a `Pending`) and its answer collected
later with `Pending.result()`. Each member has its own connection, so several members' joins can be in
flight at once from one thread with no threads at all. Heartbeats go over a second connection of the
member (the server answers requests of one connection in order, and a parked JoinGroup holds its
connection, as a broker's would); Kafka does not tie a member to a connection.

    a, b = GroupMember(srv, "grp", "a"), GroupMember(srv, "grp", "b")
    pa, pb = a.send_join(), b.send_join()      # MEMBER_ID_REQUIRED round trips done, joins parked
    ja, jb = pa.result(), pb.result()
    ...
    a.close(); b.close()
"""
from __future__ import annotations

import contextlib
import itertools
import select
import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

# Kafka error codes the tests talk about.
NONE = 0
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

RESPONSE_TIMEOUT_S = 15.0

_correlation_ids = itertools.count(1)


class ServerClosed(ConnectionError):
    """The server closed the connection (or it died) before answering."""


class Connection:
    """One TCP connection to the server; requests are framed, responses read and decoded in order."""

    def __init__(self, address: tuple[str, int], client_id: str) -> None:
        self.client_id = client_id
        self.sock = socket.create_connection(address, timeout=RESPONSE_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, request: ApiMessage, response_cls: Any) -> Pending:
        correlation_id = next(_correlation_ids)
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        try:
            self.sock.sendall(request.encode(header=True, framed=True))
        except OSError as e:
            raise ServerClosed(f"send failed: {e}") from e
        return Pending(self, request.API_VERSION, response_cls, correlation_id)

    def call(self, request: ApiMessage, response_cls: Any, timeout_s: float = RESPONSE_TIMEOUT_S) -> Any:
        return self.send(request, response_cls).result(timeout_s)

    def readable(self, timeout_s: float) -> bool:
        readable, _, _ = select.select([self.sock], [], [], timeout_s)
        return bool(readable)

    def recv_frame(self, timeout_s: float) -> bytes:
        self.sock.settimeout(timeout_s)
        try:
            size = self._recv_exactly(4)
            return self._recv_exactly(struct.unpack(">i", size)[0])
        finally:
            self.sock.settimeout(RESPONSE_TIMEOUT_S)

    def _recv_exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, BrokenPipeError) as e:
                raise ServerClosed(str(e)) from e
            if not chunk:
                raise ServerClosed("connection closed by the server")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


class Pending:
    """A request sent and not yet answered."""

    def __init__(self, conn: Connection, version: int, response_cls: Any, correlation_id: int) -> None:
        self.conn = conn
        self.version = version
        self.response_cls = response_cls
        self.correlation_id = correlation_id
        self._response: Any = None
        self._on_result: list[Callable[[Any], None]] = []

    @property
    def done(self) -> bool:
        return self._response is not None

    def answered_within(self, timeout_s: float) -> bool:
        """True if the answer is here (or arrives within timeout_s): the request is not parked."""
        return self.done or self.conn.readable(timeout_s)

    def then(self, fn: Callable[[Any], None]) -> Pending:
        self._on_result.append(fn)
        return self

    def result(self, timeout_s: float = RESPONSE_TIMEOUT_S) -> Any:
        if self._response is None:
            try:
                payload = self.conn.recv_frame(timeout_s)
            except TimeoutError as e:
                raise TimeoutError(f"no answer to {self.response_cls.__name__} v{self.version} "
                                   f"within {timeout_s}s (parked?)") from e
            response = self.response_cls.decode(payload, version=self.version, header=True)
            assert response.header.correlation_id == self.correlation_id, "responses out of order"
            self._response = response
            for fn in self._on_result:
                fn(response)
        return self._response


def protocols(*names: str, metadata: bytes = b"sub") -> list[Any]:
    return [JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=metadata) for n in names]


class GroupMember:
    """One group member: its own connection (plus one for heartbeats), its member id and generation."""

    def __init__(
        self,
        srv: Any,
        group_id: str,
        client_id: str,
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int | None = None,
        group_instance_id: str | None = None,
        protocol_type: str = "consumer",
        protocol_names: Iterable[str] = ("range",),
        metadata: bytes | None = None,
    ) -> None:
        self.address = (srv.host, srv.port)
        self.group_id = group_id
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms if rebalance_timeout_ms is not None else session_timeout_ms
        self.group_instance_id = group_instance_id
        self.protocol_type = protocol_type
        self.protocols = protocols(*protocol_names, metadata=metadata if metadata is not None else client_id.encode())
        self.member_id = ""
        self.generation_id = -1
        self.leader = ""
        self.protocol_name: str | None = None
        self.assignment: bytes | None = None
        self.conn = Connection(self.address, client_id)
        self._hb_conn: Connection | None = None

    # -- JoinGroup --------------------------------------------------------------------------------

    def join_request(self, version: int, member_id: str | None = None, **overrides: Any) -> ApiMessage:
        fields: dict[str, Any] = dict(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.group_instance_id, protocol_type=self.protocol_type,
            protocols=self.protocols, reason=None,
        )
        fields.update(overrides)
        return JoinGroupRequest[version](**fields)

    def send_join(self, version: int = 5, *, member_id_required: bool = True, **overrides: Any) -> Pending:
        """Send a JoinGroup without waiting for it. With member_id_required (v4+, dynamic member, no id
        yet) the MEMBER_ID_REQUIRED round trip is done first, synchronously (it is answered at once)."""
        member_id = overrides.get("member_id", self.member_id)
        if member_id_required and version >= 4 and member_id == "" and self.group_instance_id is None:
            overrides.pop("member_id", None)
            first = self.conn.call(self.join_request(version, member_id="", **overrides), JoinGroupResponse)
            assert first.error_code == MEMBER_ID_REQUIRED, f"expected MEMBER_ID_REQUIRED, got {first}"
            assert first.member_id.startswith(self.client_id + "-"), first.member_id
            self.member_id = first.member_id
        return self.conn.send(self.join_request(version, **overrides), JoinGroupResponse).then(self._on_join)

    def join(self, version: int = 5, **kwargs: Any) -> Any:
        return self.send_join(version, **kwargs).result()

    def _on_join(self, resp: Any) -> None:
        if resp.error_code == NONE:
            self.member_id = resp.member_id
            self.generation_id = resp.generation_id
            self.leader = resp.leader
            self.protocol_name = resp.protocol_name
        elif resp.error_code == UNKNOWN_MEMBER_ID:
            self.member_id = ""

    @property
    def is_leader(self) -> bool:
        return self.member_id != "" and self.leader == self.member_id

    # -- SyncGroup --------------------------------------------------------------------------------

    def sync_request(self, version: int, assignments: dict[str, bytes] | None = None, **overrides: Any) -> ApiMessage:
        fields: dict[str, Any] = dict(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()],
        )
        fields.update(overrides)
        return SyncGroupRequest[version](**fields)

    def send_sync(self, assignments: dict[str, bytes] | None = None, version: int = 5, **overrides: Any) -> Pending:
        return self.conn.send(self.sync_request(version, assignments, **overrides), SyncGroupResponse).then(self._on_sync)

    def sync(self, assignments: dict[str, bytes] | None = None, version: int = 5, **overrides: Any) -> Any:
        return self.send_sync(assignments, version, **overrides).result()

    def _on_sync(self, resp: Any) -> None:
        if resp.error_code == NONE:
            self.assignment = resp.assignment

    # -- Heartbeat and LeaveGroup -----------------------------------------------------------------

    @property
    def hb_conn(self) -> Connection:
        if self._hb_conn is None:
            self._hb_conn = Connection(self.address, self.client_id)
        return self._hb_conn

    def heartbeat(self, version: int = 4, **overrides: Any) -> int:
        fields: dict[str, Any] = dict(group_id=self.group_id, generation_id=self.generation_id,
                                      member_id=self.member_id, group_instance_id=self.group_instance_id)
        fields.update(overrides)
        return int(self.hb_conn.call(HeartbeatRequest[version](**fields), HeartbeatResponse).error_code)

    def leave(self, version: int = 3) -> Any:
        """LeaveGroup for this member; v0-2 name the member directly, v3+ in the batch form."""
        if version >= 3:
            request = LeaveGroupRequest[version](group_id=self.group_id, members=[
                LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=self.group_instance_id,
                                                 reason="test")])
        else:
            request = LeaveGroupRequest[version](group_id=self.group_id, member_id=self.member_id)
        return self.hb_conn.call(request, LeaveGroupResponse)

    def close(self) -> None:
        self.conn.close()
        if self._hb_conn is not None:
            self._hb_conn.close()

    def __repr__(self) -> str:
        return f"GroupMember({self.client_id}, {self.member_id or '-'}, gen {self.generation_id})"


# -- group-level steps ------------------------------------------------------------------------------


def join_all(members: Iterable[GroupMember], version: int = 5, timeout_s: float = RESPONSE_TIMEOUT_S) -> list[Any]:
    """Every member sends a JoinGroup (concurrently, each on its own connection); all answers, in order."""
    pendings = [m.send_join(version) for m in members]
    return [p.result(timeout_s) for p in pendings]


def sync_all(members: list[GroupMember], assignments: dict[str, bytes] | None = None, version: int = 5) -> list[Any]:
    """Followers' SyncGroups first (they park), then the leader's with `assignments` (default: each member
    gets b"<client_id>@<generation>"); returns the responses in the order of `members`."""
    leaders = [m for m in members if m.is_leader]
    assert len(leaders) == 1, f"expected exactly one leader among {members}"
    leader = leaders[0]
    if assignments is None:
        assignments = {m.member_id: f"{m.client_id}@{m.generation_id}".encode() for m in members}
    pendings = {id(m): m.send_sync(version=version) for m in members if m is not leader}
    pendings[id(leader)] = leader.send_sync(assignments, version=version)
    return [pendings[id(m)].result() for m in members]


def rebalance(members: list[GroupMember], version: int = 5) -> tuple[list[Any], list[Any]]:
    joins = join_all(members, version)
    assert all(j.error_code == NONE for j in joins), joins
    return joins, sync_all(members)


def wait_until(condition: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.05,
               what: str = "condition") -> Any:
    """Poll `condition` until it returns something truthy; returns that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def close_all(members: Iterable[GroupMember]) -> None:
    for m in members:
        with contextlib.suppress(OSError):
            m.close()
