"""`make bench` / `make bench-quick`: run every scenario, write benchmarks/results/<date>.json, render
docs/performance.md and the rebalance plot.

    python -m benchmarks.run [--quick] [--only NAME ...] [--profile] [--recovery-records N] [--no-render]
                             [--merge-into RESULTS.json]

`--only NAME ... --merge-into RESULTS.json` measures those scenarios alone and writes RESULTS with them
replaced (a new results file; docs/performance.md names the later run): one scenario can be re-measured
without a whole `make bench`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from coordinator_server.cli import configure_logging

from . import cluster, consumer_groups, consumer_wire, kafka_cluster, kafka_peer, pipeline, render, scenarios
from .procs import ROOT

SCENARIOS = ["heartbeat", "rebalance", "commits", "recovery", "e2e", "consumer", "consumer-wire", "cluster", "pipeline",
             "kafka", "kafka-cluster"]
# The results a scenario writes besides the one of its own name (what `--merge-into` replaces).
RESULT_KEYS = {"commits": ("commits", "offset_fetches", "commit_floor", "durable_floor"),
               "consumer-wire": ("consumer_wire",), "kafka-cluster": ("kafka_cluster",)}


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    deps = {}
    for name in ("kafka-python", "uvloop", "confluent-kafka", "structlog", "crc32c", "matplotlib", "py-spy"):
        try:
            deps[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            deps[name] = None
    import confluent_kafka
    deps["librdkafka"] = confluent_kafka.libversion()[0]
    return {"cpu": cpu, "cores": _cores(), "memory_gib": round(mem_kib / 2**20, 1), "kernel": platform.release(),
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "dependencies": deps, "git": _git_head(),
            # 1, 5 and 15 minutes: other work on the machine moves every absolute rate of the run.
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _cores() -> int:
    import os
    return len(os.sched_getaffinity(0))


def _git_head() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip()


def run(quick: bool, only: list[str], profile: bool, recovery_records: int | None, work: Path) -> dict[str, Any]:
    scale = scenarios.Scale(quick, recovery_records)
    res: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "quick": quick,
                           "machine": machine()}
    timings: dict[str, float] = {}

    def step(name: str) -> bool:
        if only and name not in only:
            return False
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        timings[name] = time.perf_counter()
        return True

    empty = scenarios.empty_server_rss(work)
    res["empty_server"] = empty
    if step("heartbeat"):
        floor = scenarios.hb_floor(scale, "protocol")
        floor_streams = scenarios.hb_floor(scale, "streams")
        peer = scenarios.hb_peer(scale)
        servers = [scenarios.hb_server(scale, work, n, empty["rss_bytes"]) for n in scale.hb_members]
        res["heartbeat"] = {"floor": floor, "floor_streams": floor_streams, "peer": peer, "server": servers}
        _done("heartbeat", timings)
    if step("rebalance"):
        res["rebalance"] = scenarios.rebalance(scale, work)
        _done("rebalance", timings)
    if step("commits"):
        res["commits"] = [scenarios.commits(scale, work, fsync, c)
                          for fsync in ("always", "never") for c in scale.committers]
        res["commit_floor"] = scenarios.commit_floor(scale, max(scale.committers))
        res["durable_floor"] = [scenarios.durable_floor(scale, work, c) for c in scale.committers]
        res["offset_fetches"] = [scenarios.offset_fetches(scale, work, c) for c in scale.fetchers]
        _done("commits", timings)
    if step("recovery"):
        res["recovery"] = scenarios.recovery(scale, work)
        _done("recovery", timings)
    if step("e2e"):
        res["e2e"] = scenarios.end_to_end(scale, work)
        _done("e2e", timings)
    if step("consumer"):
        res["consumer"] = consumer_groups.run(quick)
        _done("consumer", timings)
    if step("consumer-wire"):
        res["consumer_wire"] = consumer_wire.run(scale, work)
        _done("consumer-wire", timings)
    if step("cluster"):
        try:
            res["cluster"] = cluster.run(work / "cluster", scale.cluster_groups, scale.cluster_committers,
                                         scale.commit_warmup_s, scale.commit_duration_s)
        except Exception as e:
            # The one scenario with an outside dependency (ZooKeeper, a JVM) and five processes: when it
            # fails, the run keeps every other figure, and the table shows the failure in its rows.
            print(f"[bench] cluster failed: {e!r}", file=sys.stderr, flush=True)
            res["cluster"] = {"error": repr(e)[-2000:]}
        _done("cluster", timings)
    if step("pipeline"):
        res["pipeline"] = pipeline.run(quick, work)
        _done("pipeline", timings)
    if step("kafka"):
        if kafka_peer.available():
            try:
                res["kafka"] = kafka_peer.run(scale, work)
            except Exception as e:  # the broker did not start: every other figure is kept
                print(f"[bench] kafka failed: {e!r}", file=sys.stderr, flush=True)
                res["kafka"] = {"error": repr(e)[-2000:]}
        else:
            print("[bench] kafka skipped: no Kafka jars in build/kafka/lib (`make kafka-deps`)", file=sys.stderr,
                  flush=True)
        _done("kafka", timings)
    if step("kafka-cluster"):
        if kafka_peer.available():
            # kafka_cluster.run records a failed part as an error; this catches anything else.
            try:
                res["kafka_cluster"] = kafka_cluster.run(scale, work)
            except Exception as e:
                print(f"[bench] kafka-cluster failed: {e!r}", file=sys.stderr, flush=True)
                res["kafka_cluster"] = {"error": repr(e)[-2000:]}
        else:
            print("[bench] kafka-cluster skipped: no Kafka jars in build/kafka/lib (`make kafka-deps`)",
                  file=sys.stderr, flush=True)
        _done("kafka-cluster", timings)
    if profile and not quick:
        res["profiles"] = profiles(scale, work, empty["rss_bytes"])
    res["scenario_seconds"] = timings
    return res


def merge(earlier: dict[str, Any], later: dict[str, Any], only: list[str]) -> dict[str, Any]:
    """`earlier` with the scenarios of `later` (an `--only` run) in place of its own, and a note of it."""
    if not only:
        raise SystemExit("--merge-into needs --only: a full run replaces everything")
    merged = dict(earlier)
    for name in only:
        for key in RESULT_KEYS.get(name, (name,)):
            merged[key] = later.get(key)
    merged["merged"] = [*earlier.get("merged", []), {
        "scenarios": only, "date": later["date"], "git": later["machine"]["git"],
        "total_seconds": later["total_seconds"], "machine": later["machine"]}]
    return merged


def _done(name: str, timings: dict[str, float]) -> None:
    timings[name] = round(time.perf_counter() - timings[name], 1)
    print(f"[bench] {name} done in {timings[name]} s", file=sys.stderr, flush=True)


def profiles(scale: scenarios.Scale, work: Path, empty_rss: int) -> dict[str, Any]:
    """py-spy over the server during the two heaviest scenarios; the top frames go into the results."""
    out: dict[str, Any] = {}
    for name in ("heartbeat_100k", "rebalance_5000"):
        raw = work / f"{name}.txt"
        try:
            if name.startswith("heartbeat"):
                scenarios.hb_server(scale, work, 100_000, empty_rss, profile_to=raw)
            else:
                scenarios.rebalance(scale, work, profile_to=raw, sizes=[5000])
        except Exception as e:  # a profile is a bonus: never lose the run's figures over it
            out[name] = {"error": repr(e)}
            continue
        for _ in range(50):
            if raw.exists():
                break
            time.sleep(0.1)
        out[name] = render.summarize_profile(raw) if raw.exists() else {"error": "py-spy wrote nothing"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=[], choices=SCENARIOS)
    ap.add_argument("--profile", action="store_true", help="py-spy the top two scenarios (full run only)")
    ap.add_argument("--recovery-records", type=int, default=None)
    ap.add_argument("--no-render", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--merge-into", type=Path, default=None,
                    help="with --only: the earlier results these scenarios replace (docstring)")
    args = ap.parse_args()
    # Some scenarios run the server's core in process (consumer_groups): its events are logged at warning,
    # as the servers the bench starts log, so the output is the progress lines and the table.
    configure_logging("json", "warning")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-", dir="/var/tmp") as tmp:
        res = run(args.quick, args.only, args.profile, args.recovery_records, Path(tmp))
    res["total_seconds"] = round(time.perf_counter() - started, 1)
    if args.merge_into:
        res = merge(json.loads(args.merge_into.read_text()), res, args.only)
    res["figures"] = render.figures(res)
    day = dt.date.today().isoformat()
    out = args.out or ROOT / "benchmarks" / "results" / f"{day}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"[bench] results in {out} ({res['total_seconds']} s)", file=sys.stderr)
    print(render.table(res))
    if not args.no_render and not args.quick:
        render.write_docs(res, out)


if __name__ == "__main__":
    main()
