"""Group members driven over the wire: JoinGroup (with the KIP-394 MEMBER_ID_REQUIRED round trip), SyncGroup
(the leader assigns every member), and heartbeats once synced, rejoining on REBALANCE_IN_PROGRESS,
ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, as a consumer does. One connection per member: a parked
JoinGroup holds its connection.

Two uses, each in a process of its own:
    python -m benchmarks.members rebalance HOST PORT MEMBERS
        one group, all members connected first, then all join at once; prints the time from the first
        JoinGroup sent to the last SyncGroup answered of the generation in which every member is synced,
        the heartbeats sent and a per-generation timeline; on stop every member leaves the group.
    python -m benchmarks.members register HOST PORT GROUPS MEMBERS_PER_GROUP
        registers GROUPS Stable groups (for the peer, which has no log to preload), prints each group's
        generation and member ids, then keeps the connections open (and the members idle) until stdin closes.
    python -m benchmarks.members enroll HOST PORT GROUPS MEMBERS_PER_GROUP
        the same for Apache Kafka, with 30-minute sessions: a wave's members close their connections once
        their groups are Stable (they stay members), and it exits after printing.
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import sys
import time
from typing import Any

import uvloop

from .wire import (
    LEAVE_VERSION,
    ApiVersionsRequest,
    ApiVersionsResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    encode,
    heartbeat_frame,
    join_frame,
    read_join_answer,
    sync_error,
    sync_frame,
)

MEMBER_ID_REQUIRED = 79
REJOIN = {22, 25, 27}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS
SESSION_MS = 1_800_000  # members must not expire while a run lasts
# A synced member heartbeats every heartbeat.interval.ms, as a consumer does: Kafka's default, 3 s, whatever
# the group's size. (An earlier version scaled the interval with the group, 0.5 s at 5,000 members, and
# heartbeated only while some JoinGroup was parked; neither is what a client does.) A member synced in an
# earlier generation learns of the next rebalance only from a heartbeat, so it would add up to 3 s to the
# figure; each run reports how many heartbeats were sent and its generations' timeline, so such a run shows.
HEARTBEAT_INTERVAL_S = 3.0
RETRY_BACKOFF_S = 0.1  # retry.backoff.ms, Kafka's default: after an answer with a retriable error


class _Conn:
    """A connection over asyncio streams (benchmarks/failover.py reads its socket directly)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    async def call(self, request: Any, response_cls: Any) -> Any:
        self.correlation += 1
        self.writer.write(encode(request, self.correlation))
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        payload = await self.reader.readexactly(size)
        return response_cls.decode(payload, version=request.API_VERSION, header=True)

    async def call_raw(self, frame: bytes) -> bytes:
        self.writer.write(frame)
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return await self.reader.readexactly(size)

    def close(self) -> None:
        self.writer.close()


class _FrameConn(asyncio.Protocol):
    """A member's connection as a Protocol: each answer frame resolves the one request in flight. The same
    requests as `_Conn`, for a fraction of the driver's CPU (no stream reader, one future per answer), which
    the rebalance driver spends on the cores the server runs on."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.correlation = 0
        self._buffer = b""
        self._waiter: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buffer + data if self._buffer else data
        while len(buf) >= 4:
            end = 4 + int.from_bytes(buf[:4], "big")
            if len(buf) < end or self._waiter is None:
                break
            waiter, self._waiter = self._waiter, None
            waiter.set_result(buf[4:end])
            buf = buf[end:]
        self._buffer = buf

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError("connection closed"))

    async def call(self, request: Any, response_cls: Any) -> Any:
        self.correlation += 1
        payload = await self.call_raw(encode(request, self.correlation))
        return response_cls.decode(payload, version=request.API_VERSION, header=True)

    def call_raw(self, frame: bytes) -> asyncio.Future[bytes]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(frame)
        return self._waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_member_connection(host: str, port: int) -> _FrameConn:
    _, conn = await asyncio.get_running_loop().create_connection(_FrameConn, host, port)
    return conn


class Group:
    def __init__(self, group_id: str, size: int) -> None:
        self.group_id = group_id
        self.size = size
        self.synced: dict[str, int] = {}  # member id -> generation of its last successful SyncGroup
        self.last_sync_at = 0.0
        self.complete = asyncio.Event()
        self.generation = -1
        self.rounds = 0
        self.joining = 0  # JoinGroups with a member id sent and not yet answered
        self.syncing = 0  # SyncGroups sent and not yet answered
        # librdkafka's mock answers a follower's SyncGroup sent after the leader's with INVALID_REQUEST,
        # so when registering members with it the leader syncs last.
        self.leader_syncs_last = False
        self.session_ms = SESSION_MS
        self.heartbeat_interval_s = HEARTBEAT_INTERVAL_S
        self.heartbeat_only_while_joining = False
        # Set while a registration is still forming other groups: a complete group's members keep their
        # sessions alive with a heartbeat every keepalive_interval_s until it is cleared.
        self.keepalive: asyncio.Event | None = None
        self.keepalive_interval_s = 1.0
        self.leave_on_stop = False  # LeaveGroup on stop, as a consumer's close() does
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # set with `complete`
        self.started = time.perf_counter()
        # Per generation, what the members saw (times in ms from the start): the rebalance's anatomy.
        self.timeline: dict[int, dict[str, float]] = {}
        self.heartbeats = 0
        self.left = 0  # members whose LeaveGroup was answered NONE

    def note(self, generation: int, event: str) -> None:
        t = round((time.perf_counter() - self.started) * 1000, 1)
        entry = self.timeline.setdefault(generation, {})
        entry[event] = entry.get(event, 0) + 1
        entry.setdefault(event + "_first_ms", t)
        entry[event + "_last_ms"] = t

    def note_sync(self, member_id: str, generation: int) -> None:
        self.synced[member_id] = generation
        self.last_sync_at = time.perf_counter()
        if len(self.synced) == self.size and all(g == generation for g in self.synced.values()):
            self.generation = generation
            self.complete.set()
            self.done.set_result(None)


async def member(host: str, port: int, group: Group, index: int, stop: asyncio.Event,
                 conn: _FrameConn | None = None, first_join: bytes | None = None) -> str:
    """`first_join`: its first JoinGroup frame, built before the clock started (at the next correlation id)."""
    if conn is None:
        conn = await open_member_connection(host, port)
    member_id = ""
    metadata = b"sub-%d" % index
    while not stop.is_set():
        parked = member_id != ""
        group.joining += parked
        conn.correlation += 1
        if first_join is not None:
            frame, first_join = first_join, None
        else:
            frame = join_frame(group.group_id, group.session_ms, member_id, "range", metadata, conn.correlation)
        join = read_join_answer(await conn.call_raw(frame))
        group.joining -= parked
        if join.error_code == MEMBER_ID_REQUIRED:
            member_id = join.member_id
            continue
        if join.error_code != 0:
            if join.error_code == 25:
                member_id = ""
            await asyncio.sleep(0.01)
            continue
        member_id = join.member_id
        group.note(join.generation_id, "join")
        assignments: list[tuple[str, bytes]] = []
        if join.leader == member_id:
            group.rounds += 1
            assignments = [(m, b"assignment-%d" % i) for i, m in enumerate(join.members)]
            if group.leader_syncs_last:
                deadline = time.perf_counter() + 5.0
                while group.syncing < len(join.members) - 1 and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)
        group.syncing += 1
        conn.correlation += 1
        error = sync_error(await conn.call_raw(
            sync_frame(group.group_id, join.generation_id, member_id, assignments, conn.correlation)))
        group.syncing -= 1
        if error != 0:
            group.note(join.generation_id, "sync_error")
            continue
        group.note(join.generation_id, "sync")
        group.note_sync(member_id, join.generation_id)
        # Synced: heartbeat until the group is complete (or the member must rejoin).
        frame = heartbeat_frame(group.group_id, join.generation_id, member_id)
        rejoin = False
        while not group.complete.is_set():
            # asyncio.wait neither cancels the shared future on timeout nor needs a task per member.
            await asyncio.wait((group.done,), timeout=group.heartbeat_interval_s)
            if group.complete.is_set():
                break
            if group.heartbeat_only_while_joining and not group.joining:
                continue
            group.heartbeats += 1
            response = await conn.call_raw(frame)
            error = int.from_bytes(response[9:11], "big")  # v4: correlation, tags, throttle, error
            if error in REJOIN:
                group.note(join.generation_id, "heartbeat_rejoin")
                rejoin = True
                break
        if not rejoin and group.keepalive is not None:
            await _keep_alive(conn, group, join.generation_id, frame)
        if not rejoin:
            await stop.wait()
    if group.leave_on_stop and member_id:
        # Without it the members would stay registered for their 30-minute sessions, and every later run
        # on the same server would pay for them (a larger heap to garbage-collect, more timers).
        left = await conn.call(LeaveGroupRequest[LEAVE_VERSION](group_id=group.group_id, members=[
            LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=None)]), LeaveGroupResponse)
        group.left += left.error_code == 0 and all(m.error_code == 0 for m in left.members)
    conn.close()
    return member_id


async def _keep_alive(conn: _FrameConn, group: Group, generation: int, frame: bytes) -> None:
    """Heartbeat a complete group's member until the registration is over (group.keepalive cleared). A
    refused heartbeat is noted in the timeline and ends it: the registration is then reported as it stands,
    and the measurement's error count shows the lost member."""
    keepalive = group.keepalive
    assert keepalive is not None
    while keepalive.is_set():
        await asyncio.sleep(group.keepalive_interval_s)
        if not keepalive.is_set():
            return
        group.heartbeats += 1
        if int.from_bytes((await conn.call_raw(frame))[9:11], "big") != 0:
            group.note(generation, "keepalive_error")
            return


async def connect(host: str, port: int, count: int, at_once: int = 256) -> list[_FrameConn]:
    """Open `count` connections, each answered its ApiVersions, at most `at_once` in flight: a consumer has
    its coordinator connection (FindCoordinator, connect, ApiVersions) before it sends JoinGroup, so
    connecting is not part of the rebalance. Thousands of simultaneous SYNs would overflow the server's
    accept backlog and wait out the kernel's 1 s SYN retransmit; a connection counts as open once the
    server answered on it, so the accept queue never holds more than `at_once` (see findings.md,
    "Rebalance growth (session 2)")."""
    gate = asyncio.Semaphore(at_once)

    async def one() -> _FrameConn:
        async with gate:
            conn = await open_member_connection(host, port)
            await conn.call(ApiVersionsRequest[0](), ApiVersionsResponse)
            return conn

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def rebalance(host: str, port: int, size: int) -> dict[str, Any]:
    group = Group(f"rebalance-{size}-{time.time_ns()}", size)
    group.leave_on_stop = True
    stop = asyncio.Event()
    conns = await connect(host, port, size)
    # Each member's first JoinGroup is built before the clock starts, as a consumer's is ready before it
    # joins: the same bytes, at the correlation id it is sent with.
    first_joins = [join_frame(group.group_id, group.session_ms, "", "range", b"sub-%d" % i, conns[i].correlation + 1)
                   for i in range(size)]
    # The driver's own collector, settled like the server's (app._settle_heap; the driver keeps the young
    # threshold of 10,000 it was measured with, so a change of the server's shows alone): what exists
    # before the clock starts (the connections, the frames) is left out of its full collections, and the
    # youngest generation is collected less often. With the defaults its collections over thousands of
    # connections grew faster than the group and landed in the window (findings.md, "The rebalance path").
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 10)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = group.started = time.perf_counter()
    tasks = [asyncio.ensure_future(member(host, port, group, i, stop, conns[i], first_joins[i])) for i in range(size)]
    await asyncio.wait_for(group.complete.wait(), 600)
    seconds = group.last_sync_at - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    await asyncio.gather(*tasks)
    return {"members": size, "seconds": seconds, "started_monotonic_s": started,
            "generation": group.generation, "leader_rounds": group.rounds,
            "driver_cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            "heartbeats": group.heartbeats, "left": group.left,
            "timeline": {str(g): v for g, v in sorted(group.timeline.items())}}


# A wave normally registers in ~4-6 s (the mock's fixed 3 s first-join wait), once in a while in ~25 s.
WAVE_TIMEOUT_S = 40.0


async def _register_wave(host: str, port: int, indexes: range, per_group: int, stop: asyncio.Event,
                         keepalive: asyncio.Event) -> tuple[list[Group], dict[str, list[asyncio.Future[str]]]]:
    batch = [Group(f"peer-group-{g:06d}", per_group) for g in indexes]
    for g in batch:
        g.leader_syncs_last = True
        # A wave's groups complete seconds apart, and later waves take their own time: without it, an early
        # group's members would be silent for longer than their 10 s sessions before the measurement starts.
        g.keepalive = keepalive
        # The mock waits (session timeout - 1 s) for a member that joined late: 10 s sessions keep a
        # stalled round short, and the measurement heartbeats every registered member well within it.
        g.session_ms = 10_000
        # Registration only (not measured): heartbeat often, but only while a rebalance may be waiting.
        g.heartbeat_interval_s = 0.05
        g.heartbeat_only_while_joining = True
    # Connected first, so every JoinGroup of the wave lands inside the mock's 3 s first-join window:
    # a late one starts a rebalance that waits out the session timeout.
    conns = {g.group_id: list(await asyncio.gather(*(open_member_connection(host, port) for _ in range(per_group))))
             for g in batch}
    tasks = {g.group_id: [asyncio.ensure_future(member(host, port, g, i, stop, conns[g.group_id][i]))
                          for i in range(per_group)] for g in batch}
    return batch, tasks


async def register(host: str, port: int, groups: int, per_group: int) -> None:
    stop, keepalive = asyncio.Event(), asyncio.Event()
    keepalive.set()
    started = time.perf_counter()
    out: dict[str, Any] = {"groups": {}}
    all_tasks = []
    # Three groups (300 members) at a time: larger waves stall the mock (some group never completes its
    # first join round), smaller ones add more of its fixed 3 s first-join wait.
    wave = max(1, 300 // per_group)
    for first in range(0, groups, wave):
        batch, tasks = await _register_wave(host, port, range(first, min(groups, first + wave)), per_group, stop,
                                            keepalive)
        try:
            await asyncio.wait_for(asyncio.gather(*(g.complete.wait() for g in batch)), WAVE_TIMEOUT_S)
        except TimeoutError:
            # Now and then a group of the mock never completes its first join round, and from then on no
            # new group of that mock does either: give up, and let the caller start a fresh mock.
            stuck = [g.group_id for g in batch if not g.complete.is_set()]
            raise RuntimeError(f"the peer did not complete the join rounds of {stuck} in {WAVE_TIMEOUT_S} s") from None
        for g in batch:
            out["groups"][g.group_id] = {"generation": g.generation, "members": list(g.synced)}
            all_tasks += tasks[g.group_id]
    out["seconds"] = time.perf_counter() - started
    keepalive.clear()  # the caller's load heartbeats them from here on
    print(json.dumps(out), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    stop.set()
    await asyncio.gather(*all_tasks)


# A real broker (Apache Kafka): groups of a wave form at once, as in `register`; then their members close their
# connections without leaving, and stay members for their sessions. A member need not hold a connection: the
# load generator heartbeats them over its own, as it does the server's preloaded members.
ENROLL_WAVE_MEMBERS = 1_000
ENROLL_WAVE_TIMEOUT_S = 120.0  # a wave takes about 1.5 s on 2 cores; a busy machine may take far longer


async def enroll(host: str, port: int, groups: int, per_group: int) -> dict[str, Any]:
    started = time.perf_counter()
    out: dict[str, Any] = {"groups": {}}
    wave = max(1, ENROLL_WAVE_MEMBERS // per_group)
    for first in range(0, groups, wave):
        stop = asyncio.Event()
        # Named by the run's size: a later run on the same broker must not join the earlier run's groups, whose
        # members (no longer heartbeating, sessions of 30 minutes) would hold every rebalance for its timeout.
        batch = [Group(f"kafka-{groups}x{per_group}-group-{g:06d}", per_group)
                 for g in range(first, min(groups, first + wave))]
        for g in batch:
            g.heartbeat_interval_s = 0.2  # a member synced in an earlier round learns of the next one soon
        conns = list(await connect(host, port, len(batch) * per_group))
        tasks = [asyncio.ensure_future(member(host, port, g, i, stop, conns[n * per_group + i]))
                 for n, g in enumerate(batch) for i in range(per_group)]
        try:
            await asyncio.wait_for(asyncio.gather(*(g.complete.wait() for g in batch)), ENROLL_WAVE_TIMEOUT_S)
        except TimeoutError:
            stuck = {g.group_id: {"synced": len(g.synced), "generation": max(g.synced.values(), default=-1),
                                  "joining": g.joining, "syncing": g.syncing}
                     for g in batch if not g.complete.is_set()}
            raise RuntimeError(f"groups not Stable in {ENROLL_WAVE_TIMEOUT_S} s: {stuck}") from None
        stop.set()
        await asyncio.gather(*tasks)
        for g in batch:
            out["groups"][g.group_id] = {"generation": g.generation, "members": list(g.synced)}
    out["seconds"] = time.perf_counter() - started
    return out


def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "rebalance":
        print(json.dumps(uvloop.run(rebalance(host, port, int(sys.argv[4])))), flush=True)
    elif mode == "enroll":
        out = uvloop.run(enroll(host, port, int(sys.argv[4]), int(sys.argv[5])))
        # The loop left stdout non-blocking: a pipe takes 64 KiB, and the rest of a long line would be lost.
        os.set_blocking(sys.stdout.fileno(), True)
        print(json.dumps(out), flush=True)
    else:
        uvloop.run(register(host, port, int(sys.argv[4]), int(sys.argv[5])))


if __name__ == "__main__":
    main()
