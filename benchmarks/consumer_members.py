"""KIP-848 consumer-protocol members driven over the wire (ConsumerGroupHeartbeat), as the Java client's
consumer-protocol member behaves, then the heartbeat load on the group they formed.

    python -m benchmarks.consumer_members SPEC.json

The spec (JSON): host, port, pid (the process whose CPU is sampled), members, topic, partitions (the topic's
count), assignor, cutoff_s, and steady (null to skip the load phase, else warmup_s, duration_s,
connections), session_timeout_ms (the coordinator's, to tell a zombie's overlap from a violation). Prints
one JSON object.

One connection per member, as each consumer holds its own connection to its coordinator; they are opened (and
answered an ApiVersions) in waves of 256 before the clock starts, so the accept backlog never overflows
(members.connect). Then every member joins at once: epoch 0, its own member id (v1), the subscription to the
topic, the named server-side assignor, no owned partitions. From then on each member heartbeats with its
epoch every heartbeat interval the answer gives, sending only what changed since its last heartbeat (null
fields otherwise, as the Java client). An answer's assignment is reconciled at once: partitions no longer in
it are released (their processing is done), new ones taken, and the new owned set is acknowledged on a
heartbeat sent right away (the Java client heartbeats at once after reconciling, not at the interval).
FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the member releases everything and rejoins with epoch 0 (counted).

Converged: every member at the same epoch (the last one any answer gave, so the group's epoch once all
joined), each one's owned set acknowledged, every partition of the topic owned by exactly one member. That
moment (the answer that completed it) is confirmed with a ConsumerGroupDescribe: the group's epoch and
assignment epoch equal to it, every member at it with its assignment equal to its target. Overlap (a
partition in two members' owned sets at once) is counted on every change, and the worst moment recorded; apart,
the overlaps KIP-848's revoke-before-assign forbids: those given while an earlier holder's session was
certainly alive (see Group.live_overlaps).

The load phase: the members stop heartbeating, and the load generator (benchmarks/loadgen.py, its own process)
cycles one pre-encoded steady heartbeat of each member (its epoch, every other field null) through 32
connections with one request in flight each, as the classic heartbeat rows do: only error-0 answers count,
and the CPU of the process `pid` per answer. Then every member leaves (epoch -1).
"""
from __future__ import annotations

import asyncio
import base64
import gc
import json
import resource
import sys
import time
import uuid
from collections import Counter
from typing import Any

import uvloop

from . import consumer_heartbeat as hb
from .members import RETRY_BACKOFF_S, _FrameConn, connect, open_member_connection
from .scenarios import _CpuSampler, _measured

REBALANCE_TIMEOUT_MS = 300_000  # the Java client's max.poll.interval.ms
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
DESCRIBE_TIMEOUT_S = 15.0
LEAVE_TIMEOUT_S = 20.0


def member_id() -> str:
    """As the Java client makes its own: a random UUID in URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class Member:
    def __init__(self, conn: _FrameConn, mid: str) -> None:
        self.conn = conn
        self.member_id = mid
        self.epoch = 0
        self.owned: hb.Partitions = {}
        self.reported: hb.Partitions | None = None  # the owned set the coordinator last answered with no error
        self.interval_s = 1.0
        # When the last request answered with no error was sent: the coordinator refreshed the member's
        # session no earlier, so it cannot have expired it before this plus the session timeout.
        self.refreshed_at = 0.0


class Group:
    """What every member holds, kept up to date on each answer: the driver's view of the group."""

    def __init__(self, group_id: str, members: list[Member], partitions: int, session_s: float) -> None:
        self.group_id = group_id
        self.members = members
        self.partitions = partitions
        self.session_s = session_s
        self.owners: dict[tuple[bytes, int], set[Member]] = {}
        self.overlapping = 0  # partitions in more than one member's owned set
        self.worst_overlap = 0
        self.worst_overlap_at_s: float | None = None
        # Of those, the ones given to a member while an earlier holder's session was certainly alive (it had
        # not acknowledged their revocation): what revoke-before-assign forbids. The others were held by a
        # member whose session the coordinator may have expired, which frees its partitions at once (it
        # learns so on its next answer, UNKNOWN_MEMBER_ID): a zombie's, as with any Kafka consumer.
        self.live_overlaps: set[tuple[bytes, int]] = set()
        self.worst_live_overlap = 0
        self.worst_live_overlap_at_s: float | None = None
        self.max_latency_s = 0.0  # the longest a request waited for its answer
        self.max_epoch = 0
        self.started = 0.0
        self.changed = asyncio.Event()
        self.last_change_at = 0.0
        self.heartbeats = 0
        self.rejoins: Counter[int] = Counter()  # by the error that made the member rejoin
        self.errors: Counter[int] = Counter()
        self.first_messages: dict[int, str | None] = {}
        self.joined = 0  # members answered their first join
        self.all_joined_at: float | None = None
        self.first_covered_at: float | None = None
        self.interval_ms: int | None = None
        self.quiet = False  # the load phase: members stop heartbeating

    def take(self, member: Member, owned: hb.Partitions) -> None:
        """The member now holds `owned`: what it released and what it took, for the overlap count."""
        now = time.perf_counter()
        for topic_id, partitions in member.owned.items():
            for p in partitions - owned.get(topic_id, frozenset()):
                key = (topic_id, p)
                holders = self.owners[key]
                holders.discard(member)
                if len(holders) == 1:
                    self.overlapping -= 1
                    self.live_overlaps.discard(key)
                elif not holders:
                    del self.owners[key]
        for topic_id, partitions in owned.items():
            for p in partitions - member.owned.get(topic_id, frozenset()):
                key = (topic_id, p)
                holders = self.owners.setdefault(key, set())
                if len(holders) == 1:
                    self.overlapping += 1
                if holders and any(now < h.refreshed_at + self.session_s for h in holders):
                    self.live_overlaps.add(key)
                holders.add(member)
        member.owned = owned
        if self.overlapping > self.worst_overlap:
            self.worst_overlap = self.overlapping
            self.worst_overlap_at_s = now - self.started
        if len(self.live_overlaps) > self.worst_live_overlap:
            self.worst_live_overlap = len(self.live_overlaps)
            self.worst_live_overlap_at_s = now - self.started
        if self.first_covered_at is None and len(self.owners) == self.partitions:
            self.first_covered_at = time.perf_counter()

    def note_change(self) -> None:
        self.last_change_at = time.perf_counter()
        self.changed.set()

    def converged(self) -> bool:
        if len(self.owners) != self.partitions or self.overlapping or self.joined < len(self.members):
            return False
        epoch = self.max_epoch
        return all(m.epoch == epoch and m.reported == m.owned for m in self.members)

    def holding(self) -> int:
        """Members at the last epoch with their owned set acknowledged (what is left short of convergence)."""
        return sum(m.epoch == self.max_epoch and m.reported == m.owned for m in self.members)


async def run_member(group: Group, m: Member, topic: str, assignor: str, first: bytes) -> None:
    """Returns when the group goes quiet (the load phase), at its next interval heartbeat."""
    frame, sent_owned = first, {}  # the join, built before the clock started
    while True:
        group.heartbeats += 1
        sent_at = time.perf_counter()
        answer = hb.read_answer(await m.conn.call_raw(frame))
        group.max_latency_s = max(group.max_latency_s, time.perf_counter() - sent_at)
        if answer.error_code == 0:
            m.refreshed_at = sent_at
            if m.epoch == 0:
                group.joined += 1
                if group.joined == len(group.members):
                    group.all_joined_at = time.perf_counter()
            if group.interval_ms is None:
                group.interval_ms = answer.heartbeat_interval_ms
            m.interval_s = answer.heartbeat_interval_ms / 1000
            changed = answer.member_epoch != m.epoch
            m.epoch = answer.member_epoch
            group.max_epoch = max(group.max_epoch, m.epoch)
            if sent_owned is not None and sent_owned != m.reported:
                m.reported, changed = sent_owned, True
            if answer.assignment is not None and answer.assignment != m.owned:
                group.take(m, answer.assignment)  # revoked partitions released at once, new ones taken
                changed = True
            if changed:
                group.note_change()
        elif answer.error_code in (hb.FENCED_MEMBER_EPOCH, hb.UNKNOWN_MEMBER_ID):
            group.rejoins[answer.error_code] += 1
            if m.epoch:
                group.joined -= 1
            group.take(m, {})
            m.epoch, m.reported = 0, None
            group.note_change()
        else:
            group.errors[answer.error_code] += 1
            group.first_messages.setdefault(answer.error_code, answer.error_message)
            await asyncio.sleep(RETRY_BACKOFF_S if answer.error_code in RETRIABLE else m.interval_s)
            if m.epoch:
                m.reported = None  # sent again in full, as the Java client resets its sent fields
        if m.epoch == 0:
            frame, sent_owned = hb.join_frame(group.group_id, m.member_id, topic, assignor, REBALANCE_TIMEOUT_MS,
                                              m.conn.correlation + 1), {}
        elif m.owned != m.reported:  # acknowledge the reconciled assignment now
            frame, sent_owned = hb.heartbeat_frame(group.group_id, m.member_id, m.epoch, m.conn.correlation + 1,
                                                   owned=m.owned), m.owned
        else:
            await asyncio.sleep(m.interval_s)
            if group.quiet:
                return
            frame, sent_owned = hb.heartbeat_frame(group.group_id, m.member_id, m.epoch,
                                                   m.conn.correlation + 1), None
        m.conn.correlation += 1


async def describe(host: str, port: int, group_id: str) -> dict[str, Any]:
    """The coordinator's view (ConsumerGroupDescribe v0): its epochs and how many members hold their target."""
    from protocol.consumer_group_messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
    conn = await open_member_connection(host, port)
    try:
        resp = await conn.call(ConsumerGroupDescribeRequest[0](group_ids=[group_id], include_authorized_operations=False),
                               ConsumerGroupDescribeResponse)
    finally:
        conn.close()
    g = resp.groups[0]

    def partitions(a: Any) -> dict[str, list[int]]:
        return {str(tp.topic_id): sorted(tp.partitions) for tp in a.topic_partitions}

    holding = sum(m.member_epoch == g.group_epoch and partitions(m.assignment) == partitions(m.target_assignment)
                  for m in g.members)
    return {"error_code": g.error_code, "state": g.group_state, "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch, "members": len(g.members), "holding_target": holding,
            "assignor": g.assignor_name}


async def converge(spec: dict[str, Any], cpu: _CpuSampler) -> tuple[dict[str, Any], Group, list[asyncio.Task[None]]]:
    host, port, n = spec["host"], spec["port"], spec["members"]
    conns = await connect(host, port, n)
    members = [Member(c, member_id()) for c in conns]
    group = Group(f"consumer-wire-{n}-{time.time_ns()}", members, spec["partitions"], spec["session_timeout_ms"] / 1000)
    firsts = [hb.join_frame(group.group_id, m.member_id, spec["topic"], spec["assignor"], REBALANCE_TIMEOUT_MS,
                            m.conn.correlation + 1) for m in members]
    for m in members:
        m.conn.correlation += 1
    # The driver's collector settled as members.rebalance settles it: the connections and frames made before
    # the clock are left out of full collections.
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 10)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    group.started = started = time.perf_counter()
    tasks = [asyncio.ensure_future(run_member(group, m, spec["topic"], spec["assignor"], f))
             for m, f in zip(members, firsts, strict=True)]
    deadline = started + spec["cutoff_s"]
    out: dict[str, Any] = {"members": n, "partitions": spec["partitions"], "group_id": group.group_id}
    converged_at = None
    while time.perf_counter() < deadline:
        try:
            await asyncio.wait_for(group.changed.wait(), max(0.0, deadline - time.perf_counter()))
        except TimeoutError:
            break
        group.changed.clear()
        await asyncio.sleep(0.01)  # a burst of answers, checked once
        if group.converged():
            converged_at = group.last_change_at
            view = await asyncio.wait_for(describe(host, port, group.group_id), DESCRIBE_TIMEOUT_S)
            if view["group_epoch"] == view["assignment_epoch"] == group.max_epoch and view["holding_target"] == n:
                out["describe"] = view
                group.quiet = True
                break
            out.setdefault("describe_disagreed", []).append(view)  # not there yet after all: keep going
            converged_at = None
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    end = converged_at or time.perf_counter()
    out.update(
        converged=converged_at is not None, seconds=(converged_at - started) if converged_at else None,
        cutoff_s=spec["cutoff_s"], started_monotonic_s=started, epoch=group.max_epoch,
        heartbeat_interval_ms=group.interval_ms, heartbeats=group.heartbeats,
        rejoins=sum(group.rejoins.values()), rejoins_by_error={str(k): v for k, v in group.rejoins.items()},
        max_latency_s=group.max_latency_s,
        errors={str(k): v for k, v in group.errors.items()},
        error_messages={str(k): v for k, v in group.first_messages.items()},
        all_joined_s=group.all_joined_at - started if group.all_joined_at else None,
        first_covered_s=group.first_covered_at - started if group.first_covered_at else None,
        worst_overlap=group.worst_overlap, worst_overlap_at_s=group.worst_overlap_at_s,
        worst_live_overlap=group.worst_live_overlap, worst_live_overlap_at_s=group.worst_live_overlap_at_s,
        driver_cpu_s=(cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime))
    await asyncio.sleep(0.03)  # a CPU sample past the window's end
    out["server_cpu_s"] = cpu.between(started, end)
    if converged_at is None:
        # Short of convergence at the cut-off: the driver's count, and the coordinator's if it answers.
        out.update(holding=group.holding(), owned_partitions=len(group.owners), overlapping=group.overlapping,
                   live_overlapping=len(group.live_overlaps),
                   joined=group.joined)
        try:
            out["describe"] = await asyncio.wait_for(describe(host, port, group.group_id), DESCRIBE_TIMEOUT_S)
        except Exception as e:
            out["describe"] = {"error": repr(e)}
    return out, group, tasks


async def leave(group: Group) -> int:
    async def one(m: Member) -> bool:
        m.conn.correlation += 1
        answer = hb.read_answer(await m.conn.call_raw(
            hb.heartbeat_frame(group.group_id, m.member_id, hb.LEAVE_EPOCH, m.conn.correlation)))
        return answer.error_code == 0

    try:
        return sum(await asyncio.wait_for(asyncio.gather(*(one(m) for m in group.members)), LEAVE_TIMEOUT_S))
    except TimeoutError:
        return -1


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    cpu = _CpuSampler(spec["pid"])
    try:
        out, group, tasks = await converge(spec, cpu)
    finally:
        cpu.stop()
    steady = spec.get("steady")
    if out["converged"]:
        # Every member parked (it finished its heartbeat in flight and sleeps no more): no driver traffic
        # beside the load.
        await asyncio.wait_for(asyncio.gather(*tasks), max(m.interval_s for m in group.members) + 30)
        if steady:
            frames = [hb.heartbeat_frame(group.group_id, m.member_id, m.epoch, i) for i, m in enumerate(group.members)]
            c = steady["connections"]
            load = await asyncio.get_running_loop().run_in_executor(None, lambda: _measured(
                spec["pid"], spec["host"], spec["port"], [frames[i::c] for i in range(c)], connections=c,
                warmup_s=steady["warmup_s"], duration_s=steady["duration_s"], error_offset=hb.error_offset()))
            ok = load["requests"] - load["errors"]
            load["ok_rps"] = ok / load["seconds"]
            load["server_cpu_us_per_ok"] = load["server_cpu_s"] / ok * 1e6 if ok and load["server_cpu_s"] else None
            out["steady"] = load
        out["left"] = await leave(group)
    else:
        # Requests may be in flight on a coordinator that fell behind: the members stop where they are and
        # their connections close (the scenario stops that server; Kafka expires their sessions).
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for m in group.members:
        m.conn.close()
    return out


def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    out = uvloop.run(run(spec))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
