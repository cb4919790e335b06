"""The failover driver: one-member groups on a cluster, each member speaking a consumer's group protocol with
kafka-python's message classes over raw connections, and how long each group of a killed coordinator takes
to be Stable again on its new one.

    python -m benchmarks.failover BOOTSTRAP GROUPS SESSION_MS
        BOOTSTRAP is host:port,host:port,... Prints {"groups": {group: coordinator node id}, ...} once every
        member has joined, synced and heartbeats; then reads one stdin line `killed NODE_ID MONOTONIC_S`
        (the caller's kill -9 and its time.monotonic(), one clock for every process on Linux), waits until
        every group NODE_ID coordinated is Stable on another node, checks that with DescribeGroups, prints
        the result and exits.

A member does what a consumer's AbstractCoordinator (Java's and kafka-python's) does when its coordinator
dies: the connection drops (a kill -9 closes its sockets), it marks the coordinator unknown and asks a
bootstrap node FindCoordinator every retry.backoff.ms (100 ms) until the answer names a node it can connect
to, then heartbeats there with its member id and generation — at once, since its last heartbeat is more than
heartbeat.interval.ms old by then. The new coordinator loaded the group from its replica of the log, Stable
with its member and a fresh session deadline, so the heartbeat is answered NONE. Were the heartbeat refused
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS) the member would rejoin and sync; the result
says how many did. COORDINATOR_LOAD_IN_PROGRESS is retried after the backoff; NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE send the member back to FindCoordinator.

An answer of NONE does not prove the group loaded: Kafka answers a heartbeat NONE while the group's
partition is still loading, as it cannot tell yet. So after the first NONE (or SyncGroup) from a new
coordinator, the member asks that coordinator DescribeGroups of its group, every retry.backoff.ms while the
answer is COORDINATOR_LOAD_IN_PROGRESS, and the group counts as Stable again once it is described Stable
with this member: the moment the new coordinator serves it. The result counts the members that waited so.
"""
from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
import warnings
from typing import Any

import uvloop

from .members import HEARTBEAT_INTERVAL_S, MEMBER_ID_REQUIRED, REJOIN, RETRY_BACKOFF_S, _Conn
from .wire import (
    JOIN_VERSION,
    SYNC_VERSION,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    heartbeat_frame,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_GONE = {15, 16}  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
UNKNOWN_MEMBER_ID = 25
REGISTER_AT_ONCE = 200  # members registering concurrently (see members.connect on the accept backlog)
FAILOVER_TIMEOUT_S = 120.0


class _CoordinatorLost(Exception):
    """The coordinator's connection dropped, or it said it is not (or no longer) the coordinator."""


class _Retry(Exception):
    """COORDINATOR_LOAD_IN_PROGRESS: the same request again after the backoff."""


class _Rejoin(Exception):
    """The coordinator does not know this member or generation: JoinGroup again."""


def _check(error: int) -> None:
    if error == 0:
        return
    if error == COORDINATOR_LOAD_IN_PROGRESS:
        raise _Retry
    if error in COORDINATOR_GONE:
        raise _CoordinatorLost
    if error in REJOIN:
        raise _Rejoin
    raise RuntimeError(f"unexpected error code {error}")


class Member:
    def __init__(self, group_id: str, bootstrap: list[tuple[str, int]], session_ms: int, index: int) -> None:
        self.group_id = group_id
        self.bootstrap = bootstrap
        self.session_ms = session_ms
        self.boot_index = index % len(bootstrap)  # the bootstrap node it asks FindCoordinator
        self.boot: _Conn | None = None
        self.conn: _Conn | None = None
        self.node = -1  # the coordinator it is connected to
        self.address: tuple[str, int] = ("", 0)
        self.first_node = -1  # its coordinator when it registered
        self.member_id = ""
        self.generation = -1
        self.registered = asyncio.Event()
        self.moved_at: float | None = None  # first confirmed Stable on a node other than first_node
        self.last_heartbeat_s = 0.0
        self.rejoins = 0
        self.lookups = 0  # FindCoordinator requests after registering
        self.lost = 0  # coordinator connections lost (or coordinators gone) after registering
        self.load_waits = 0  # DescribeGroups answered COORDINATOR_LOAD_IN_PROGRESS after a NONE

    async def run(self, gate: asyncio.Semaphore) -> None:
        need_join = True
        async with gate:  # registration: a bounded number at a time
            while not self.registered.is_set():
                need_join = await self._step(need_join, heartbeat=False)
        while True:
            need_join = await self._step(need_join, heartbeat=True)

    async def _step(self, need_join: bool, heartbeat: bool) -> bool:
        """One round of the member's loop; returns whether it must (re)join."""
        try:
            if self.conn is None:
                await self._find_coordinator()
            if need_join:
                await self._join_and_sync()
                need_join = False
                await self._on_stable()
            if heartbeat:
                await self._heartbeat_until_error()
        except _Retry:
            await asyncio.sleep(RETRY_BACKOFF_S)
        except _Rejoin:
            self.rejoins += self.registered.is_set()
            return True
        except (_CoordinatorLost, OSError, EOFError):
            self.lost += self.registered.is_set()
            self._close_coordinator()
        return need_join

    async def _on_stable(self) -> None:
        if not self.registered.is_set():
            self.first_node = self.node
            self.registered.set()
        elif self.node != self.first_node and self.moved_at is None and await self._described_stable():
            self.moved_at = time.monotonic()

    async def _described_stable(self) -> bool:
        """Whether the coordinator describes the group Stable with this member, once it has loaded it."""
        assert self.conn is not None
        while True:
            resp = await self.conn.call(DescribeGroupsRequest[5](groups=[self.group_id],
                                                                 include_authorized_operations=False),
                                        DescribeGroupsResponse)
            (g,) = resp.groups
            if g.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                break
            self.load_waits += 1
            await asyncio.sleep(RETRY_BACKOFF_S)
        if g.error_code in COORDINATOR_GONE:
            raise _CoordinatorLost
        # Anything else short of Stable with this member: its next heartbeat's answer tells it what to do.
        return bool(g.error_code == 0 and g.group_state == "Stable"
                    and [m.member_id for m in g.members] == [self.member_id])

    def _close_coordinator(self) -> None:
        if self.conn is not None:
            self.conn.writer.close()
        self.conn, self.node = None, -1

    async def _find_coordinator(self) -> None:
        while True:
            try:
                if self.boot is None:
                    self.boot = _Conn(*await asyncio.open_connection(*self.bootstrap[self.boot_index]))
                self.lookups += self.registered.is_set()
                resp = await self.boot.call(FindCoordinatorRequest[3](key=self.group_id, key_type=0),
                                            FindCoordinatorResponse)
            except (OSError, EOFError):  # that bootstrap node is gone: ask the next one
                if self.boot is not None:
                    self.boot.writer.close()
                self.boot = None
                self.boot_index = (self.boot_index + 1) % len(self.bootstrap)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if resp.error_code == 0:
                try:
                    self.conn = _Conn(*await asyncio.open_connection(resp.host, resp.port))
                except OSError:  # named a node that is dead (the survivors do not know yet)
                    pass
                else:
                    self.node, self.address = resp.node_id, (resp.host, resp.port)
                    return
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _join_and_sync(self) -> None:
        assert self.conn is not None
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"sub")]
        while True:
            join = await self.conn.call(JoinGroupRequest[JOIN_VERSION](
                group_id=self.group_id, session_timeout_ms=self.session_ms, rebalance_timeout_ms=self.session_ms,
                member_id=self.member_id, group_instance_id=None, protocol_type="consumer", protocols=protocols,
                reason=None), JoinGroupResponse)
            if join.error_code == MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            _check(join.error_code)
            break
        self.member_id, self.generation = join.member_id, join.generation_id
        assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"all")
                       for m in join.members] if join.leader == self.member_id else []
        sync = await self.conn.call(SyncGroupRequest[SYNC_VERSION](
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, assignments=assignments), SyncGroupResponse)
        _check(sync.error_code)
        self.last_heartbeat_s = time.monotonic()  # a SyncGroup counts as a heartbeat

    async def _heartbeat_until_error(self) -> None:
        assert self.conn is not None
        frame = heartbeat_frame(self.group_id, self.generation, self.member_id)
        while True:
            wait_s = self.last_heartbeat_s + HEARTBEAT_INTERVAL_S - time.monotonic()
            if wait_s > 0:
                # Idle until the heartbeat is due, noticing at once if the connection drops: nothing
                # arrives unasked on it, so a read that completes is the end of the stream.
                try:
                    await asyncio.wait_for(self.conn.reader.read(1), wait_s)
                except TimeoutError:
                    pass
                else:
                    raise _CoordinatorLost
            self.last_heartbeat_s = time.monotonic()
            try:
                response = await self.conn.call_raw(frame)
                _check(int.from_bytes(response[9:11], "big"))  # v4: correlation, tags, throttle, error
            except Exception:
                # Java's Heartbeat.failHeartbeat: after a failed heartbeat the next one is due after the
                # retry backoff (which _step waits where it applies), not a whole interval later.
                self.last_heartbeat_s = time.monotonic() - HEARTBEAT_INTERVAL_S
                raise
            await self._on_stable()


async def describe(members: list[Member]) -> dict[str, Any]:
    """DescribeGroups of each moved group at its new coordinator: Stable, with exactly its member."""
    by_address: dict[tuple[str, int], list[Member]] = {}
    for m in members:
        by_address.setdefault(m.address, []).append(m)
    stable, problems = 0, []
    for address, ms in by_address.items():
        conn = _Conn(*await asyncio.open_connection(*address))
        try:
            resp = await conn.call(DescribeGroupsRequest[5](groups=[m.group_id for m in ms],
                                                            include_authorized_operations=False),
                                   DescribeGroupsResponse)
        finally:
            conn.writer.close()
        want = {m.group_id: m.member_id for m in ms}
        for g in resp.groups:
            if g.error_code == 0 and g.group_state == "Stable" and [x.member_id for x in g.members] == [want[g.group_id]]:
                stable += 1
            elif len(problems) < 10:
                problems.append({"group": g.group_id, "error": g.error_code, "state": g.group_state,
                                 "members": [x.member_id for x in g.members]})
    return {"stable": stable, "problems": problems}


def _quantile(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))]


async def failover(bootstrap: list[tuple[str, int]], groups: int, session_ms: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    members = [Member(f"failover-{i:05d}", bootstrap, session_ms, i) for i in range(groups)]
    gate = asyncio.Semaphore(REGISTER_AT_ONCE)
    started = time.monotonic()
    tasks = [asyncio.ensure_future(m.run(gate)) for m in members]
    registered = asyncio.ensure_future(asyncio.gather(*(m.registered.wait() for m in members)))
    await _until(registered, tasks, 300.0, "registering")
    print(json.dumps({"groups": {m.group_id: m.first_node for m in members},
                      "register_s": round(time.monotonic() - started, 3)}), flush=True)

    line = await loop.run_in_executor(None, sys.stdin.readline)
    _, victim_s, killed_s = line.split()
    victim, killed_at = int(victim_s), float(killed_s)
    moved = [m for m in members if m.first_node == victim]
    others = [m for m in members if m.first_node != victim]

    async def all_moved() -> None:
        while any(m.moved_at is None for m in moved):
            await asyncio.sleep(0.01)

    await _until(asyncio.ensure_future(all_moved()), tasks, FAILOVER_TIMEOUT_S, "failing over",
                 lambda: f"{sum(m.moved_at is None for m in moved)} of {len(moved)} groups not Stable again")
    times = sorted(m.moved_at - killed_at for m in moved if m.moved_at is not None)
    checked = await describe(moved)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "groups": groups, "victim": victim, "moved": len(moved), "seconds": times[-1], "first_s": times[0],
        "p50_s": _quantile(times, 0.5), "p99_s": _quantile(times, 0.99),
        "new_coordinators": sorted({m.node for m in moved}), "rejoins": sum(m.rejoins for m in moved),
        "lookups": sum(m.lookups for m in moved), "described_stable": checked["stable"],
        "load_waits": sum(m.load_waits > 0 for m in moved),
        "describe_problems": checked["problems"],
        # Groups of the other nodes should not notice: their coordinators kept their connections.
        "others_lost_coordinator": sum(m.lost > 0 for m in others),
        "session_ms": session_ms, "heartbeat_interval_ms": int(HEARTBEAT_INTERVAL_S * 1000),
    }


async def _until(fut: asyncio.Future[Any], tasks: list[asyncio.Future[None]], timeout_s: float, what: str,
                 detail: Any = lambda: "") -> None:
    """Wait for `fut`, failing at once if a member gave up (an unexpected error), or after `timeout_s`."""
    done, _ = await asyncio.wait([fut, *tasks], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    if fut in done:
        return
    for t in done:
        t.result()  # raises the member's error
    raise RuntimeError(f"timed out after {timeout_s:.0f} s {what}: {detail()}")


def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    bootstrap = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[1].split(","))]
    print(json.dumps(uvloop.run(failover(bootstrap, int(sys.argv[2]), int(sys.argv[3])))), flush=True)


if __name__ == "__main__":
    main()
