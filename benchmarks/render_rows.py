"""The results table's rows of the scenarios beside the core ones: the Spark pipeline, KIP-848's assignors
and its members over the wire, and the ZooKeeper cluster."""
from __future__ import annotations

from typing import Any

from .render_cells import TARGETS, cpu_s, errors_cell, met, ms, one_line, ratio


def pipeline_rows(pl: dict[str, Any] | None) -> list[str]:
    """The Spark pipeline (benchmarks/pipeline.py): its decode against the server's replay of the same log,
    per CPU second, and one large segment split across tasks against read whole."""
    if not pl:
        return []
    rows = []
    target = TARGETS["pipeline_vs_replay"]
    for log in pl["logs"]:
        d = log["decode"]
        runs = log.get("decode_cpu_s_runs", [])
        spread = (f"; median of {len(runs)} runs, {min(runs):.1f}-{max(runs):.1f} CPU-s"
                  if len(runs) > 1 else "")
        replay_runs = log.get("replay_cpu_s_runs", [])
        replay_spread = (f", median of {len(replay_runs)}, {min(replay_runs):.1f}-{max(replay_runs):.1f}"
                         if len(replay_runs) > 1 else "")
        rows.append(f"| pipeline decode vs server replay, {log['records']:,} commits ({log['bytes'] / 2**20:,.0f} MiB, "
                    f"{log['segments']} segments) | {log['decode_records_per_cpu_s']:,.0f} records/CPU-s "
                    f"({d['cpu_s']:.1f} CPU-s: driver, JVM, Python workers{spread}; "
                    f"{log['decode_records_per_s']:,.0f} records/s wall, {d['tasks']} tasks on {d['cores']} cores) "
                    f"| replay {log['replay_records_per_cpu_s']:,.0f} records/CPU-s ({log['replay']['cpu_s']:.1f} "
                    f"CPU-s{replay_spread}) | "
                    f"{log['decode_vs_replay']:.2f}x | ≥ {target}x: {met(log['decode_vs_replay'] >= target)} |")
    sp = pl["split"]
    rows.append(f"| pipeline, one {sp['segment_bytes'] / 2**20:,.0f} MiB segment ({sp['records']:,} commits), split | "
                f"{sp['split_s']:.1f} s ({sp['split_tasks']} tasks) | read whole: {sp['whole_s']:.1f} s "
                f"({sp['whole_tasks']} task) | {sp['split_speedup']:.2f}x | — |")
    return rows


def consumer_rows(cg: dict[str, Any] | None) -> list[str]:
    """KIP-848 (benchmarks/consumer_groups.py): the server-side assignors beside kafka-python's client-side
    range assignor (a classic leader's work for the same group), and a join's convergence."""
    if not cg:
        return []
    rows = []
    for a in cg["assignor"]:
        kafka = f"; Kafka's uniform: {cg['kafka_uniform_5000_ms']} ms" if a["members"] == 5000 else ""
        rows.append(f"| KIP-848 assignor, {a['members']:,} members x {a['partitions']:,} partitions | uniform "
                    f"{a['uniform_join_ms']:,.1f} ms after a join ({a['uniform_fresh_ms']:,.1f} ms fresh), range "
                    f"{a['range_join_ms']:,.1f} ms | kafka-python range (client side) {a['kafka_python_range_ms']:,.1f} "
                    f"ms{kafka} | {a['uniform_join_vs_kafka_python_range']:.2f}x | — |")
    c = cg["converge"]
    rows.append(f"| KIP-848 convergence after a join, {c['members']:,} members x {c['partitions']:,} partitions | "
                f"{c['rounds']} heartbeat rounds (≈ {c['seconds_at_default_interval']:.0f} s at the 5 s interval; "
                f"{'converged' if c['converged'] else 'NOT converged'}), core CPU {c['core_cpu_s']:.2f} s over "
                f"{c['heartbeats']:,} heartbeats ({c['join_heartbeat_cpu_s'] * 1000:.0f} ms the joining one) | — | — | — |")
    return rows


def consumer_wire_rows(cw: dict[str, Any] | None) -> list[str]:
    """KIP-848 members over the wire (benchmarks/consumer_wire.py), the server's rows with their "x Kafka"
    cell (Kafka's time over the server's, the server's rate over Kafka's), then Kafka's own. A group that
    did not converge by the cut-off shows what it reached; against a converged Kafka its cell is a bound."""
    if not cw:
        return []
    label = f"KIP-848 over the wire, {cw['topic_partitions']:,} partitions"
    rows = [f"| {label}, {e['part']} | failed: {one_line(e['error'])} | — | — | — | — |" for e in cw.get("errors", [])]
    kafka = {k["members"]: k for k in cw.get("kafka", [])}

    def converged(r: dict[str, Any]) -> str:
        tail = f"epoch {r['epoch']:,}, {r['rejoins']:,} rejoins, worst overlap {r['worst_overlap']} partitions"
        if r["worst_overlap"] and r.get("worst_live_overlap") is not None:
            tail += f" ({r['worst_live_overlap']} while the earlier holder's session was alive)"
        if (latency := r.get("max_latency_s")) is not None and latency >= 1:
            tail += f", slowest answer {latency:.1f} s"
        tail += cpu_s(r)
        if r["converged"]:
            return f"{r['seconds']:.1f} s ({tail})"
        d = r.get("describe") or {}
        holding, whose = ((d["holding_target"], "the coordinator's count") if "holding_target" in d
                          else (r["holding"], "the driver's count"))
        return (f"did not converge in {r['cutoff_s']:.0f} s: {holding:,} of {r['members']:,} members hold their "
                f"target ({whose}; {r.get('joined', 0):,} joined; {tail})")

    def steady(r: dict[str, Any]) -> str:
        h = r.get("steady")
        if not h:
            return "— (no steady phase: the group did not converge)"
        cpu = h.get("server_cpu_us_per_ok")
        return (f"{h['ok_rps']:,.0f}/s error-0, p50 {h['p50_us']:.0f} µs, p99 {h['p99_us']:.0f} µs"
                f"{f', {cpu:.0f} µs CPU each' if cpu is not None else ''}")

    for r in cw.get("server", []):
        n, k = r["members"], kafka.get(r["members"])
        x_converge = x_steady = "—"
        if k and k["converged"]:
            if r["converged"] and (x := ratio(k["seconds"], r["seconds"])):
                x_converge = f"{x:.2f}x"
            elif not r["converged"]:
                x_converge = f"< {k['seconds'] / r['cutoff_s']:.2f}x (cut off)"
        if k and k.get("steady") and r.get("steady") and (x := ratio(r["steady"]["ok_rps"], k["steady"]["ok_rps"])):
            x_steady = f"{x:.2f}x"
        rows.append(f"| {label}, convergence, {n:,} members | {converged(r)} | — | — | — | {x_converge} |")
        rows.append(f"| {label}, steady heartbeats, {n:,} members | {steady(r)} | — | — | — | {x_steady} |")
    name = f"Apache Kafka {cw.get('kafka_version', '')}"
    for k in cw.get("kafka", []):
        rows.append(f"| {label}, {name}, convergence, {k['members']:,} members | {converged(k)} | — | — | — | — |")
        rows.append(f"| {label}, {name}, steady heartbeats, {k['members']:,} members | {steady(k)} | — | — | — | — |")
    return rows


def cluster_rows(cl: dict[str, Any] | None) -> list[str]:
    if not cl:
        return []
    if "error" in cl:
        return [f"| cluster (failover, replicated commits) | failed: {cl['error'][:300].replace('|', '/')} | — | — | — |"]
    fo = cl["failover"]
    rows = [
        f"| cluster failover, {fo['groups']:,} groups | {fo['seconds']:.2f} s from kill -9 to the last of its "
        f"{fo['moved']:,} groups Stable on its new coordinator (first {fo['first_s']:.2f} s, p50 {fo['p50_s']:.2f} s; "
        f"{fo['rejoins']} rejoins{'; it was also the controller' if fo.get('victim_was_controller') else ''}) | "
        f"ZooKeeper session timeout {fo['zookeeper_session_timeout_ms']:,} ms | "
        f"{fo['seconds'] * 1000 / fo['zookeeper_session_timeout_ms']:.2f}x the session timeout | — |",
        f"| cluster failover, partition load on the new leader | {ms(fo['partition_load_s_max'])} the slowest of "
        f"{fo['partitions_moved']} partitions (median {ms(fo['partition_load_s_median'])}) | — | — | — |",
    ]
    for c in cl["commits"]:
        rows.append(f"| replicated commits (3 nodes, RF 3, min ISR 2) vs single node, {c['committers']} committers | "
                    f"{c['cluster']['rps']:,.0f}/s, p50 {c['cluster']['p50_us']:,.0f} µs"
                    f"{errors_cell(c['cluster'])} | {c['single']['rps']:,.0f}/s single node{errors_cell(c['single'])} | "
                    f"{c['cluster_vs_single']:.2f}x | — |")
    return rows
