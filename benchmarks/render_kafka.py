"""The "x Kafka" cells of the results table (the server against Apache Kafka in the same run, single node
and cluster) and Kafka's own rows, their baselines."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .render_cells import cpu_cell, errors_cell, ms, one_line, ratio


def kafka_cells(res: dict[str, Any]) -> dict[str, str]:
    """Per row label, the server against Apache Kafka in the same run: its rate over Kafka's, or Kafka's time
    over its own, so above 1 the server is ahead. Commits say which durability each side gave."""
    k = res.get("kafka")
    if not k:
        return {}
    cells: dict[str, str] = {}
    kafka_hb = {h["members"]: h for h in k.get("heartbeat", [])}
    for s in (res.get("heartbeat") or {}).get("server", []):
        if s["members"] in kafka_hb and (r := ratio(s["rps"], kafka_hb[s["members"]]["rps"])):
            cells[f"heartbeat, {s['members']:,} members"] = f"{r:.2f}x"
    kafka_rb = {r["members"]: r for r in k.get("rebalance", [])}
    for r in res.get("rebalance", []):
        if r["members"] in kafka_rb and (x := ratio(kafka_rb[r["members"]]["seconds"], r["seconds"])):
            cells[f"rebalance, {r['members']:,} members"] = f"{x:.2f}x"
    ours = {(c["fsync"], c["committers"]): c["rps"] for c in res.get("commits", [])}
    theirs = {(c["flush"], c["committers"]): c["rps"] for c in k.get("commits", [])}
    for n in sorted({c for _, c in ours}):
        parts = []
        for label, server, kafka in (("defaults (server flushes each commit, Kafka none)", "always", "never"),
                                     ("flush each write on both", "always", "always"),
                                     ("no flush on both", "never", "never")):
            if (x := ratio(ours.get((server, n)), theirs.get((kafka, n)))):
                parts.append(f"{x:.2f}x {label}")
        if parts:
            cells[f"durable commits, {n} committers"] = "; ".join(parts)
    rec, krec = res.get("recovery"), k.get("recovery")
    if rec and krec and (x := ratio(rec["records_per_s_before"], krec["records_per_s"])):
        # Kafka's log is the one the server loads before compaction: the cleaner never reached its active
        # segments, so only that row has a like for like.
        cells[f"recovery, {rec['records']:,} commits / {rec['keys']:,} keys, before compaction"] = f"{x:.2f}x"
    return cells


def kafka_rows(k: dict[str, Any] | None) -> list[str]:
    """Kafka's own figures, the baselines of the "x Kafka" cells."""
    if not k:
        return []
    if "version" not in k:
        return [f"| Apache Kafka | failed: {one_line(k.get('error', 'no result'))} | — | — | — |"]
    name = f"Apache Kafka {k['version']}"
    rows = [f"| {name}, {e['part']} | failed: {one_line(e['error'])} | — | — | — |" for e in k.get("errors", [])]
    for h in k.get("heartbeat", []):
        rows.append(f"| heartbeat, {name}, {h['members']:,} members | {h['rps']:,.0f}/s, p50 {h['p50_us']:.0f} µs, "
                    f"p99 {h['p99_us']:.0f} µs{cpu_cell(h)} (enrolled in {h['enroll_s']:.0f} s) | — | — | — |")
    for r in k.get("rebalance", []):
        rows.append(f"| rebalance, {name}, {r['members']:,} members | {r['seconds'] * 1000:,.0f} ms | — | — | — |")
    for n, figure in _kafka_commit_figures(k.get("commits", []), cpu_cell):
        rows.append(f"| commits, {name}, {n} committers | {figure} | — | — | — |")
    if rec := k.get("recovery"):
        rows.append(f"| recovery, {name}, {rec['records']:,} commits / {rec['keys']:,} keys | "
                    f"{rec['startup_s']:.1f} s start-up (empty: {rec['empty_startup_s']:.1f} s) | "
                    f"{rec['records_per_s']:,.0f} records/s | — | — |")
    return rows


def kafka_cluster_cells(res: dict[str, Any]) -> dict[str, str]:
    """The server's cluster rows against Kafka's three-node cluster (benchmarks/kafka_cluster.py): replicated
    commits at the same committers (the server's rate over Kafka's), the failover (Kafka's time over the
    server's), so above 1 the server is ahead."""
    cl, kc = res.get("cluster"), res.get("kafka_cluster")
    if not cl or not kc or "error" in cl or "version" not in kc:
        return {}
    cells: dict[str, str] = {}
    theirs = {(c["flush"], c["committers"]): c["rps"] for c in kc.get("commits", [])}
    for c in cl["commits"]:
        n = c["committers"]
        parts = [f"{x:.2f}x {label}" for label, flush in (
            ("defaults (server fsyncs each commit, Kafka's cluster none)", "never"),
            ("flush each write on both", "always")) if (x := ratio(c["cluster"]["rps"], theirs.get((flush, n))))]
        if parts:
            cells[f"replicated commits (3 nodes, RF 3, min ISR 2) vs single node, {n} committers"] = "; ".join(parts)
    fo, kfo = cl["failover"], kc.get("failover")
    if kfo and kfo["groups"] == fo["groups"] and (x := ratio(kfo["seconds"], fo["seconds"])):
        cells[f"cluster failover, {fo['groups']:,} groups"] = (
            f"{x:.2f}x (Kafka {kfo['seconds']:.2f} s; 3 s to notice the kill on both)")
    return cells


def kafka_cluster_rows(kc: dict[str, Any] | None) -> list[str]:
    """Kafka's own cluster figures, the baselines of the cluster rows' "x Kafka" cells."""
    if not kc:
        return []
    if "version" not in kc:
        return [f"| Apache Kafka cluster | failed: {one_line(kc.get('error', 'no result'))} | — | — | — |"]
    name = f"Apache Kafka {kc['version']} cluster (3 KRaft nodes, RF 3, min ISR 2)"
    rows = [f"| {name}, {e['part']} | failed: {one_line(e['error'])} | — | — | — |" for e in kc.get("errors", [])]
    for n, figure in _kafka_commit_figures(kc.get("commits", []), errors_cell):
        rows.append(f"| replicated commits, {name}, {n} committers | {figure} | — | — | — |")
    fo = kc.get("failover")
    if fo:
        session = fo["broker_session_timeout_ms"]
        rows += [
            f"| cluster failover, {name}, {fo['groups']:,} groups | {fo['seconds']:.2f} s from kill -9 to the last "
            f"of its {fo['moved']:,} groups Stable on its new coordinator (first {fo['first_s']:.2f} s, p50 "
            f"{fo['p50_s']:.2f} s; {fo['rejoins']} rejoins"
            f"{'; it was also the active controller' if fo.get('victim_was_controller') else ''}) | "
            f"broker session timeout {session:,} ms | {fo['seconds'] * 1000 / session:.2f}x the session timeout | — |",
            f"| cluster failover, {name}, partition load on the new leader | {ms(fo['partition_load_s_max'])} the "
            f"slowest of {fo['partitions_moved']} partitions (median {ms(fo['partition_load_s_median'])}) | — | — "
            f"| — |",
        ]
    return rows


def _kafka_commit_figures(commits: list[dict[str, Any]],
                          extra: Callable[[dict[str, Any]], str]) -> list[tuple[int, str]]:
    """Per committer count, Kafka's commit figures at its default (no flush) and with a flush each write,
    each with `extra` (its CPU, its errors) appended."""
    by_n: dict[int, dict[str, dict[str, Any]]] = {}
    for c in commits:
        by_n.setdefault(c["committers"], {})[c["flush"]] = c
    return [(n, ", ".join(f"{c[f]['rps']:,.0f}/s, p50 {c[f]['p50_us']:,.0f} µs{extra(c[f])} ({what})"
                          for f, what in (("never", "its default: no flush"), ("always", "a flush each write"))
                          if f in c)) for n, c in sorted(by_n.items())]
