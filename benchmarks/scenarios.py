"""The scenarios of `make bench`. Each returns plain JSON-able figures; ratios are computed against
baselines measured in the same run (see run.py)."""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from . import preload, wire
from .members import SESSION_MS
from .procs import PY, ROOT, Floor, Peer, Server, rss_bytes, run_json, run_loadgen
from .wire import COMMIT_TOPIC

MAX_SESSION_MS = 3_600_000
MEMBERS_PER_GROUP = 100


class Scale:
    def __init__(self, quick: bool, recovery_records: int | None = None) -> None:
        self.quick = quick
        self.hb_members = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]
        self.hb_connections = 32
        self.hb_warmup_s, self.hb_duration_s = (1.0, 3.0) if quick else (2.0, 8.0)
        self.hb_sample = 20_000  # distinct members whose heartbeats are cycled through
        self.peer_members = 300  # one wave: the mock stalls on a second (see members.register)
        self.rebalance_sizes = [10, 100, 500, 1000] if quick else [10, 100, 500, 1000, 5000]
        self.rebalance_repeats = 1 if quick else 5
        self.committers = [1, 16, 128]
        self.fetchers = [1, 16]
        self.commit_warmup_s, self.commit_duration_s = (0.5, 2.0) if quick else (1.0, 5.0)
        self.recovery_records = recovery_records or (200_000 if quick else 10_000_000)
        self.recovery_keys = 10_000 if quick else 100_000
        self.e2e_records = 20_000 if quick else 100_000
        self.cluster_groups = 200 if quick else 1_000
        self.cluster_committers = [16] if quick else [1, 16, 128]
        # Apache Kafka's rows (benchmarks/kafka_peer.py): its members are enrolled over the wire, a few
        # thousand a second, so the million-member row has no Kafka figure.
        self.kafka_hb_members = [10_000] if quick else [10_000, 100_000]
        self.kafka_rebalance_sizes = [1000] if quick else [1000, 5000]


def _tmpdir(root: Path, name: str) -> Path:
    d = root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


# -- heartbeats -------------------------------------------------------------------------------------

def heartbeat_frames(members: list[tuple[str, int, str]], connections: int) -> list[list[bytes]]:
    frames = [wire.heartbeat_frame(g, gen, m, correlation_id=i) for i, (g, gen, m) in enumerate(members)]
    return [frames[i::connections] for i in range(connections)]


def hb_floor(scale: Scale, kind: str = "protocol") -> dict[str, Any]:
    floor = Floor(wire.heartbeat_response(), kind)
    try:
        frames = heartbeat_frames([(preload.group_id(0), 1, preload.member_id(0, m)) for m in range(1000)],
                                  scale.hb_connections)
        return _measured(floor.proc.pid, "127.0.0.1", floor.port, frames, connections=scale.hb_connections,
                         warmup_s=scale.hb_warmup_s, duration_s=scale.hb_duration_s,
                         error_offset=wire.heartbeat_error_offset()) | {"kind": kind}
    finally:
        floor.stop()


def _measured(pid: int, host: str, port: int, frames: list[list[bytes]], **load: Any) -> dict[str, Any]:
    """A load run with the serving process's CPU per request answered (user + system, all its threads, from
    /proc over the measured window): a figure other work on the machine moves far less than a rate."""
    cpu = _CpuSampler(pid)
    try:
        result = run_loadgen(host, port, frames, **load)
    finally:
        cpu.stop()
    return result | cpu.per_request(result)


PEER_ATTEMPTS = 3


def hb_peer(scale: Scale) -> dict[str, Any]:
    # librdkafka's mock sometimes wedges while registering (a group never completes its first join round,
    # nor does any later one): `members register` then fails within its wave timeout, and a fresh mock is
    # tried. Each attempt is reported in the results.
    failures: list[str] = []
    for _ in range(PEER_ATTEMPTS):
        try:
            result = _hb_peer_once(scale)
        except RuntimeError as e:
            failures.append(str(e)[-500:])
            continue
        result["registration_failures"] = failures
        return result
    raise RuntimeError(f"the peer could not register its members in {PEER_ATTEMPTS} attempts: {failures}")


def _hb_peer_once(scale: Scale) -> dict[str, Any]:
    peer = Peer()
    try:
        groups = scale.peer_members // MEMBERS_PER_GROUP
        reg = subprocess.Popen([PY, "-m", "benchmarks.members", "register", peer.host, str(peer.port),
                                str(groups), str(MEMBERS_PER_GROUP)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert reg.stdout is not None and reg.stdin is not None and reg.stderr is not None
        import json
        line = reg.stdout.readline()
        if not line:
            raise RuntimeError(f"members register exited with {reg.wait(60)}: {reg.stderr.read()[-2000:]}")
        info = json.loads(line)
        members = [(g, v["generation"], m) for g, v in info["groups"].items() for m in v["members"]]
        random.Random(1).shuffle(members)
        result = _measured(peer.proc.pid, peer.host, peer.port,
                           heartbeat_frames(members[:scale.hb_sample], scale.hb_connections),
                           connections=scale.hb_connections, warmup_s=scale.hb_warmup_s,
                           duration_s=scale.hb_duration_s, error_offset=wire.heartbeat_error_offset())
        reg.stdin.close()
        reg.wait(60)
        if result["errors"]:
            # A rate is only a rate of answers that did what was asked: a member the mock dropped (answered
            # UNKNOWN_MEMBER_ID, say) would count its cheap refusals. A fresh mock is tried instead.
            raise RuntimeError(f"{result['errors']:,} of {result['requests']:,} heartbeats answered with an error "
                               f"(first: {result.get('first_error')})")
        result.update(members=scale.peer_members, register_s=info["seconds"], librdkafka=peer.version)
        return result
    finally:
        peer.stop()


def preload_members(work: Path, members: int) -> Path:
    data = _tmpdir(work, f"members-{members}")
    run_json("benchmarks.preload", "members", str(data), str(members // MEMBERS_PER_GROUP),
             str(MEMBERS_PER_GROUP), str(SESSION_MS))
    return data


def sample_members(members: int, sample: int) -> list[tuple[str, int, str]]:
    rng = random.Random(members)
    groups = members // MEMBERS_PER_GROUP
    picks = set()
    while len(picks) < min(sample, members):
        picks.add((rng.randrange(groups), rng.randrange(MEMBERS_PER_GROUP)))
    return [(preload.group_id(g), 1, preload.member_id(g, m)) for g, m in picks]


def empty_server_rss(work: Path) -> dict[str, Any]:
    srv = Server(_tmpdir(work, "empty"), {"max_session_timeout_ms": MAX_SESSION_MS}).start()
    try:
        time.sleep(1.0)
        return {"rss_bytes": rss_bytes(srv.pid), "startup_s": srv.listening_after_s}
    finally:
        srv.stop()


def hb_server(scale: Scale, work: Path, members: int, empty_rss: int,
              profile_to: Path | None = None) -> dict[str, Any]:
    data = preload_members(work, members)
    srv = Server(data, {"max_session_timeout_ms": MAX_SESSION_MS}, profile_to=profile_to).start()
    try:
        load_s = srv.listening_after_s
        time.sleep(1.0)
        rss_loaded = rss_bytes(srv.pid)
        frames = heartbeat_frames(sample_members(members, scale.hb_sample), scale.hb_connections)
        result = _measured(srv.pid, "127.0.0.1", srv.port, frames, connections=scale.hb_connections,
                           warmup_s=scale.hb_warmup_s, duration_s=scale.hb_duration_s,
                           error_offset=wire.heartbeat_error_offset())
        rss_after = rss_bytes(srv.pid)
        result.update(members=members, startup_s=load_s, rss_loaded_bytes=rss_loaded, rss_after_bytes=rss_after,
                      bytes_per_member=(max(rss_loaded, rss_after) - empty_rss) / members)
        return result
    finally:
        srv.stop()
        shutil.rmtree(data, ignore_errors=True)


# -- rebalance --------------------------------------------------------------------------------------

class _CpuSampler:
    """A process's CPU time (user + system), sampled every 10 ms against the monotonic clock, so that the
    CPU the server spent inside a run's timed window can be read afterwards (a figure that, unlike the wall
    time, hardly moves when other work shares the machine)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu_s(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            with contextlib.suppress(OSError):
                self.samples.append((time.perf_counter(), self._cpu_s()))

    def between(self, t0: float, t1: float) -> float | None:
        before = [c for t, c in self.samples if t <= t0]
        after = [c for t, c in self.samples if t >= t1]
        return round(after[0] - before[-1], 3) if before and after else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def per_request(self, load: dict[str, Any]) -> dict[str, Any]:
        """The server's CPU over a load generator's measured window, and per request answered."""
        t0, t1 = load["window"]
        cpu_s = self.between(t0, t1)
        per = cpu_s / load["requests"] * 1e6 if cpu_s is not None and load["requests"] else None
        return {"server_cpu_s": cpu_s, "server_cpu_us_per_request": per}


def rebalance(scale: Scale, work: Path, profile_to: Path | None = None,
              sizes: list[int] | None = None) -> list[dict[str, Any]]:
    srv = Server(_tmpdir(work, "rebalance"), {"initial_rebalance_delay_ms": 0,
                                              "max_session_timeout_ms": MAX_SESSION_MS}, profile_to=profile_to).start()
    try:
        return rebalance_runs(srv.pid, "127.0.0.1", srv.port, sizes or scale.rebalance_sizes, scale.rebalance_repeats)
    finally:
        srv.stop()


def rebalance_runs(pid: int, host: str, port: int, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """`members rebalance` of each size against the broker at host:port (process `pid`), `repeats` times: the
    median of each size, with the broker's CPU inside each run's window."""
    runs: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
    cpu = _CpuSampler(pid)
    try:
        # Sizes interleaved, repeat by repeat: a burst of other work on the machine then lands on one run of
        # each size rather than on every run of one size, which would skew the growth ratio.
        for _ in range(repeats):
            for size in sizes:
                run = run_json("benchmarks.members", "rebalance", host, str(port), str(size))
                time.sleep(0.03)  # a sample after the window's end
                t0 = run["started_monotonic_s"]
                run["server_cpu_s"] = cpu.between(t0, t0 + run["seconds"])
                runs[size].append(run)
    finally:
        cpu.stop()
    out = []
    for size in sizes:
        seconds = sorted(r["seconds"] for r in runs[size])
        server_cpu = sorted(r["server_cpu_s"] for r in runs[size] if r["server_cpu_s"] is not None)
        out.append({"members": size, "seconds": seconds[len(seconds) // 2],
                    "server_cpu_s": server_cpu[len(server_cpu) // 2] if server_cpu else None, "runs": runs[size]})
    return out


# -- durable offset commits -------------------------------------------------------------------------



def _drive_committers(scale: Scale, pid: int, port: int, committers: int, *, warmup_s: float | None = None,
                      duration_s: float | None = None) -> dict[str, Any]:
    """The committers' load on a server (or the floor) at `port`, measured: one group per committer, so a
    group's commits queue behind its lock and committers of different groups meet only in the log's group
    commit. The warm-up and duration are the scale's unless given."""
    frames = [[wire.commit_frame(f"committer-{c}", COMMIT_TOPIC, o, correlation_id=o) for o in range(16)]
              for c in range(committers)]
    result = _measured(pid, "127.0.0.1", port, frames, connections=committers,
                       warmup_s=scale.commit_warmup_s if warmup_s is None else warmup_s,
                       duration_s=scale.commit_duration_s if duration_s is None else duration_s,
                       error_offset=wire.commit_error_offset(COMMIT_TOPIC))
    result.update(committers=committers)
    return result


def commits(scale: Scale, work: Path, fsync: str, committers: int) -> dict[str, Any]:
    # Commits to partitions of unknown topics are refused: the topic must exist in the store.
    srv = Server(_tmpdir(work, f"commits-{fsync}-{committers}"),
                 {"fsync": fsync, "topic": f"{COMMIT_TOPIC}:1"}).start()
    try:
        return _drive_committers(scale, srv.pid, srv.port, committers) | {"fsync": fsync}
    finally:
        srv.stop()


def commit_floor(scale: Scale, committers: int) -> dict[str, Any]:
    """The canned-answer floor driven like `commits`: the most commits a second any Python server reaches
    here with this many committers, whatever it does per commit. The group commit target's 20x one durable
    committer is measured against it (docs/performance.md)."""
    floor = Floor(wire.commit_response(COMMIT_TOPIC))
    try:
        return _drive_committers(scale, floor.proc.pid, floor.port, committers)
    finally:
        floor.stop()


def durable_floor(scale: Scale, work: Path, committers: int) -> dict[str, Any]:
    """The durable floor (benchmarks/floor.py) driven like `commits`: what a Python server that only writes
    each commit and waits for a syncfs before answering reaches with this many committers, on the disk
    the servers' data directories are on."""
    floor = Floor(wire.commit_response(COMMIT_TOPIC), "durable", _tmpdir(work, f"durable-floor-{committers}"))
    try:
        return _drive_committers(scale, floor.proc.pid, floor.port, committers)
    finally:
        floor.stop()


def offset_fetches(scale: Scale, work: Path, fetchers: int) -> dict[str, Any]:
    """OffsetFetch of one committed partition, one group per fetcher (what each consumer sends after
    every assignment)."""
    topic = "bench-topic"
    srv = Server(_tmpdir(work, f"fetches-{fetchers}"), {"topic": f"{topic}:1"}).start()
    try:
        groups = [f"fetcher-{c}" for c in range(fetchers)]
        # One commit per group first, so every fetch finds an offset.
        run_loadgen("127.0.0.1", srv.port, [[wire.commit_frame(g, topic, 42)] for g in groups],
                    connections=fetchers, warmup_s=0.0, duration_s=0.2, error_offset=wire.commit_error_offset(topic))
        frames = [[wire.fetch_offsets_frame(g, topic, correlation_id=i) for i in range(4)] for g in groups]
        result = _measured(srv.pid, "127.0.0.1", srv.port, frames, connections=fetchers,
                           warmup_s=scale.commit_warmup_s, duration_s=scale.commit_duration_s,
                           error_offset=wire.fetch_offsets_error_offset(groups[0], topic))
        result.update(fetchers=fetchers)
        return result
    finally:
        srv.stop()


# -- recovery ---------------------------------------------------------------------------------------

def recovery(scale: Scale, work: Path, repeats: int = 3) -> dict[str, Any]:
    data = _tmpdir(work, "recovery")
    written = run_json("benchmarks.preload", "commits", str(data), str(scale.recovery_records),
                       str(scale.recovery_keys), timeout_s=3600)

    def start_time(d: Path) -> float:
        srv = Server(d, {"log_cleaner_enable": "false"}).start(timeout_s=3600)
        t = srv.listening_after_s
        srv.stop()
        return t

    before = start_time(data)
    compacted = run_json("benchmarks.compact", str(data), timeout_s=3600)
    # The short start-ups are medians of a few, the empty server's (same flags) measured right next to
    # them: a one-off measurement's noise on a shared machine is a large part of a 1-3 s difference.
    afters = [start_time(data) for _ in range(repeats)]
    empty_dir = _tmpdir(work, "recovery-empty")
    start_time(empty_dir)  # creates its 50 partition directories, which the measured starts then open
    empties = [start_time(empty_dir) for _ in range(repeats)]
    after, empty_startup_s = statistics.median(afters), statistics.median(empties)
    records = written["records"]
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(empty_dir, ignore_errors=True)
    return {
        "records": records, "keys": written["keys"], "write_s": written["seconds"],
        "bytes_before": compacted["bytes_before"], "bytes_after": compacted["bytes_after"],
        "compaction_s": compacted["seconds"], "startup_before_s": before, "startup_after_s": after,
        "startup_after_runs_s": afters, "empty_startup_s": empty_startup_s, "empty_startup_runs_s": empties,
        # Load time: start-up minus an empty server's start-up (interpreter and imports).
        "records_per_s_before": records / max(1e-3, before - empty_startup_s),
        "records_per_s_after": records / max(1e-3, after - empty_startup_s),
    }


# -- end to end -------------------------------------------------------------------------------------

E2E_READY_TIMEOUT_S = 120.0  # the consumers' own deadlines (benchmarks/e2e.py) are 30 s + 30 s
E2E_RESULT_TIMEOUT_S = 420.0  # producing, then e2e.py's 300 s drain deadline


class _Lines:
    """A consumer's stdout, read on a thread so that every wait for a line has a timeout."""

    def __init__(self, name: str, proc: subprocess.Popen[str]) -> None:
        import queue
        self.name, self.proc = name, proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next(self, what: str, timeout_s: float) -> str:
        import queue
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"e2e: {self.name} (pid {self.proc.pid}) gave no {what} within {timeout_s:.0f} s "
                               "(stuck; rerun with E2E_CLIENT_DEBUG=1 for kafka-python's log on stderr)") from None
        if line is None:
            raise RuntimeError(f"e2e: {self.name} (pid {self.proc.pid}) exited ({self.proc.wait(10)}) before its "
                               f"{what}")
        if line.startswith("{") and '"error"' in line:
            raise RuntimeError(f"e2e: {self.name} (pid {self.proc.pid}) failed waiting for its {what}: {line}")
        return line


def end_to_end(scale: Scale, work: Path) -> dict[str, Any]:
    import json
    srv = Server(_tmpdir(work, "e2e"), {"initial_rebalance_delay_ms": 0, "topic": "e2e:3"}).start()
    consumers: list[_Lines] = []
    try:
        for i in range(3):
            consumers.append(_Lines(f"consumer {i}", subprocess.Popen(
                [PY, "-m", "benchmarks.e2e", "consume", f"127.0.0.1:{srv.port}"],
                stdout=subprocess.PIPE, text=True, cwd=ROOT)))
        deadline = time.monotonic() + E2E_READY_TIMEOUT_S
        for c in consumers:  # "ready": in the group with an assignment, stable for 1.5 s
            line = c.next("ready", max(0.0, deadline - time.monotonic()))
            if line != "ready":
                raise RuntimeError(f"e2e: {c.name} (pid {c.proc.pid}) said {line!r} instead of ready")
        produced = run_json("benchmarks.e2e", "produce", f"127.0.0.1:{srv.port}", str(scale.e2e_records),
                            timeout_s=300)
        deadline = time.monotonic() + E2E_RESULT_TIMEOUT_S
        results = [json.loads(c.next("result", max(0.0, deadline - time.monotonic()))) for c in consumers]
        for c in consumers:
            if c.proc.wait(60) != 0:
                raise RuntimeError(f"e2e: {c.name} (pid {c.proc.pid}) exited with {c.proc.returncode}")
        consumed = sum(r["count"] for r in results)
        # Never a figure from a partial run: every record produced was consumed, once (the group was stable
        # before producing, so there is no rebalance to redeliver anything).
        if consumed != scale.e2e_records:
            raise RuntimeError(f"e2e: consumed {consumed} records of {scale.e2e_records} "
                               f"(per consumer {[r['count'] for r in results]})")
        last = max(r["last_at"] for r in results if r["count"])
        seconds = last - produced["started_at"]
        return {"records": scale.e2e_records, "consumed": consumed, "seconds": seconds,
                "records_per_s": consumed / seconds, "producer_s": produced["seconds"],
                "per_consumer": [r["count"] for r in results]}
    finally:
        for c in consumers:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait(10)
        srv.stop()
