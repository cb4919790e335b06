"""Shared machinery of the end-to-end tests, the test side: `Workers` starts real Kafka clients, each in its
own OS process (tests/integration/e2e_clients.py, which lists the events they report), collects their
events, and `run_scenario` and `verify` drive a scenario and check the end-to-end invariants; see `verify`.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conftest import ServerProcess

CLIENT_SCRIPT = Path(__file__).resolve().with_name("e2e_clients.py")


def free_port() -> int:
    """A port that was free a moment ago (the server is started on it, so a restart keeps it).

    Picked *below* the kernel's ephemeral range: while the server is down, the clients keep connecting
    to the port, and one whose own ephemeral port happened to be the same would connect to itself
    (TCP simultaneous open) and keep the restarted server from binding."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, max(low, 10_001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


# ======================================================================================== test side


class Worker:
    """One client process; its stdout events and stderr lines are collected by reader threads."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen([sys.executable, str(CLIENT_SCRIPT), *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._events: list[dict[str, Any]] = []
        self._stderr: list[str] = []
        self._lock = threading.Lock()
        self.killed = False
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"ev": "garbage", "line": line}
            with self._lock:
                self._events.append(event)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self._stderr.append(line.rstrip("\n"))

    def events(self, ev: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._events if ev is None or e["ev"] == ev]

    def stderr_tail(self, n: int = 25) -> str:
        """The last `n` lines, or from its last traceback on if the process died of one."""
        with self._lock:
            lines = self._stderr[-n:]
            if self.proc.poll() not in (None, 0) and not self.killed:
                starts = [i for i, line in enumerate(self._stderr) if line.startswith("Traceback")]
                if starts:
                    lines = self._stderr[starts[-1]:][-200:]
            return "\n".join(lines)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        self.killed = True
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def wait_exit(self, timeout_s: float) -> int:
        """The exit code, once the process has exited and its last lines are read: an exit can be seen
        before the reader threads reach the end of its pipes (on CI the producer's final "done" was missed)."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout_s}s:\n{self.stderr_tail()}") from None
        for t in self._threads:
            t.join(10)
        return rc

    def stop(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)
        for t in self._threads:
            t.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- consumer views ------------------------------------------------------------------------------

    def assignment(self) -> tuple[int | None, frozenset[int]]:
        """(generation, partitions) this consumer holds now, from its rebalance-listener events."""
        gen, parts = None, frozenset[int]()
        for e in self.events():
            if e["ev"] == "assigned":
                gen, parts = e["gen"], frozenset(e["partitions"])
            elif e["ev"] == "revoked":
                gen, parts = None, frozenset()
        return gen, parts


@dataclass
class Workers:
    """Every process of one test; `close()` kills whatever is still running."""

    client: str
    bootstrap: str
    topic: str
    group: str = "e2e"
    consumer_args: list[str] = field(default_factory=list)
    all: list[Worker] = field(default_factory=list)

    def consumer(self, name: str) -> Worker:
        w = Worker(name, ["consumer", "--client", self.client, "--bootstrap", self.bootstrap, "--topic", self.topic,
                          "--group", self.group, "--name", name, *self.consumer_args])
        self.all.append(w)
        return w

    def producer(self, total: int, chunk: int, interval_s: float) -> Worker:
        w = Worker("producer", ["producer", "--client", self.client, "--bootstrap", self.bootstrap, "--topic",
                                self.topic, "--total", str(total), "--chunk", str(chunk), "--interval-s", str(interval_s)])
        self.all.append(w)
        return w

    @property
    def consumers(self) -> list[Worker]:
        return [w for w in self.all if w.name != "producer"]

    def close(self) -> None:
        for w in self.all:
            w.stop()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {w.name} (rc={w.proc.poll()}) stderr:\n{w.stderr_tail()}" for w in self.all)


@contextlib.contextmanager
def workers(client: str, bootstrap: str, topic: str, **kw: Any) -> Iterator[Workers]:
    ws = Workers(client, bootstrap, topic, **kw)
    try:
        yield ws
    finally:
        ws.close()


def wait_until(cond: Callable[[], Any], timeout_s: float, what: str, diag: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{diag()}")
        time.sleep(0.05)


def balanced(members: list[Worker], partitions: int) -> bool:
    """Every member holds a non-empty share of one generation, the shares disjoint and covering all."""
    views = [m.assignment() for m in members]
    if any(gen is None or not parts for gen, parts in views) or len({gen for gen, _ in views}) != 1:
        return False
    return sum(len(p) for _, p in views) == partitions and frozenset().union(*(p for _, p in views)) == set(range(partitions))


def acked_count(producer: Worker) -> int:
    return sum(len(e["a"]) for e in producer.events("acks"))


def consumed_offsets(ws: Workers) -> dict[int, set[int]]:
    seen: dict[int, set[int]] = defaultdict(set)
    for w in ws.consumers:
        for e in w.events("recs"):
            seen[e["p"]].update(e["o"])
    return seen


def produced_records(producer: Worker) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for e in producer.events("acks"):
        for key, p, o in e["a"]:
            assert (p, o) not in out, f"two acknowledged records at partition {p} offset {o}: {out[(p, o)]}, {key}"
            out[(p, o)] = key
    return out


@dataclass
class Scenario:
    """Timeline knobs; fractions are of the records acknowledged to the producer."""

    records: int = 50_000
    partitions: int = 12
    chunk: int = 500
    interval_s: float = 0.08
    graceful_close_at: float = 0.15
    server_kill_at: float = 0.35
    consumer_kill_at: float = 0.5
    join_at: float = 0.65


@dataclass
class Outcome:
    workers: Workers
    produced: dict[tuple[int, int], str]
    end_offsets: dict[int, int]
    committed_after_restart: dict[int, int]
    timeline: list[tuple[float, str]]
    mid_run_kill_at: float = 0.0  # time.time() just before the mid-run SIGKILL of the server
    committed_after_mid_run_restart: dict[int, int] = field(default_factory=dict)


def run_scenario(srv: ServerProcess, client: str, topic: str, sc: Scenario, ws: Workers,
                 read_committed: Callable[[ServerProcess, str, str, int], tuple[dict[int, int], dict[int, int]]]
                 ) -> Outcome:
    """Consumers c1-c3 form the group; the producer writes `sc.records`; along the way c1 closes
    gracefully, the server is killed with SIGKILL and restarted on its port, c2 is killed with SIGKILL
    and c4 joins. After the drain the consumers commit and close, the server is killed and restarted
    once more, and `read_committed` reads (committed offsets, log end offsets) from the restarted server."""
    t0 = time.monotonic()
    timeline: list[tuple[float, str]] = []

    def mark(what: str) -> None:
        timeline.append((round(time.monotonic() - t0, 2), what))

    def diag() -> str:  # what the clients saw, and the server's side of the group's rebalances
        names = {"preparing_rebalance", "join_completed", "group_stable", "member_added", "member_removed",
                 "pending_member_expired", "rebalance_timeout", "group_empty"}
        story = [{k: v for k, v in e.items() if k in ("timestamp", "event", "reason", "member_id", "generation_id",
                                                      "members")}
                 for e in srv.events() if e.get("group_id") == ws.group and e.get("event") in names]
        views = {w.name: w.assignment() for w in ws.all if w.name.startswith("c")}
        return f"{ws.diagnostics()}\n--- assignments: {views}\n--- server events: {story[-15:]}"

    c1, c2, c3 = (ws.consumer(n) for n in ("c1", "c2", "c3"))
    wait_until(lambda: balanced([c1, c2, c3], sc.partitions), 45, "c1-c3 balanced", diag)
    mark("c1-c3 balanced")
    producer = ws.producer(sc.records, sc.chunk, sc.interval_s)

    def at(fraction: float) -> None:
        wait_until(lambda: acked_count(producer) >= fraction * sc.records or not producer.alive, 60,
                   f"{fraction:.0%} acknowledged", diag)

    at(sc.graceful_close_at)
    c1.send("close")
    assert c1.wait_exit(20) == 0, c1.stderr_tail()
    assert c1.events("closed")
    mark(f"c1 closed gracefully ({acked_count(producer)} acked)")
    wait_until(lambda: balanced([c2, c3], sc.partitions), 30, "c2, c3 balanced", diag)
    mark("c2, c3 balanced")

    at(sc.server_kill_at)
    kill_at = time.time()
    srv.kill9()
    mark(f"server killed with SIGKILL ({acked_count(producer)} acked)")
    srv.restart()
    mark("server restarted")
    mid_run_committed, _ = read_committed(srv, ws.group, topic, sc.partitions)
    mark("committed offsets read after the restart")

    at(sc.consumer_kill_at)
    c2.kill9()
    mark(f"c2 killed with SIGKILL ({acked_count(producer)} acked)")
    wait_until(lambda: balanced([c3], sc.partitions), 30, "c3 alone holding everything", diag)
    mark("c3 holds all partitions")

    at(sc.join_at)
    c4 = ws.consumer("c4")
    wait_until(lambda: balanced([c3, c4], sc.partitions), 45, "c3, c4 balanced", diag)
    mark(f"c4 joined, c3/c4 balanced ({acked_count(producer)} acked)")

    assert producer.wait_exit(90) == 0, producer.stderr_tail()
    assert not producer.events("error"), producer.events("error")[:5]
    assert producer.events("done")[0]["acked"] == sc.records
    mark("producer done")
    produced = produced_records(producer)
    ends: dict[int, int] = defaultdict(int)
    for p, _ in produced:
        ends[p] += 1

    def drained() -> bool:
        seen = consumed_offsets(ws)
        return all(len(seen[p]) >= ends[p] for p in range(sc.partitions))

    wait_until(drained, 60, "every produced record consumed", diag)
    mark("drained")
    for c in (c3, c4):
        c.send("pause")
    for c in (c3, c4):
        wait_until(lambda c=c: c.events("final_commit"), 20, f"{c.name}'s final commit", diag)
    for c in (c3, c4):
        c.send("close")
    for c in (c3, c4):
        assert c.wait_exit(20) == 0, c.stderr_tail()
    mark("c3, c4 committed and closed")
    srv.kill9()
    srv.restart()
    mark("server killed and restarted after the run")
    committed, end_offsets = read_committed(srv, ws.group, topic, sc.partitions)
    mark("committed offsets read")
    return Outcome(ws, produced, end_offsets, committed, timeline, kill_at, mid_run_committed)


def verify(out: Outcome, partitions: int) -> dict[str, Any]:
    """The invariants; returns statistics for the test's report.

    1. The log holds exactly what the producer had acknowledged: offsets 0..end-1 of every partition,
       each acknowledged once (idempotent producer across a broker SIGKILL: no duplicates, no holes).
    2. Every consumed (partition, offset) carries the key the producer wrote there.
    3. No gap: the union of consumed offsets of each partition is 0..end-1.
    4. Within one ownership (an assignment of a generation until the next revocation) a consumer reads a
       partition contiguously: no skipped record, no rewind.
    5. Duplicates only in the uncommitted window: an ownership of partition p that a consumer got at time
       T starts at an offset >= every commit of p that any consumer saw acknowledged before T. So a
       record is read twice only if it lies past the last acknowledged commit before the failure or
       rebalance that moved its partition (or, for a partition that stays put, past the commit before
       the rebalance). Commits acknowledged before the server's SIGKILL count too: acknowledged =>
       durable.
    6. Read right after the mid-run restart, the committed offset of every partition is at least every
       commit of it acknowledged before the SIGKILL.
    7. After the drain, the final commit() of each consumer, then SIGKILL and restart of the server:
       the committed offset of every partition is the last one acknowledged to any consumer, equals
       the final commit of its last owner, and equals the log end offset.
    """
    ws, produced = out.workers, out.produced
    ends: dict[int, int] = defaultdict(int)
    for p, _ in produced:
        ends[p] += 1
    for p in range(partitions):
        assert {o for (pp, o) in produced if pp == p} == set(range(ends[p])), f"partition {p}: holes in the log"
        assert out.end_offsets[p] == ends[p], f"partition {p}: log end {out.end_offsets[p]} != acknowledged {ends[p]}"

    consumptions: dict[tuple[int, int], int] = defaultdict(int)
    commits: list[tuple[float, int, int]] = []  # (time acknowledged, partition, offset)
    for w in ws.consumers:
        for e in w.events():
            if e["ev"] in ("commit", "final_commit"):
                commits += [(e["t"], int(p), o) for p, o in e["offsets"].items()]
    commits.sort()

    def acknowledged_before(p: int, t: float) -> int:
        return max((o for tc, pp, o in commits if pp == p and tc < t), default=0)

    ownerships = 0
    for w in ws.consumers:
        owned_since: dict[int, float] = {}
        last: dict[int, int] = {}
        for e in w.events():
            if e["ev"] == "assigned":
                owned_since = dict.fromkeys(e["partitions"], e["t"])
                last = {}
            elif e["ev"] == "revoked":
                owned_since, last = {}, {}
            elif e["ev"] == "recs":
                p = e["p"]
                assert p in owned_since, f"{w.name} got records of partition {p} it does not own: {e}"
                for o, k in zip(e["o"], e["k"], strict=True):
                    assert produced.get((p, o)) == k, f"{w.name}: partition {p} offset {o} has key {k}, " \
                                                      f"the producer wrote {produced.get((p, o))}"
                    consumptions[(p, o)] += 1
                    if p in last:
                        assert o == last[p] + 1, f"{w.name}: partition {p} jumped from {last[p]} to {o}"
                    else:
                        ownerships += 1
                        floor = acknowledged_before(p, owned_since[p])
                        assert o >= floor, (f"{w.name}: ownership of partition {p} since {owned_since[p]} starts at "
                                            f"{o}, below {floor}, acknowledged before it")
                    last[p] = o

    for p in range(partitions):
        missing = [o for o in range(ends[p]) if (p, o) not in consumptions]
        assert not missing, f"partition {p}: {len(missing)} records never consumed, first {missing[:5]}"

    for p, got in out.committed_after_mid_run_restart.items():
        floor = acknowledged_before(p, out.mid_run_kill_at)
        assert (got if got is not None else 0) >= floor, (
            f"partition {p}: committed {got} after the mid-run restart, but {floor} was acknowledged before the kill")

    last_ack: dict[int, tuple[float, int]] = {}
    for t, p, o in commits:
        last_ack[p] = (t, o)
    final: dict[int, int] = {}
    for w in ws.consumers:
        for e in w.events("final_commit"):
            final.update({int(p): o for p, o in e["offsets"].items()})
    for p in range(partitions):
        assert out.committed_after_restart[p] == last_ack[p][1] == final[p] == ends[p], (
            f"partition {p}: committed after restart {out.committed_after_restart[p]}, last acknowledged "
            f"{last_ack[p][1]}, final commit {final[p]}, log end {ends[p]}")

    duplicates = sum(n - 1 for n in consumptions.values())
    return {"records": len(produced), "duplicates": duplicates, "ownerships": ownerships,
            "acknowledged_commits": len(commits), "timeline": out.timeline}

