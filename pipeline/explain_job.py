"""The explainer's Spark side: one group's GroupMetadata records and the server's JSON log lines about it
in, `pipeline.explain` over them, `explain/generations` (Parquet) and a text table out.

    coordinator-server pipeline explain GROUP PATH... [--server-log FILE]... [--out DIR]

The logs are read with `spark.read.json` (any Spark URI or glob, like the segments) and filtered to the
group's rebalance lines on the executors; only the group's records and lines reach the driver, where the
logic runs — a group's history is small even when the log is not. The report asks the same for the
groups that rebalance most.
"""
from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, IntegerType, LongType, StringType

from pipeline.explain import SERVER_LOG_EVENTS, Explanation, GroupRecord, Member, ServerEvent, explain
from pipeline.reader import CoordinatorLog
from pipeline.schema import nullable_struct as _struct
from pipeline.segments import list_segments

_S, _I, _L, _B = StringType(), IntegerType(), LongType(), BooleanType()

# The fields of the coordinator's rebalance lines that the explainer reads (rebalance_trace.py); a line
# without one has it null, and a line that is not JSON (a traceback) is all null and dropped.
SERVER_LOG_SCHEMA = _struct(
    ("event", _S), ("timestamp", _S), ("group_id", _S), ("generation", _I), ("trigger", _S), ("member_id", _S),
    ("client_id", _S), ("group_instance_id", _S), ("reason", _S), ("cause", _S), ("old_member_id", _S),
    ("old_client_id", _S), ("state", _S), ("join_ms", _L), ("rebalance_ms", _L), ("sync_ms", _L), ("ended_by", _S),
    ("last_joined_member_id", _S), ("last_joined_client_id", _S), ("last_joined_after_ms", _L),
    ("not_rejoined", ArrayType(_S)),
)

_CHANGE = ArrayType(_struct(("member_id", _S), ("group_instance_id", _S), ("client_id", _S), ("cause", _S),
                            ("old_member_id", _S)))
# explain/generations, one row per generation (and per in-place static replacement, `rebalanced` false).
EXPLANATION_SCHEMA = _struct(
    ("node", _S), ("group", _S), ("generation", _I), ("rebalanced", _B), ("cause_source", _S), ("trigger", _S),
    ("trigger_member_id", _S), ("trigger_client_id", _S), ("trigger_instance_id", _S), ("reason", _S),
    ("rebalance_start_ms", _L), ("join_completed_ms", _L), ("assigned_ms", _L), ("join_ms", _L), ("sync_ms", _L),
    ("not_consuming_ms", _L), ("ended_by", _S), ("last_joined_member_id", _S), ("last_joined_client_id", _S),
    ("last_joined_after_ms", _L), ("not_rejoined", _CHANGE), ("leader", _S), ("protocol", _S),
    ("member_count", _I), ("joined", _CHANGE), ("left", _CHANGE), ("replaced", _CHANGE),
    ("subscription_changed", _CHANGE), ("in_segments", _B),
)


def read_server_log(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The coordinator's rebalance lines in JSON logs (`--log-format json`): event, time_ms, group_id, ..."""
    # Globs are listed first, as the segments' are: a glob that matches nothing (a node that kept no log)
    # is no lines, not a Java stack trace from Spark's file index.
    files = [f.uri for f in list_segments(spark, paths)]
    df = (spark.read.schema(SERVER_LOG_SCHEMA).json(files) if files
          else spark.createDataFrame([], SERVER_LOG_SCHEMA))
    return (df.filter(F.col("event").isin(*SERVER_LOG_EVENTS) & F.col("group_id").isNotNull())
            .withColumn("time_ms", F.unix_millis(F.to_timestamp("timestamp"))))


def collect_records(log: CoordinatorLog, groups: Sequence[str]) -> list[GroupRecord]:
    rows = (log.group_metadata.filter(F.col("group").isin(*groups))
            .select("node", "group", "log_partition", "offset", "timestamp", "tombstone", "generation", "protocol",
                    "leader", "state_timestamp", "members").collect())
    return [GroupRecord(r["node"], r["group"], r["log_partition"], r["offset"], r["timestamp"], bool(r["tombstone"]),
                        r["generation"], r["protocol"], r["leader"], r["state_timestamp"],
                        tuple(Member(m["member_id"], m["group_instance_id"], m["client_id"],
                                     None if m["subscribed_topics"] is None else tuple(m["subscribed_topics"]))
                              for m in r["members"] or ()))
            for r in rows]


def collect_events(spark: SparkSession, server_logs: Sequence[str], groups: Sequence[str]) -> list[ServerEvent]:
    if not server_logs:
        return []
    rows = read_server_log(spark, server_logs).filter(F.col("group_id").isin(*groups)).collect()
    return [ServerEvent(r["group_id"], r["event"], r["time_ms"], r["generation"],
                        {k: v for k, v in r.asDict().items() if v is not None})
            for r in rows if r["time_ms"] is not None]


def explain_groups(spark: SparkSession, log: CoordinatorLog, groups: Sequence[str],
                   server_logs: Sequence[str] = ()) -> list[Explanation]:
    return explain(collect_records(log, groups), collect_events(spark, server_logs, groups))


def explanations_frame(spark: SparkSession, explanations: Sequence[Explanation]) -> DataFrame:
    """As written to explain/generations: the epoch-ms instants become timestamps (`*_time`)."""
    df = spark.createDataFrame([e.as_row() for e in explanations], EXPLANATION_SCHEMA)
    for name in ("rebalance_start", "join_completed", "assigned"):
        df = df.withColumn(f"{name}_time", F.timestamp_millis(f"{name}_ms")).drop(f"{name}_ms")
    return df
