"""The `report` job: one static HTML page with tables and PNG charts, for a person to open.

    OUT/report/index.html
    OUT/report/rebalances.png        rebalances over time (per bucket, all groups; cumulative, top groups)
    OUT/report/lag.png               total lag over time of the groups with the most lag

"Why groups rebalanced" is `pipeline.explain` over the groups that rebalance most: with `--server-log`
the trigger, the member and who made the join wait; without, the times and membership changes only.

Spark computes every table and series and hands over only small aggregates: the top groups, and the
series cut into at most `_MAX_POINTS` time buckets per group, so the driver never collects a history.
matplotlib draws with its Agg backend (files only, no display needed).
"""
from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import jobs
from pipeline.reader import CoordinatorLog

if TYPE_CHECKING:
    import pandas as pd

_MAX_POINTS = 300  # per group and chart


def _bucketed(df: DataFrame, value: str, top: DataFrame) -> DataFrame:
    """`df` (node, group, ts, value) of the `top` groups, at most _MAX_POINTS buckets per group, keeping
    the last value of each bucket."""
    df = df.join(top.select("node", "group"), ["node", "group"])
    bounds = df.agg(F.min("ts").alias("lo"), F.max("ts").alias("hi")).first()
    if bounds is None or bounds["lo"] is None:
        return df.select("node", "group", "ts", value).limit(0)
    bucket_ms = max(1000, -(-(bounds["hi"] - bounds["lo"]) // _MAX_POINTS))
    return (df.groupBy("node", "group", F.floor(F.col("ts") / bucket_ms).alias("b"))
            .agg(F.max_by(value, "ts").alias(value), F.max("ts").alias("ts"))
            .select("node", "group", "ts", value).orderBy("node", "group", "ts"))


def build_report(log: CoordinatorLog, out_dir: Path, top_n: int = 8, min_lag: int = 100,
                 server_logs: Sequence[str] = ()) -> Path:
    """Compute everything the page shows and write it; returns the index.html path."""
    snap = jobs.snapshot(log)
    reb = jobs.rebalances(log)
    lag = jobs.lag(log, min_lag=min_lag)

    top_reb = reb.top_groups.limit(top_n)
    top_lag = lag.groups.limit(top_n)
    gen_series = _bucketed(reb.generations.filter(F.col("generation") > 0)
                           .withColumn("ts", F.unix_millis("start_time")), "generation", top_reb)
    lag_series = _bucketed(lag.group_history, "total_lag", top_lag)
    rebals = reb.generations.filter(F.col("generation") > 0)
    span = rebals.agg((F.max(F.unix_millis("start_time")) - F.min(F.unix_millis("start_time"))).alias("s")).first()
    unit = _time_unit(0 if span is None or span["s"] is None else span["s"])
    all_reb = rebals.groupBy(F.date_trunc(unit, "start_time").alias("bucket")).count().orderBy("bucket")

    tables = {
        "top_rebalancing": reb.top_groups.limit(top_n).toPandas(),
        "lag_groups": lag.groups.limit(50).toPandas(),
        "generations": (reb.generations.orderBy(F.desc("start_time")).limit(50)
                        .select("node", "group", "generation", "start_time", "protocol", "leader",
                                "member_count",
                                F.array_join(F.transform("members", lambda m: F.concat(
                                    m["client_id"], F.lit("@"), m["client_host"], F.lit(": "),
                                    m["partitions"].cast("string"))), ", ").alias("members (partitions)"),
                                "ms_to_next_generation", "churn").toPandas()),
        "groups": snap.groups.select("group", "node", "protocol_type", "generation", "protocol",
                                     "member_count", "state_time").orderBy("group").limit(200).toPandas(),
        "offsets": lag.current.orderBy(F.desc("lag")).limit(100).toPandas(),
        "errors": log.errors().limit(50).toPandas(),
        "explained": _explained(log, [r["group"] for r in top_reb.select("group").distinct().collect()],
                                server_logs),
    }
    counts = log.records.groupBy("record_type").count().collect()
    summary = {r["record_type"]: r["count"] for r in counts}
    nodes = [r["node"] for r in log.records.select("node").distinct().orderBy("node").collect()]

    out_dir.mkdir(parents=True, exist_ok=True)
    _plot_rebalances(all_reb.toPandas(), unit, gen_series.toPandas(), out_dir / "rebalances.png")
    _plot_lag(lag_series.toPandas(), out_dir / "lag.png")
    index = out_dir / "index.html"
    index.write_text(_html(nodes, summary, tables), encoding="utf-8")
    return index


def _explained(log: CoordinatorLog, groups: Sequence[str], server_logs: Sequence[str]) -> pd.DataFrame:
    """The latest rebalances of `groups`, explained: the text table's columns, newest first."""
    import pandas as pd

    from pipeline.explain import COLUMNS, text_rows
    from pipeline.explain_job import explain_groups

    spark = log.records.sparkSession
    explanations = [e for e in explain_groups(spark, log, groups, server_logs) if e.generation > 0]
    explanations.sort(key=lambda e: (e.assigned_ms or e.join_completed_ms or 0), reverse=True)
    latest = explanations[:_EXPLAINED_ROWS]
    rows = [(e.group, *row) for e, row in zip(latest, text_rows(latest), strict=True)]
    return pd.DataFrame(rows, columns=["group", *COLUMNS])


_EXPLAINED_ROWS = 40

# --------------------------------------------------------------------------------------------- charts

_UNITS = (("second", 1000), ("minute", 60_000), ("hour", 3_600_000), ("day", 86_400_000))


def _time_unit(span_ms: int) -> str:
    """The finest of second/minute/hour/day that cuts the span into at most 120 bars."""
    for unit, ms in _UNITS:
        if span_ms / ms <= 120:
            return unit
    return "week"


def _label(node: str, group: str, nodes: Sequence[str]) -> str:
    return group if len(set(nodes)) <= 1 else f"{group} ({node.rstrip('/').rsplit('/', 1)[-1]})"


def _figure() -> tuple[object, object]:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a CI runner or a cluster's driver
    import matplotlib.pyplot as plt

    return plt, plt.figure(figsize=(10, 7.5))


def _plot_rebalances(per_bucket: pd.DataFrame, unit: str, series: pd.DataFrame, path: Path) -> None:
    plt, fig = _figure()
    ax1, ax2 = fig.subplots(2, 1)  # type: ignore[attr-defined]
    if len(per_bucket):
        width = dict(_UNITS).get(unit, 7 * 86_400_000) / 86_400_000  # matplotlib dates are in days
        ax1.bar(per_bucket["bucket"], per_bucket["count"], width=width, align="edge")
    ax1.set_title(f"Rebalances per {unit} (all groups)")
    ax1.set_ylabel("new generations")
    nodes = list(series["node"]) if len(series) else []
    for (node, group), g in series.groupby(["node", "group"], sort=True):
        ax2.step(_times(g["ts"]), g["generation"], where="post", label=_label(node, group, nodes))
    ax2.set_title("Generation over time (groups that rebalance most)")
    ax2.set_ylabel("generation")
    if len(series):
        ax2.legend(fontsize="small")
    fig.autofmt_xdate()  # type: ignore[attr-defined]
    fig.tight_layout()  # type: ignore[attr-defined]
    fig.savefig(path, dpi=90)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[attr-defined]


def _plot_lag(series: pd.DataFrame, path: Path) -> None:
    plt, fig = _figure()
    ax = fig.subplots()  # type: ignore[attr-defined]
    nodes = list(series["node"]) if len(series) else []
    for (node, group), g in series.groupby(["node", "group"], sort=True):
        ax.step(_times(g["ts"]), g["total_lag"], where="post", label=_label(node, group, nodes))
    ax.set_title("Total lag over time (records behind the log end, groups with the most lag)")
    ax.set_ylabel("records")
    if len(series):
        ax.legend(fontsize="small")
    fig.autofmt_xdate()  # type: ignore[attr-defined]
    fig.tight_layout()  # type: ignore[attr-defined]
    fig.savefig(path, dpi=90)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[attr-defined]


def _times(ms: pd.Series) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(v / 1000, tz=dt.UTC) for v in ms]


# ----------------------------------------------------------------------------------------------- page

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:13px;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}th{background:#f0f0f0}
img{max-width:100%;border:1px solid #ddd}.bad{color:#b00}"""


def _table(df: pd.DataFrame, empty: str) -> str:
    if not len(df):
        return f"<p><i>{html.escape(empty)}</i></p>"
    return str(df.to_html(index=False, escape=True, na_rep="", border=0))


def _html(nodes: Sequence[str], summary: dict[str, int], t: dict[str, pd.DataFrame]) -> str:
    behind = t["lag_groups"][t["lag_groups"]["falling_behind"]] if len(t["lag_groups"]) else t["lag_groups"]
    errors = summary.get("error", 0)
    node_items = "".join(f"<li><code>{html.escape(n)}</code></li>" for n in nodes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Coordinator log report</title>
<style>{_CSS}</style></head><body>
<h1>Coordinator log report</h1>
<p>Generated {html.escape(dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))} from
{len(nodes)} node(s):</p><ul>{node_items}</ul>
<p>{summary.get("group_metadata", 0)} group metadata records, {summary.get("offset_commit", 0)} offset
commits, {summary.get("consumer_group", 0)} KIP-848 consumer group records (not charted),
{summary.get("other", 0)} records of other types (skipped),
<span class="{"bad" if errors else ""}">{errors} damaged or undecodable entries</span>.</p>

<h2>Rebalances</h2>
<img src="rebalances.png" alt="Rebalances over time">
<h3>Groups that rebalance most</h3>
{_table(t["top_rebalancing"], "No rebalances in these logs.")}
<h3>Latest generations</h3>
{_table(t["generations"], "No group metadata in these logs.")}
<h3>Why groups rebalanced</h3>
<p>The latest rebalances of the groups above: what started each one, the member that caused it, how long
the join phase took, who it waited for, and how long the group was not consuming
(<code>coordinator-server pipeline explain GROUP</code> for one group's whole history). Causes come from
the servers' JSON logs (<code>--server-log</code>); without them only times and membership changes
are known.</p>
{_table(t["explained"], "No rebalances in these logs.")}

<h2>Lag</h2>
<img src="lag.png" alt="Lag over time">
<h3>Groups falling behind</h3>
{_table(behind, "No group is falling behind.")}
<h3>Lag per group</h3>
{_table(t["lag_groups"], "No committed offsets in these logs.")}
<h3>Partitions with the most lag</h3>
{_table(t["offsets"], "No committed offsets in these logs.")}

<h2>Groups now (snapshot)</h2>
{_table(t["groups"], "No groups.")}

<h2>Damage</h2>
{_table(t["errors"], "None: every batch passed its CRC and every record decoded.")}
</body></html>
"""
