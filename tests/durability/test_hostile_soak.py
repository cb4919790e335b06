"""The hostile-clients soak (`make soak`, issue 14): a healthy group beside every misbehaving client of
tests/integration/test_hostile_clients.py at once, for SOAK_MINUTES (skipped unless set), sampled every
SAMPLE_S into build/soak/hostile-<time>.jsonl and a plot beside it.

Phases: the healthy load alone for BASELINE_S, then everything, then the healthy load alone again for the
last BASELINE_S (the two quiet phases' commit latency is the reference; having one at each end keeps a
shared machine's changing load from favouring either side).
The load: a confluent-kafka group of three consumers committing synchronously every 10 records (its commit
round trips are the latency measured) fed by a producer; a second group whose members are replaced every
30 s (rebalances); and, on the same server: a client with a wrong password retrying (librdkafka) and a
password guesser (SASL listener); clients that send fetches and never read; slow-loris connections
dripping a byte a second; JoinGroups without a member id into one group; connect/close churn; groups
created and deleted.

Sampled: server RSS and open fds (/proc), event-loop lag (coordinator_event_loop_lag_seconds from
/metrics, p99 and max of the window), the healthy group's commit latency p50/p99/max, records consumed and
commits. It fails when (bounds stated in docs/durability.md):
- RSS grows more than RSS_GROWTH_MB from the end of the first hostile minute to the end;
- open fds grow more than FD_GROWTH over the same span, or more than FDS_LEFT_AFTER are left open once
  the hostile clients are gone;
- the healthy group's commit p99 over the hostile phase exceeds P99_RATIO x the quiet phases' p99
  (or the baseline + P99_SLACK_MS, whichever is larger: a 3 ms baseline on a shared 2-core machine);
- a healthy member is removed, a client error shows, or a window passes with no record consumed.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from coordinator_server.security.users import main as users_main
from tests.integration.healthy_group import HealthyGroup
from tests.integration.hostile_load import api_versions_frame, fds, fetch_frame, join_frames, rss_kb
from tests.integration.test_security import Raw

from .conftest import ServerFactory

pytestmark = pytest.mark.durability

MINUTES = float(os.environ.get("SOAK_MINUTES", "0"))
SAMPLE_S = 10.0
BASELINE_S = float(os.environ.get("SOAK_BASELINE_S", "60"))
RSS_GROWTH_MB = 64
FD_GROWTH = 64
FDS_LEFT_AFTER = 8
P99_RATIO = 3.0
P99_SLACK_MS = 25.0
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ the misbehaving clients


def run_hostile(plain: int, sasl: int, stop: Any, counts_path: str) -> None:
    """The misbehaving clients' process: apart from the healthy group's, so that their Python threads do
    not compete for the measuring process's GIL (that would show as the healthy group's latency)."""
    hostile = Hostile(plain, sasl)
    hostile.start()
    while not stop.wait(SAMPLE_S / 2):
        Path(counts_path).write_text(json.dumps(hostile.counts))
    hostile.close()
    Path(counts_path).write_text(json.dumps(hostile.counts))


class Hostile:
    """Each misbehaving client is a loop on its own thread until `stop`."""

    def __init__(self, plain: int, sasl: int) -> None:
        self.plain, self.sasl = plain, sasl
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.counts: dict[str, int] = {}

    def start(self) -> None:
        for loop in (self.typo_client, self.guesser, self.never_reader, self.slow_loris, self.join_flood,
                     self.churn, self.group_churn, self.rebalancer):
            t = threading.Thread(target=self._guard, args=(loop,), name=loop.__name__, daemon=True)
            self.threads.append(t)
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _guard(self, loop: Callable[[], None]) -> None:
        while not self.stop.is_set():  # a hostile client's own failure must not end the soak's load
            try:
                loop()
            except (OSError, AssertionError):
                self.stop.wait(1.0)

    def _count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def typo_client(self) -> None:
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{self.sasl}", "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "typo",
                      "group.id": "typo", "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
        c.subscribe(["orders"])
        while not self.stop.is_set():
            c.poll(0.5)
        c.close()

    def guesser(self) -> None:
        with socket.create_connection(("127.0.0.1", self.sasl), timeout=30) as sock:
            raw = Raw(sock)
            raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse)
            raw.call(SaslAuthenticateRequest[2](auth_bytes=f"\0bob\0guess{time.monotonic()}".encode()),
                     SaslAuthenticateResponse)
        self._count("guesses")

    def never_reader(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", self.plain))
        sock.settimeout(1.0)
        with sock:
            for i in range(50):
                with contextlib.suppress(TimeoutError):
                    sock.send(fetch_frame(i))
            self._count("never_readers")
            self.stop.wait(60)  # held until the server closes it (connections.max.idle.ms) or the next round

    def slow_loris(self) -> None:
        frame = api_versions_frame(1)
        socks = [socket.create_connection(("127.0.0.1", self.plain), timeout=5) for _ in range(10)]
        try:
            for i in range(len(frame)):
                if self.stop.wait(1.0):
                    return
                for s in socks:
                    with contextlib.suppress(OSError):
                        s.send(frame[i:i + 1])
            self._count("slow_loris_rounds")
        finally:
            for s in socks:
                s.close()

    def join_flood(self) -> None:
        with socket.create_connection(("127.0.0.1", self.plain), timeout=10) as sock:
            raw = Raw(sock)
            sent = 0
            while not self.stop.wait(0.5):  # 200 a second
                sock.sendall(join_frames("flood", sent, 100))
                for _ in range(100):
                    assert raw.recv() is not None
                sent += 100
                self._count("flood_joins", 100)

    def churn(self) -> None:
        frame = api_versions_frame(1)
        while not self.stop.wait(0.02):  # about 50 a second, 3,000 a minute
            with socket.create_connection(("127.0.0.1", self.plain), timeout=5) as sock:
                if self.counts.get("churn", 0) % 2:
                    sock.sendall(frame)
                    assert Raw(sock).recv() is not None
            self._count("churn")

    def group_churn(self) -> None:
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        part = T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                              committed_metadata="")
        with socket.create_connection(("127.0.0.1", self.plain), timeout=10) as sock:
            raw = Raw(sock)
            n = 0
            while not self.stop.wait(1.0):  # 20 groups a second, created and deleted
                names = [f"tmp-{n + i}" for i in range(20)]
                for name in names:
                    raw.call(OffsetCommitRequest[8](group_id=name, generation_id_or_member_epoch=-1, member_id="",
                                                    group_instance_id=None, topics=[T(name="orders", partitions=[part])]),
                             OffsetCommitResponse)
                raw.call(DeleteGroupsRequest[2](groups_names=names), DeleteGroupsResponse)
                n += len(names)
                self._count("groups_deleted", len(names))

    def rebalancer(self) -> None:
        """A second group whose members come and go: a rebalance every 30 s."""
        bootstrap = f"127.0.0.1:{self.plain}"
        with HealthyGroup(bootstrap, "orders", "churny", members=1, produce=False):
            while not self.stop.is_set():
                with HealthyGroup(bootstrap, "orders", "churny", members=1, produce=False):
                    self.stop.wait(30)
                self._count("rebalancer_rounds")
                self.stop.wait(1)


# ---------------------------------------------------------------------------------------- sampling


def _counts(path: Path) -> dict[str, int]:
    with contextlib.suppress(OSError, ValueError):
        return dict(json.loads(path.read_text()))
    return {}


def _scrape(metrics_port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _delta(before: dict[str, dict[Any, float]], after: dict[str, dict[Any, float]], name: str) -> float:
    return sum(after.get(name, {}).values()) - sum(before.get(name, {}).values())


def _requests(before: dict[str, dict[Any, float]], after: dict[str, dict[Any, float]]) -> dict[str, float]:
    """Requests per api between two scrapes, busiest first."""
    out: dict[str, float] = {}
    name = "coordinator_requests_total"
    for labels, value in after.get(name, {}).items():
        api = dict(labels)["api"]
        out[api] = out.get(api, 0.0) + value - before.get(name, {}).get(labels, 0.0)
    return dict(sorted(((a, n) for a, n in out.items() if n > 0), key=lambda kv: -kv[1]))


def _lag_buckets(m: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> list[tuple[float, float]]:
    rows = m.get("coordinator_event_loop_lag_seconds_bucket", {})
    return sorted((float(dict(k)["le"]), v) for k, v in rows.items())


def _bucket_quantile(before: list[tuple[float, float]], after: list[tuple[float, float]], q: float) -> float:
    """Upper bound of the q-quantile of the observations between two scrapes of one histogram."""
    prev = dict(before)
    deltas = [(le, v - prev.get(le, 0.0)) for le, v in after]
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return 0.0
    for le, cumulative in deltas:
        if cumulative >= q * total:
            return le
    return float("inf")


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


@contextlib.contextmanager
def _results_file() -> Iterator[Path]:
    out = ROOT / "build" / "soak"
    out.mkdir(parents=True, exist_ok=True)
    yield out / f"hostile-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.jsonl"


def _plot(path: Path, samples: list[dict[str, Any]]) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    series = [("rss_mb", "server RSS (MB)"), ("fds", "open fds"), ("loop_lag_p99_ms", "event-loop lag p99 (ms)"),
              ("commit_p99_ms", "healthy commit p99 (ms)")]
    for ax, (key, label) in zip(axes, series, strict=True):
        ax.plot(t, [s[key] for s in samples])
        ax.set_ylabel(label)
        ax.axvline(BASELINE_S / 60, color="grey", linestyle=":")
        ax.axvline(MINUTES - BASELINE_S / 60, color="grey", linestyle=":")
    axes[-1].set_xlabel("minutes (between the dotted lines: the hostile clients)")
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png)
    return png


# ------------------------------------------------------------------------------------------ the soak


@pytest.mark.skipif(MINUTES <= 0, reason="the hostile soak runs under `make soak` (SOAK_MINUTES)")
@pytest.mark.timeout(0)
def test_hostile_soak(server_factory: ServerFactory, tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    for name in ("alice", "bob"):
        assert users_main(["--file", str(users), "add", name, "--password", f"{name}-secret"]) == 0
    srv = server_factory(listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", sasl_users_file=users,
                         initial_rebalance_delay_ms=0, topic=["orders:4"], metrics_port=0,
                         connections_max_idle_ms=30_000, group_max_pending_members=1000,
                         log_roll_ms=60_000, log_cleaner_backoff_ms=5_000, delete_retention_ms=0)
    assert srv.proc is not None
    pid = srv.proc.pid
    listeners = dict(srv.events("listening")[-1]["listeners"])
    metrics_port = srv.events("metrics_listening")[-1]["port"]
    plain, sasl = listeners["PLAINTEXT"], listeners["SASL_PLAINTEXT"]
    total_s = MINUTES * 60
    hostile_started: float | None = None
    hostile_stopped: float | None = None
    samples: list[dict[str, Any]] = []
    spawn = multiprocessing.get_context("spawn")  # not fork: librdkafka's threads are running here
    stop_hostile = spawn.Event()
    counts_path = tmp_path / "hostile-counts.json"
    hostile = spawn.Process(target=run_hostile, args=(plain, sasl, stop_hostile, str(counts_path)), daemon=True)
    with _results_file() as path, HealthyGroup(f"127.0.0.1:{plain}", "orders", "app", members=3) as group:
        group.wait_running(60)
        started = time.monotonic()
        scrape = _scrape(metrics_port)
        last_counts = group.counts()
        removed_before = len(srv.events("member_removed"))
        try:
            while (elapsed := time.monotonic() - started) < total_s:
                if hostile.pid is None and BASELINE_S <= elapsed < total_s - BASELINE_S:
                    hostile.start()
                    hostile_started = time.monotonic()
                if hostile.pid is not None and hostile_stopped is None and elapsed >= total_s - BASELINE_S:
                    stop_hostile.set()
                    hostile.join(60)
                    hostile_stopped = time.monotonic()
                time.sleep(SAMPLE_S - (time.monotonic() - started) % SAMPLE_S)
                now = time.monotonic()
                new_scrape = _scrape(metrics_port)
                lags = _lag_buckets(new_scrape)
                window = [s for t, s in group.commit_latencies if t > now - SAMPLE_S]
                counts = group.counts()
                phase = "baseline" if hostile.pid is None else "hostile" if hostile_stopped is None else "after"
                sample = {
                    "t_s": round(now - started, 1), "phase": phase,
                    "rss_mb": round(rss_kb(pid) / 1024, 1), "fds": fds(pid),
                    "loop_lag_p99_ms": round(_bucket_quantile(_lag_buckets(scrape), lags, 0.99) * 1000, 2),
                    "loop_lag_max_bucket_ms": round(_bucket_quantile(_lag_buckets(scrape), lags, 1.0) * 1000, 2),
                    "commit_p50_ms": round(_quantile(window, 0.5) * 1000, 2),
                    "commit_p99_ms": round(_quantile(window, 0.99) * 1000, 2),
                    "commit_max_ms": round(max(window, default=0.0) * 1000, 2),
                    "consumed": counts[0] - last_counts[0], "commits": counts[1] - last_counts[1],
                    "sent_mb_s": round(_delta(scrape, new_scrape, "coordinator_network_sent_bytes_total") / SAMPLE_S / 1e6, 2),
                    "requests_s": {api: round(n / SAMPLE_S) for api, n in _requests(scrape, new_scrape).items()},
                    "client_errors": counts[2],
                    "connections": new_scrape.get("coordinator_connections", {}).get((), 0),
                    "hostile_counts": _counts(counts_path),
                }
                scrape, last_counts = new_scrape, counts
                samples.append(sample)
                with path.open("a") as f:
                    f.write(json.dumps(sample) + "\n")
                print(json.dumps(sample), flush=True)
        finally:
            stop_hostile.set()
            if hostile.pid is not None:
                hostile.join(60)
        removed = srv.events("member_removed")[removed_before:]
    png = _plot(path, samples)
    assert hostile_started is not None and hostile_stopped is not None, "SOAK_MINUTES too short for its phases"
    quiet = [s for t, s in group.commit_latencies if not hostile_started < t <= hostile_stopped]
    loaded = [s for t, s in group.commit_latencies if hostile_started < t <= hostile_stopped]
    p99_quiet, p99_hostile = _quantile(quiet, 0.99) * 1000, _quantile(loaded, 0.99) * 1000
    by_phase = {p: [s for s in samples if s["phase"] == p] for p in ("baseline", "hostile", "after")}
    anchor = by_phase["hostile"][min(6, len(by_phase["hostile"]) - 1)]  # a minute into the hostile phase
    tail = by_phase["hostile"][-3:]
    summary = {
        "minutes": MINUTES, "results": str(path), "plot": str(png),
        "commit_p99_quiet_ms": round(p99_quiet, 2), "commit_p99_hostile_ms": round(p99_hostile, 2),
        "commit_p50_hostile_ms": round(_quantile(loaded, 0.5) * 1000, 2),
        "rss_mb_baseline": by_phase["baseline"][-1]["rss_mb"], "rss_mb_anchor": anchor["rss_mb"],
        "rss_mb_end_max": max(s["rss_mb"] for s in tail), "rss_mb_max": max(s["rss_mb"] for s in samples),
        "fds_baseline": by_phase["baseline"][-1]["fds"], "fds_anchor": anchor["fds"],
        "fds_end_max": max(s["fds"] for s in tail), "fds_after": samples[-1]["fds"],
        "loop_lag_p99_ms_max": max(s["loop_lag_p99_ms"] for s in by_phase["hostile"]),
        "loop_lag_p99_ms_median": _quantile([s["loop_lag_p99_ms"] for s in by_phase["hostile"]], 0.5),
        "hostile_counts": _counts(counts_path),
    }
    print("hostile soak:", json.dumps(summary), flush=True)
    with path.with_suffix(".summary.json").open("w") as f:
        json.dump(summary, f, indent=1)
    healthy_removed = [e for e in removed if e.get("group_id") == "app"]
    assert not healthy_removed, f"healthy members removed: {healthy_removed[:3]}"
    assert not group.errors, group.errors[:5]
    assert all(s["consumed"] > 0 for s in samples), "a window with nothing consumed"
    assert summary["rss_mb_end_max"] - anchor["rss_mb"] <= RSS_GROWTH_MB, summary
    assert summary["fds_end_max"] - anchor["fds"] <= FD_GROWTH, summary
    assert summary["fds_after"] <= summary["fds_baseline"] + FDS_LEFT_AFTER, summary
    assert p99_hostile <= max(P99_RATIO * p99_quiet, p99_quiet + P99_SLACK_MS), summary
