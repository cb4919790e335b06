"""Figures, the results table, the rebalance plot and docs/performance.md, all from one results JSON."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from .procs import ROOT
from .render_cells import TARGETS, cpu_cell, met
from .render_kafka import kafka_cells, kafka_cluster_cells, kafka_cluster_rows, kafka_rows
from .render_rows import cluster_rows, consumer_rows, consumer_wire_rows, pipeline_rows

DOC = ROOT / "docs" / "performance.md"
PLOT = ROOT / "docs" / "performance-rebalance.png"
FINDINGS = ROOT / "benchmarks" / "findings.md"


def _before_rebalance_s(n: int, before_path: Path | None = None) -> float | None:
    """The rebalance time of `n` members in the run before the speed work (issue 16's baseline)."""
    path = before_path or BEFORE
    if not path.exists():
        return None
    import json

    return _rebalance_t(json.loads(path.read_text()), n)


def _rebalance_t(res: dict[str, Any], n: int) -> float | None:
    for r in res.get("rebalance", []):
        if r["members"] == n:
            return float(r["seconds"])
    return None


def figures(res: dict[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {}
    hb = res.get("heartbeat")
    if hb:
        floor, peer = hb["floor"]["rps"], hb["peer"]["rps"]
        f["heartbeat"] = [{"members": s["members"], "rps": s["rps"], "p50_us": s["p50_us"], "p99_us": s["p99_us"],
                           "vs_floor": s["rps"] / floor, "vs_peer": s["rps"] / peer,
                           "bytes_per_member": s["bytes_per_member"],
                           "server_cpu_us_per_request": s.get("server_cpu_us_per_request")} for s in hb["server"]]
        # Runs before the Protocol floor had only the streams one, as "floor" (its "kind" unset).
        streams = hb.get("floor_streams") or (hb["floor"] if "kind" not in hb["floor"] else None)
        if streams:
            for s, row in zip(hb["server"], f["heartbeat"], strict=True):
                row["vs_streams_floor"] = s["rps"] / streams["rps"]
    t500, t5000 = _rebalance_t(res, 500), _rebalance_t(res, 5000)
    if t500 and t5000:
        f["rebalance_growth"] = t5000 / t500
    commits = res.get("commits")
    if commits:
        rate = {(c["fsync"], c["committers"]): c["rps"] for c in commits}
        f["commits"] = {str(n): {"always": rate[("always", n)], "never": rate[("never", n)],
                                 "always_vs_never": rate[("always", n)] / rate[("never", n)]}
                        for n in sorted({c["committers"] for c in commits})}
        top = max(c["committers"] for c in commits)
        f["group_commit_gain"] = rate[("always", top)] / rate[("always", 1)]
        cpu = {(c["fsync"], c["committers"]): c.get("server_cpu_us_per_request") for c in commits}
        if cpu.get(("always", top)) is not None:
            f["commit_cpu_us"] = {str(n): cpu[("always", n)] for n in sorted({c["committers"] for c in commits})}
        floor = res.get("commit_floor")
        if floor and floor["committers"] == top:
            # What the group commit target asks, against what any Python server reaches here at all.
            f["group_commit_ceiling"] = floor["rps"] / rate[("always", 1)]
            f["durable_vs_commit_floor"] = rate[("always", top)] / floor["rps"]
        dfl = {d["committers"]: d["rps"] for d in res.get("durable_floor", [])}
        if 1 in dfl and top in dfl:
            # The group commit a server doing only the durable part of a commit shows here, and where the
            # server's 128 committers stand against it.
            f["durable_floor_gain"] = dfl[top] / dfl[1]
            f["durable_vs_durable_floor"] = rate[("always", top)] / dfl[top]
            f["group_commit_durable_ceiling"] = dfl[top] / rate[("always", 1)]
    if res.get("recovery"):
        f["recovery_before_rps"] = res["recovery"]["records_per_s_before"]
        f["recovery_after_rps"] = res["recovery"]["records_per_s_after"]
    if res.get("e2e"):
        f["e2e_rps"] = res["e2e"]["records_per_s"]
    pl = res.get("pipeline")
    if pl:
        f["pipeline_vs_replay"] = {str(log["records"]): log["decode_vs_replay"] for log in pl["logs"]}
        f["pipeline_split_speedup"] = pl["split"]["split_speedup"]
    cl = res.get("cluster")
    if cl and "error" not in cl:
        f["cluster_failover_s"] = cl["failover"]["seconds"]
        f["cluster_partition_load_s_max"] = cl["failover"]["partition_load_s_max"]
        f["replicated_commits_vs_single"] = {str(c["committers"]): c["cluster_vs_single"] for c in cl["commits"]}
    return f


# The run the speed work (issue 16) is measured against: `make bench` on main before it began (commit 8d2270d).
BEFORE = ROOT / "benchmarks" / "results" / "2026-11-25-before-speed.json"


def _comparable(res: dict[str, Any]) -> dict[str, tuple[float, str, bool]]:
    """Every figure of the results table as label -> (value, format, higher is better). Labels follow the
    table's row names, so runs stay comparable across rounds."""
    f = figures(res)  # recomputed: older runs stored fewer figures
    out: dict[str, tuple[float, str, bool]] = {}
    hb = res.get("heartbeat")
    if hb:
        out["heartbeat, streams floor (canned answer), /s"] = (
            (hb.get("floor_streams") or hb["floor"])["rps"], "{:,.0f}", True)
        out[f"heartbeat, peer ({hb['peer']['members']} members), /s"] = (hb["peer"]["rps"], "{:,.0f}", True)
        for s in f.get("heartbeat", []):
            m = f"{s['members']:,}"
            out[f"heartbeat, {m} members, /s"] = (s["rps"], "{:,.0f}", True)
            out[f"heartbeat, {m} members, x peer"] = (s["vs_peer"], "{:.2f}x", True)
            if "vs_streams_floor" in s:
                out[f"heartbeat, {m} members, x streams floor"] = (s["vs_streams_floor"], "{:.2f}x", True)
            if s.get("server_cpu_us_per_request") is not None:
                out[f"heartbeat, {m} members, server CPU µs each"] = (s["server_cpu_us_per_request"], "{:.1f}", False)
            if s["members"] >= 100_000:
                out[f"memory, {m} members, B/member"] = (s["bytes_per_member"], "{:,.0f}", False)
    for r in res.get("rebalance", []):
        out[f"rebalance, {r['members']:,} members, ms"] = (r["seconds"] * 1000, "{:,.0f}", False)
    if "rebalance_growth" in f:
        out["rebalance growth t(5000)/t(500)"] = (f["rebalance_growth"], "{:.1f}", False)
    for n, c in f.get("commits", {}).items():
        out[f"durable commits, {n} committers, fsync always, /s"] = (c["always"], "{:,.0f}", True)
        out[f"durable commits, {n} committers, fsync never, /s"] = (c["never"], "{:,.0f}", True)
    if "group_commit_gain" in f:
        out["group commit: 128 vs 1 committer"] = (f["group_commit_gain"], "{:.1f}x", True)
    for n, us in f.get("commit_cpu_us", {}).items():
        out[f"server CPU per commit, {n} committers, µs"] = (us, "{:.0f}", False)
    if "durable_vs_commit_floor" in f:
        n = res["commit_floor"]["committers"]
        out[f"durable commits, {n} committers, x commit floor"] = (f["durable_vs_commit_floor"], "{:.2f}x", True)
    for d in res.get("durable_floor", []):
        out[f"durable floor, {d['committers']} committers, /s"] = (d["rps"], "{:,.0f}", True)
    if "durable_floor_gain" in f:
        out["durable floor group commit: 128 vs 1 committer"] = (f["durable_floor_gain"], "{:.1f}x", True)
        out["durable commits, 128 committers, x durable floor"] = (f["durable_vs_durable_floor"], "{:.2f}x", True)
    for r in res.get("offset_fetches", []):
        out[f"offset fetch, {r['fetchers']} fetchers, /s"] = (r["rps"], "{:,.0f}", True)
    if "recovery_before_rps" in f:
        out["recovery before compaction, records/s"] = (f["recovery_before_rps"], "{:,.0f}", True)
        out["recovery after compaction, records/s"] = (f["recovery_after_rps"], "{:,.0f}", True)
    if "e2e_rps" in f:
        out["end to end, records/s"] = (f["e2e_rps"], "{:,.0f}", True)
    if "cluster_failover_s" in f:
        out["cluster failover, 1,000 groups, s"] = (f["cluster_failover_s"], "{:.2f}", False)
        out["cluster failover, partition load max, ms"] = (f["cluster_partition_load_s_max"] * 1000, "{:.0f}", False)
        for n, ratio in f["replicated_commits_vs_single"].items():
            out[f"replicated commits vs single node, {n} committers"] = (ratio, "{:.2f}x", True)
    return out


def _load(res: dict[str, Any]) -> str:
    load = res["machine"].get("loadavg")
    return "not recorded" if load is None else f"{load[0]:.2f}"


def before_after(res: dict[str, Any], before_path: Path = BEFORE) -> str:
    """Every figure of this run's table beside the same figure of the run before the speed work."""
    if not before_path.exists():
        return ""
    import json

    before_raw = json.loads(before_path.read_text())
    before = _comparable(before_raw)
    after = _comparable(res)
    rows = [(label, before[label], value) for label, value in after.items() if label in before]
    if not rows:
        return ""
    rel = before_path.relative_to(ROOT)
    b_git = json.loads(before_path.read_text())["machine"]["git"]
    lines = [f"Against [`{rel}`](../{rel}) (commit {b_git}, `make bench` before the speed work of issue 16). "
             "Absolute rates move with the machine's load, which differs from run to run (the before run shared the "
             f"2 cores with other work; load average at the start of each run: {_load(before_raw)} before, "
             f"{_load(res)} after); the ratios against baselines of the same run move less; within 2% counts as "
             "the same. Better or worse is judged by the figure's "
             "direction (a rate up, a time or a cost down).", "",
             "| Figure | Before | After | After ÷ before | |", "|---|---|---|---|---|"]
    for label, (b, fmt, higher), (a, _, _) in rows:
        ratio = a / b if b else float("nan")
        better = (ratio > 1.0) == higher if abs(ratio - 1.0) > 0.02 else None  # within 2%: the same
        mark = "better" if better else ("worse" if better is False else "same")
        lines.append(f"| {label} | {fmt.format(b)} | {fmt.format(a)} | {ratio:.2f} | {mark} |")
    return "\n".join(lines)


def table(res: dict[str, Any]) -> str:
    """The results, each row with its "x Kafka" cell last (— where Kafka has no such figure)."""
    cells = kafka_cells(res) | kafka_cluster_cells(res)
    rows = _rows(res) + kafka_rows(res.get("kafka")) + kafka_cluster_rows(res.get("kafka_cluster"))
    lines = ["| Scenario | Figure | Baseline | Ratio | Target | x Kafka |", "|---|---|---|---|---|---|"]
    for row in rows:
        label = row.split("|")[1].strip()
        lines.append(f"{row} {cells.get(label, '—')} |")
    lines += consumer_wire_rows(res.get("consumer_wire"))
    return "\n".join(lines)


def _rows(res: dict[str, Any]) -> list[str]:
    """The table's rows without their "x Kafka" cell (and without the header, which `table` writes)."""
    f = res.get("figures") or figures(res)
    lines: list[str] = []
    hb = res.get("heartbeat")
    if hb:
        fl, pe = hb["floor"], hb["peer"]
        kind = "asyncio.Protocol" if fl.get("kind") == "protocol" else "asyncio streams"
        lines.append(f"| heartbeat, floor (canned answer) | {fl['rps']:,.0f}/s, p50 {fl['p50_us']:.0f} µs, "
                     f"p99 {fl['p99_us']:.0f} µs{cpu_cell(fl)} ({kind}) | — | — | — |")
        if "floor_streams" in hb:
            fs = hb["floor_streams"]
            lines.append(f"| heartbeat, streams floor (the floor of earlier rounds) | {fs['rps']:,.0f}/s, "
                         f"p50 {fs['p50_us']:.0f} µs, p99 {fs['p99_us']:.0f} µs{cpu_cell(fs)} | — | — | — |")
        lines.append(f"| heartbeat, peer (librdkafka {pe['librdkafka']} mock, {pe['members']:,} members) | "
                     f"{pe['rps']:,.0f}/s, p50 {pe['p50_us']:.0f} µs, p99 {pe['p99_us']:.0f} µs{cpu_cell(pe)} | — | — | — |")
        for s in f["heartbeat"]:
            ok = s["vs_floor"] >= TARGETS["heartbeat_vs_floor"] and s["vs_peer"] >= TARGETS["heartbeat_vs_peer"]
            streams = f", {s['vs_streams_floor']:.2f}x streams floor" if "floor_streams" in hb else ""
            lines.append(f"| heartbeat, {s['members']:,} members | {s['rps']:,.0f}/s, p50 {s['p50_us']:.0f} µs, "
                         f"p99 {s['p99_us']:.0f} µs{cpu_cell(s)} | floor, peer | {s['vs_floor']:.2f}x floor, "
                         f"{s['vs_peer']:.2f}x peer{streams} | ≥ {TARGETS['heartbeat_vs_floor']}x floor and ≥ 1x "
                         f"peer: {met(ok)} |")
        for s in f["heartbeat"]:
            if s["members"] >= 100_000:
                ok = s["bytes_per_member"] <= TARGETS["bytes_per_member"]
                lines.append(f"| memory, {s['members']:,} members | {s['bytes_per_member']:,.0f} B/member | "
                             f"empty server {res['empty_server']['rss_bytes'] / 2**20:.0f} MiB RSS | — | "
                             f"≤ 2 KiB: {met(ok)} |")
    before_5000 = _before_rebalance_s(5000)
    for r in res.get("rebalance", []):
        if r["members"] == 5000 and before_5000:
            ratio = r["seconds"] / before_5000
            lines.append(f"| rebalance, {r['members']:,} members | {r['seconds'] * 1000:,.0f} ms | before the speed "
                         f"work: {before_5000 * 1000:,.0f} ms | {ratio:.2f}x | ≤ "
                         f"{TARGETS['rebalance_5000_vs_before']}x: {met(ratio <= TARGETS['rebalance_5000_vs_before'])} |")
        else:
            lines.append(f"| rebalance, {r['members']:,} members | {r['seconds'] * 1000:,.0f} ms | — | — | — |")
    if "rebalance_growth" in f:
        g = f["rebalance_growth"]
        lines.append(f"| rebalance growth t(5000)/t(500) | {g:.1f} | linear ≈ 10 | — | ≤ "
                     f"{TARGETS['rebalance_growth']:.0f}: {met(g <= TARGETS['rebalance_growth'])} |")
    if "commits" in f:
        for n, c in f["commits"].items():
            lines.append(f"| durable commits, {n} committers | {c['always']:,.0f}/s (fsync always) | "
                         f"{c['never']:,.0f}/s (fsync never) | {c['always_vs_never']:.2f}x | — |")
        g = f["group_commit_gain"]
        lines.append(f"| group commit: 128 vs 1 committer, fsync always | {g:.1f}x | 1 committer | — | ≥ 20x: "
                     f"{met(g >= TARGETS['group_commit_gain'])} |")
        fl = res.get("commit_floor")
        if "group_commit_ceiling" in f and fl:
            need = TARGETS["group_commit_gain"] / f["group_commit_ceiling"]
            lines.append(f"| durable commits, floor (canned answer), {fl['committers']} committers | {fl['rps']:,.0f}/s, "
                         f"p50 {fl['p50_us']:,.0f} µs{cpu_cell(fl)} | — | — | — |")
            lines.append(f"| group commit ceiling: the floor's {fl['committers']} committers vs 1 durable committer | "
                         f"{f['group_commit_ceiling']:.1f}x | 1 committer | durable: "
                         f"{f['durable_vs_commit_floor']:.2f}x the floor; 20x asks {need:.2f}x | — |")
        for d in res.get("durable_floor", []):
            lines.append(f"| durable floor (write + syncfs, canned answer), {d['committers']} committers | "
                         f"{d['rps']:,.0f}/s, p50 {d['p50_us']:,.0f} µs{cpu_cell(d)} | — | — | — |")
        if "durable_floor_gain" in f:
            top = max(d["committers"] for d in res["durable_floor"])
            need = TARGETS["group_commit_gain"] / f["group_commit_durable_ceiling"]
            lines.append(f"| durable floor group commit: {top} vs 1 committer | {f['durable_floor_gain']:.1f}x | "
                         f"its 1 committer | — | — |")
            lines.append(f"| durable commits, {top} committers, x durable floor | "
                         f"{f['durable_vs_durable_floor']:.2f}x | the durable floor's {top} committers | — | "
                         f"20x one durable committer asks {need:.2f}x |")
        for n, us in f.get("commit_cpu_us", {}).items():
            if us is None:
                continue
            target = (f"≤ {TARGETS['commit_cpu_us']:.0f} µs: {met(us <= TARGETS['commit_cpu_us'])}"
                      if n == max(f["commit_cpu_us"], key=int) else "—")
            lines.append(f"| server CPU per commit, {n} committers, fsync always | {us:.0f} µs | — | — | {target} |")
    for r in res.get("offset_fetches", []):
        cpu = r.get("server_cpu_us_per_request")
        lines.append(f"| offset fetch, {r['fetchers']} fetchers | {r['rps']:,.0f}/s, p50 {r['p50_us']:,.0f} µs"
                     f"{f', {cpu:.0f} µs server CPU each' if cpu is not None else ''} | — | — | — |")
    rec = res.get("recovery")
    if rec:
        lines.append(f"| recovery, {rec['records']:,} commits / {rec['keys']:,} keys, before compaction | "
                     f"{rec['startup_before_s']:.1f} s start-up | {f['recovery_before_rps']:,.0f} records/s | — | — |")
        lines.append(f"| recovery, after compaction ({rec['bytes_before'] / 2**20:.0f} → "
                     f"{rec['bytes_after'] / 2**20:.0f} MiB) | {rec['startup_after_s']:.1f} s start-up | "
                     f"{f['recovery_after_rps']:,.0f} records/s | — | ≥ 1M/s: "
                     f"{met(f['recovery_after_rps'] >= TARGETS['recovery_after_rps'])} |")
    e2e = res.get("e2e")
    if e2e:
        lines.append(f"| end to end: producer → topic store → 3-member group | {e2e['records_per_s']:,.0f} records/s "
                     f"({e2e['consumed']:,} of {e2e['records']:,}) | — | — | — |")
    lines += consumer_rows(res.get("consumer"))
    lines += cluster_rows(res.get("cluster"))
    lines += pipeline_rows(res.get("pipeline"))
    return lines


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rebalance"]
    xs = [r["members"] for r in rows]
    ys = [r["seconds"] * 1000 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(xs, ys, "o-", label="coordinator (median)")
    if 500 in xs:
        t500 = ys[xs.index(500)]
        ax.plot(xs, [t500 * x / 500 for x in xs], "--", color="grey", label="linear through t(500)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("members joining at once")
    ax.set_ylabel("first JoinGroup → last SyncGroup (ms)")
    ax.set_title("Rebalance latency against group size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def summarize_profile(raw: Path, top: int = 15) -> dict[str, Any]:
    """Self and total sample counts of the hottest frames of a py-spy raw (collapsed stacks) file."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack:
            continue
        n = int(n_s)
        samples += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for fr in set(frames):
            total[fr] += n
    return {"samples": samples,
            "self": [[fr, n / samples] for fr, n in own.most_common(top)],
            "total": [[fr, n / samples] for fr, n in total.most_common(top + 10)]}


def _merged(res: dict[str, Any]) -> str:
    """A note naming the scenarios a later `--only ... --merge-into` run replaced, and that run."""
    merged = res.get("merged")
    if not merged:
        return ""
    return "".join(f"\nThe {', '.join(m['scenarios'])} rows are from a later run, of {m['date']} at commit "
                   f"{m['git']} ({m['total_seconds']:.0f} s; `benchmarks.run --only ... --merge-into`)."
                   for m in merged)


def write_docs(res: dict[str, Any], results_path: Path) -> None:
    plot(res, PLOT)
    m = res["machine"]
    deps = ", ".join(f"{k} {v}" for k, v in m["dependencies"].items() if v)
    findings = FINDINGS.read_text() if FINDINGS.exists() else ""
    rel = results_path.relative_to(ROOT)
    DOC.write_text(f"""# Performance

Generated by `make bench` (`benchmarks/run.py`) from [`{rel}`](../{rel}); do not edit by hand — the
text around the table lives in `benchmarks/render.py` and `benchmarks/findings.md`.

Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}; {m['implementation']}
{m['python']}; {deps}; commit {m['git']}. Run of {res['date']}, {res['total_seconds']:.0f} s in all.{_merged(res)}

Every figure is a ratio against a baseline measured in the same run, with the same load generator: the
**floor** (`benchmarks/floor.py`, the fastest canned-answer server we know how to write in Python: an
`asyncio.Protocol` on uvloop that cuts whole frames in `data_received` and writes a canned response of the
same size from that call, no coroutine per request; the asyncio-streams floor of earlier rounds is kept as
a second row) and the **peer** (librdkafka's mock cluster, whose classic
group coordinator is written in C, started by confluent-kafka with `test.mock.num.brokers`). The last
column sets the server against **Apache Kafka** ({(res.get('kafka') or {}).get('version', 'not run')}, one KRaft node
started from the jars `make kafka-deps` installs; for the cluster rows, three) driven the same way in the same run: the server's rate over
Kafka's, or Kafka's time over the server's, so above 1x the server is ahead; Kafka's own figures are the
last rows. Absolute numbers depend on the machine; the ratios are the point. Nothing here is asserted by a
test.

## Results

{table(res)}

![Rebalance latency against group size](performance-rebalance.png)

## Before and after the speed work

{before_after(res) or "No earlier run to compare with."}

## How it is measured

- **Load generator** (`benchmarks/loadgen.py`): its own process, asyncio + uvloop, frames built once with
  kafka-python's message classes, one request in flight per connection (our server reads the next frame only
  after answering; the floor and the peer are driven the same way), responses split by the size prefix and
  counted, the error code read at a fixed offset and never decoded. 32 connections for heartbeats; its own CPU
  time is in the results JSON (`cpu_s`), to show it is not the bottleneck.
- **Heartbeats**: the server starts on a `__consumer_offsets` log written by `benchmarks/preload.py` with the
  project's codec and storage code — groups of 100 members, generation 1, 30-minute sessions — and loads them
  Stable; the load generator cycles through heartbeats of 20,000 members sampled across all groups. The peer
  has no log to preload: its members ({res.get('heartbeat', {}).get('peer', {}).get('members', 0):,}, groups of
  100) are registered with real JoinGroup/SyncGroup rounds first, and it is measured at that size only
  (one wave of 300 joining members, which waits out the mock's fixed 3 s first-join delay; with more
  members, or a second wave while the first stays connected, some group of the mock never finished its join
  round in our runs, so the peer figure is for 300 members against ours at 10k and more).
- **Memory per member**: RSS of the loaded server (after the heartbeat run, whichever is larger) minus the RSS
  of an empty server, divided by the members.
- **Rebalance**: one group, every member on its own connection, opened (and answered an ApiVersions) before
  the clock starts, as a consumer's is before it joins; then every member sends JoinGroup v5 at once (the KIP-394
  MEMBER_ID_REQUIRED round trip included), `--initial-rebalance-delay-ms 0`; the leader assigns every member.
  A member synced in an earlier generation learns of the next rebalance from its heartbeat, sent every 3 s
  (Kafka's default `heartbeat.interval.ms`, whatever the group's size); each run records its heartbeats and
  per-generation timeline. Time from the first JoinGroup sent to the last SyncGroup answered of the
  generation that holds every member; median of 5, the sizes interleaved run by run. Each run also records
  the server's CPU time inside that window (`server_cpu_s`, sampled from /proc every 10 ms), which other work
  on the machine moves far less than the wall time. On stop every member sends LeaveGroup (as a consumer's
  `close()` does), so a run leaves no members behind for the next one on the same server. Not run against
  the peer: the mock's first join always waits 3 s (its hard-coded stand-in for
  `group.initial.rebalance.delay.ms`).
- **Durable commits**: each committer is a connection committing one partition of its own group
  (OffsetCommit v8, generation -1), one request in flight; fsync `always` against `never`, same run, with
  the default `--fsync-method auto` (a round over 4+ partitions made durable by one syncfs). The commit
  floor is the Protocol floor driven the same way by the 128 committers, answering each with the server's
  own commit answer: the most commits a second a Python server reaches here, whatever it does per commit.
  The durable floor (`benchmarks/floor.py durable`) is driven by 1, 16 and 128 committers and does only
  the durable part of a commit: the request written as it came to one of 50 files (one per connection),
  answered after a syncfs by the server's own C syncfs thread asked for once a loop turn. Its 128-vs-1
  ratio is the group commit a Python server with Kafka's partition layout shows at all on this machine.
- **Recovery**: `preload.py` writes {res.get('recovery', {}).get('records', 0):,} offset commits over
  {res.get('recovery', {}).get('keys', 0):,} keys (10 per batch, ~8 segments per partition); start-up is timed
  to the listening socket, once before and three times after compacting with the server's own cleaner
  (`CoordinatorLog.compact_now`; the median counts); records/s = commits in the original log ÷ (start-up -
  an empty server's start-up, the median of three taken right after with the same flags:
  {res.get('recovery', {}).get('empty_startup_s', 0):.2f} s). As in Kafka, the cleaner leaves each
  partition's active segment alone, so the start-up after compaction still replays about an eighth of the
  commits uncompacted, besides the one record per key the cleaned segments keep. Start-up decodes only the
  last record per key (`storage/replay.py`). The default is the issue's 10 million commits (2 million before
  replay got fast); `make bench-quick` uses 200,000.
- **Cluster** (`benchmarks/cluster.py`, `benchmarks/failover.py`): ZooKeeper (Debian's, started by
  `coordinator_server/tools/local_zookeeper.py`) and three nodes, `--offsets-replication-factor 3
  --min-insync-replicas 2 --zookeeper-session-timeout-ms {res.get('cluster', {}).get('failover', {}).get('zookeeper_session_timeout_ms', 0)}`, fsync always,
  50 `__consumer_offsets` partitions. *Replicated commits*: the durable-commits load generator and frames,
  each connection to the coordinator of its own group (FindCoordinator first), against a single node with
  the same flags started just before the cluster. *Failover*: {res.get('cluster', {}).get('failover', {}).get('groups', 0):,} one-member groups
  registered over the wire (JoinGroup, SyncGroup, then a heartbeat every 3 s, session 45 s), then kill -9 of
  the node coordinating the most of them. Each member does what a consumer does: its connection drops, it
  asks FindCoordinator of a live node every 100 ms (retry.backoff.ms) until it can connect to the named
  coordinator, and heartbeats there; the new coordinator loaded the group from its replica Stable with that
  member, so the heartbeat is answered NONE (a refused one would make it rejoin and sync; the results count
  rejoins). A NONE is then confirmed with a DescribeGroups of the group at that coordinator, repeated every
  100 ms while it answers COORDINATOR_LOAD_IN_PROGRESS (Kafka answers heartbeats NONE while the group is
  still loading; the results count the members that waited, `load_waits`), and the group is Stable again
  when it is described Stable with that member. Time from the kill to the last group's confirmation, all
  checked again afterwards with DescribeGroups. The partition load time is the `seconds` of the new leaders'
  `coordinator_partition_loaded` log events. The cluster rows' "x Kafka" cells are against Apache Kafka's
  three-node cluster (below).
- **End to end**: a kafka-python producer ({res.get('e2e', {}).get('records', 0):,} records of 100 bytes) and
  three kafka-python consumers in one group, each its own process, through the embedded topic store; time
  from the first send to the last record consumed.
- **Pipeline** (`benchmarks/pipeline.py`): `preload.py` writes {', '.join(f"{log['records']:,}" for log in res.get('pipeline', {}).get('logs', []))}
  offset commits over 20,000 keys (400 segments); each side runs in a process of its own. *Replay*:
  `storage.replay.LatestRecords` over every partition's checked batches (what start-up runs), CPU from
  `getrusage` around it. *Decode*: `pipeline.reader.read_records` to Spark's `noop` sink in `local[*]`,
  after a tiny job that starts the Python workers and imports the decoder; CPU of the driver's whole
  process tree (driver, JVM, Python daemon and workers, from /proc) across the job. The ratio is
  records per CPU second of the decode over the replay's; the target is 0.5x. The 2M log's sides run three
  times each, alternated, and the median of each counts (that 2-second decode moved by ±10% from run to
  run on a quiet machine); the 20M log's once. *Split*: one group's
  commits in one partition with 1 GiB segments (one segment), decoded with
  `spark.coordinator.pipeline.splitSegments` on and off; best wall time of two each, interleaved.
- **Apache Kafka** (`benchmarks/kafka_peer.py`): a single combined broker and controller sized for 2 cores
  (`tests/kafka/broker.py`: 1 GiB heap, two network and two I/O threads, replication factors 1,
  `group.initial.rebalance.delay.ms=0`), driven by the same load generator, frames and member driver as the
  server. Its heartbeat members are enrolled with real JoinGroup/SyncGroup rounds (groups of 100, 30-minute
  sessions, a thousand members at a time, each wave's connections closed once Stable: membership does not
  need the connection), then heartbeated over the same 32 connections as the server's preloaded members;
  there is no million-member Kafka row (enrolling runs at a few thousand members a second). Rebalances and
  commits are the server's scenarios unchanged. Commits run on two brokers in turn: one at Kafka's defaults,
  which never flush (an acknowledged commit is in the page cache), and one with
  `log.flush.interval.messages=1` (every append flushed before its answer). The server's `fsync always`
  is its default, so the "defaults" pairing sets a flush per commit against none; "flush each write on
  both" and "no flush on both" compare like with like. Each Kafka load starts after a 5 s warm-up
  (unmeasured, as the server's shorter one is), for the JIT. Coordinator load after a restart
  (`benchmarks/kafka_recovery.py`): the recovery scenario's very commits (`preload.commit_batches`: same
  keys, batches of 10, partitions) are produced into a third broker's `__consumer_offsets` (Kafka lets its
  admin client id, `__admin_client`, write there; acks=1), which is then stopped cleanly and started again
  on that log; it counts as started once every partition of `__consumer_offsets` is loaded (a DescribeGroups
  per partition answers with no error), and an OffsetFetch checks that the last commit of a key came back.
  records/s = commits ÷ (that start-up - the same broker's start-up with nothing produced), medians of
  three each. It is set against the server's start-up before compaction: Kafka's cleaner never touches the
  active segment those commits fill, so that is the log both load.
- **Apache Kafka's cluster** (`benchmarks/kafka_cluster.py`, `tests/kafka/cluster.py`): three combined broker
  and controller nodes (node ids 0-2, a static quorum of the three, 768 MiB heap each, otherwise the single
  broker's settings), every internal topic and the commit topic at replication factor 3 and min ISR 2. A
  broker's liveness is set to match the server's ZooKeeper session, as it is what decides how long a kill -9
  goes unnoticed: the controller fences a broker it has not heard from in 3 s
  (`broker.session.timeout.ms=3000`, a heartbeat every second; Kafka's defaults are 9 s and 2 s). Every
  other setting is Kafka's default. *Replicated commits* run through the server's cluster code itself
  (`cluster.cluster_commits`: the same frames, each committer's connection to its group's coordinator as
  FindCoordinator names it, a first commit acknowledged before the clock runs), after the 5 s warm-up, on
  a cluster at Kafka's defaults (no flush: a commit is acknowledged once every in-sync replica has it in
  its page cache) and, in full runs only, on a second cluster with `log.flush.interval.messages=1`. The
  server's cluster fsyncs each write, so the "defaults" cell pairs its fsync with Kafka's page cache, and
  "flush each write on both" compares like with like; `make bench-quick` has the first only. *Failover*:
  the same driver, groups and member session on the defaults cluster after its commits, kill -9 of the
  node coordinating the most groups, Kafka's time over the server's in the cell. When the victim is also
  the active controller (the quorum's leader, from a survivor's `quorum-state` file) Kafka elects a new
  one first: a voter calls an election after 2 s without hearing from the leader
  (`controller.quorum.fetch.timeout.ms`), before the dead broker can be fenced. Each moved partition's
  load time is from the new leader's log ("Finished loading of metadata from __consumer_offsets-N ... in
  X ms").
- **KIP-848 consumer groups** (`benchmarks/consumer_groups.py`, in process: the core is synchronous, so its
  cost is CPU): the server-side `uniform` and `range` assignors' time for one assignment against group
  size over one topic of 10,000 partitions — fresh, and sticky after one member joins a settled group —
  beside kafka-python's client-side range assignor on the same group (what a classic leader computes),
  measured in the same run; KIP-848 reports Kafka's uniform assignor at about 1.7 ms for 5,000 members.
  Convergence: a Stable group of 5,000 members (built from the records a coordinator writes) gets a
  5,001st; every member then heartbeats once per round with what it owns until the group is Stable again
  with every partition owned: the rounds (one heartbeat interval each, 5 s by default) and the core's CPU.
- **KIP-848 over the wire** (`benchmarks/consumer_members.py`, run by `benchmarks/consumer_wire.py`): one
  group of 200, 1,000 and 5,000 consumer-protocol members (200 and 1,000 for `--quick`) subscribed to one
  topic of 1,000 partitions, ConsumerGroupHeartbeat v1 built and read by hand. One connection per member, as
  each consumer has its own to its coordinator, opened (and answered an ApiVersions) in waves of 256 before
  the clock starts, so the accept backlog never overflows. Every member then joins at once (epoch 0, its own
  member id, the subscription, `uniform` named as the server-side assignor, which both serve under that name)
  and does what the Java client's member does: it heartbeats with its epoch at the interval the answer gives
  (1 s: `--group-consumer-heartbeat-interval-ms` and `--group-consumer-min-heartbeat-interval-ms` on the
  server, `group.consumer.heartbeat.interval.ms` and its minimum on Kafka; sessions of 45 s, both's default,
  set on both),
  sending only what changed since its last heartbeat; an assignment is reconciled at once (revoked
  partitions released, their processing taken as done, new ones taken) and the new owned set acknowledged
  on a heartbeat sent right away; fenced or unknown, the member releases everything and rejoins with epoch
  0 (the rows count rejoins). *Convergence*: the time from the first join to the answer after which every
  member is at the group's epoch with its owned set acknowledged and every partition owned by exactly one
  member, confirmed with a ConsumerGroupDescribe (group epoch and assignment epoch equal to it, each
  member's assignment equal to its target). The cut-off is 120 s (30 s for `--quick`); a group short of it
  shows how many members held their target then. A partition in two members' owned sets at once is counted
  on every change; the row gives the worst moment's count, and apart the ones revoke-before-assign
  forbids: given to a member while an earlier holder's session was certainly alive (its last request
  answered with no error was sent less than a session timeout before). The others were held by a member the
  coordinator may have expired, which frees its partitions at once while the member learns so only from its
  next answer (UNKNOWN_MEMBER_ID), as any consumer's would. *Steady heartbeats*: the members stop, and the
  load generator cycles one steady heartbeat per member (its epoch, every other field null, as the client
  sends it when nothing changed) through 32 connections, one request in flight each, as for the classic
  heartbeat rows; only error-0 answers count, and the CPU of the server's or broker's process per answer.
  The server is started fresh for each size, at its defaults otherwise (so fsync always for the group's
  records; Kafka does not flush); Kafka is one broker for the scenario, a new group per size; the two
  alternate size by size, and an unmeasured 200-member group converges first on each fresh server and once
  on the broker. Kafka's broker computes a consumer group's target assignment on the heartbeat that needs
  it, on the coordinator's thread (`group.consumer.assignment.interval.ms=0`,
  `group.consumer.assignor.offload.enable=false` in `tests/kafka/broker.py`), as the server does: kept here,
  so that both do the same work per join. At its defaults Kafka 4.4 computes it at most once a second, off
  that thread, so a burst of joins shares one computation: another design than the server's, not measured
  here.

{findings}
""")
