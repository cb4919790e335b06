"""The jobs as DataFrame transformations: snapshot, rebalances, lag. Writing them out is `pipeline.cli`'s.

Log order. Within one node a key's records are in one `__consumer_offsets` partition, where the offset
is the order the server applied them in, so "latest" is the greatest (log_partition, offset) — never the
timestamp, which a wall-clock step could reorder. Across nodes there is no shared order, so the latest
is the greatest (timestamp, node) among each node's latest. A group is identified by (node, group) in
the history jobs (two servers' "orders-app" are two groups), and by its name in the snapshot, which is
the merged compacted state of all the logs given.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.reader import CoordinatorLog

_LOG_ORDER = F.struct("log_partition", "offset")


def latest_per_key(df: DataFrame, key: list[str]) -> DataFrame:
    """The latest record per key in log order (see the module docstring), tombstones still in."""
    per_node = latest_per_node(df, key)
    rest = [c for c in per_node.columns if c not in key]
    return (per_node.groupBy(*key).agg(F.max_by(F.struct(*rest), F.struct("timestamp", "node")).alias("r"))
            .select(*key, "r.*"))


# -------------------------------------------------------------------------------------------- snapshot


@dataclass
class Snapshot:
    offsets: DataFrame  # latest committed offset per (group, topic, partition), deleted ones gone
    groups: DataFrame  # latest group metadata per group, deleted groups gone


def snapshot(log: CoordinatorLog) -> Snapshot:
    """The compacted state: what a server replaying these logs would load (`group.loader.GroupLoader`)."""
    offsets = (latest_per_key(log.offset_commits, ["group", "topic", "partition"])
               .filter(~F.col("tombstone")).drop("tombstone", "time")
               .withColumnRenamed("offset", "log_offset")
               .select("group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
                       "commit_time", "expire_time", "node", "log_partition", "log_offset"))
    groups = (latest_per_key(log.group_metadata, ["group"])
              .filter(~F.col("tombstone")).withColumnRenamed("offset", "log_offset")
              .select("group", "protocol_type", "generation", "protocol", "leader",
                      F.size("members").alias("member_count"), "members", "state_time", "node",
                      "log_partition", "log_offset"))
    return Snapshot(offsets, groups)


# ------------------------------------------------------------------------------------------ rebalances


@dataclass
class Rebalances:
    generations: DataFrame  # one row per (node, group, generation)
    hourly: DataFrame  # rebalances per (node, group, hour)
    top_groups: DataFrame  # per (node, group): rebalances, per hour, churn; most first


def _member_key(m: Column) -> Column:
    # A static member keeps its instance id across restarts (and member ids); a dynamic one is its id.
    return F.coalesce(m["group_instance_id"], m["member_id"])


def rebalances(log: CoordinatorLog) -> Rebalances:
    gm = log.group_metadata.filter(~F.col("tombstone"))
    per_gen = gm.groupBy("node", "group", "generation").agg(
        F.min("timestamp").alias("start_ms"),
        F.count("*").alias("records"),
        F.max_by(F.struct("protocol_type", "protocol", "leader", "members"), _LOG_ORDER).alias("r"),
    ).select("node", "group", "generation", "start_ms", "records", "r.*")
    by_group = Window.partitionBy("node", "group").orderBy("generation")
    member_keys = F.array_sort(F.transform("members", _member_key))
    gens = (per_gen
            .withColumn("member_keys", member_keys)
            .withColumn("prev_keys", F.lag("member_keys").over(by_group))
            .withColumn("next_start_ms", F.lead("start_ms").over(by_group))
            .select(
                "node", "group", "generation", F.timestamp_millis("start_ms").alias("start_time"),
                "protocol_type", "protocol", "leader", F.size("members").alias("member_count"),
                F.transform("members", lambda m: F.struct(
                    m["member_id"].alias("member_id"), m["group_instance_id"].alias("group_instance_id"),
                    m["client_id"].alias("client_id"), m["client_host"].alias("client_host"),
                    F.aggregate(F.coalesce(m["assignment"], F.array()), F.lit(0),
                                lambda acc, a: acc + F.size(a["partitions"])).alias("partitions"),
                    m["assignment"].alias("assignment"),
                )).alias("members"),
                (F.col("next_start_ms") - F.col("start_ms")).alias("ms_to_next_generation"),
                F.array_except("member_keys", F.coalesce("prev_keys", F.array().cast("array<string>")))
                .alias("joined"),
                F.array_except(F.coalesce("prev_keys", F.array().cast("array<string>")), "member_keys")
                .alias("left"),
                "records", "start_ms",
            )
            .withColumn("churn", F.size("joined") + F.size("left")))
    # A rebalance is a generation past the group's creation (generation 0 is the Empty group record).
    rebal = gens.filter(F.col("generation") > 0)
    hourly = (rebal.groupBy("node", "group", F.date_trunc("hour", "start_time").alias("hour"))
              .agg(F.count("*").alias("rebalances"), F.sum("churn").alias("churn")))
    span_h = (F.max("start_ms") - F.min("start_ms")) / 3_600_000
    top = (rebal.groupBy("node", "group").agg(
        F.count("*").alias("rebalances"),
        F.max("generation").alias("last_generation"),
        F.sum("churn").alias("member_churn"),
        F.min("start_time").alias("first_rebalance"),
        F.max("start_time").alias("last_rebalance"),
        F.avg("ms_to_next_generation").alias("avg_ms_between_generations"),
        # Over the observed span, counted as at least an hour so a short history is not extrapolated.
        (F.count("*") / F.greatest(span_h, F.lit(1.0))).alias("rebalances_per_hour"),
    ).orderBy(F.desc("rebalances"), "node", "group"))
    return Rebalances(gens.drop("start_ms"), hourly.orderBy("hour", "node", "group"), top)


# ------------------------------------------------------------------------------------------------- lag


@dataclass
class Lag:
    history: DataFrame  # per commit: the partition's log-end offset at that time and the lag
    group_history: DataFrame  # per (node, group) and commit time: total lag over its partitions
    current: DataFrame  # per (node, group, topic, partition): last commit against the final log end
    groups: DataFrame  # per (node, group): current lag, trend, falling_behind; most behind first


def lag(log: CoordinatorLog, min_lag: int = 100) -> Lag:
    """Lag from the commit history against the topic store's log-end offsets.

    The log-end offset of a partition at time t is one past the last offset of the batches whose max
    timestamp is <= t (the producer's CreateTime: a clock of the producer's, not the server's — see
    docs/pipeline.md). Computed as one sort of commits and batches per partition and a running max, not
    a range join, so it stays linear in the history.
    """
    key = ["node", "topic", "partition"]
    batches = (log.topic_batches.filter(F.col("error").isNull() & ~F.col("is_control"))
               .select(*key, F.col("max_timestamp").alias("ts"), F.lit(0).alias("kind"),
                       (F.col("last_offset") + 1).alias("end"), *[F.lit(None).cast(t).alias(c) for c, t in
                       (("group", "string"), ("committed_offset", "long"))]))
    commits = (log.offset_commits.filter(~F.col("tombstone"))
               .select(*key, F.col("timestamp").alias("ts"), F.lit(1).alias("kind"),
                       F.lit(None).cast("long").alias("end"), "group", "committed_offset"))
    running = Window.partitionBy(*key).orderBy("ts", "kind").rowsBetween(Window.unboundedPreceding, 0)
    history = (batches.unionByName(commits)
               .withColumn("log_end_offset", F.coalesce(F.max("end").over(running), F.lit(0)))
               .filter(F.col("kind") == 1)
               .select("node", "group", "topic", "partition", F.timestamp_millis("ts").alias("time"), "ts",
                       "committed_offset", "log_end_offset",
                       F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0)).alias("lag")))
    # A group's total lag over time: each commit changes its partition's lag by (lag - previous lag), so
    # the running sum of those deltas over the group's commits is the sum of every partition's latest lag.
    per_part = Window.partitionBy("node", "group", "topic", "partition").orderBy("ts")
    per_group = Window.partitionBy("node", "group").orderBy("ts", "topic", "partition") \
        .rowsBetween(Window.unboundedPreceding, 0)
    group_history = (history.withColumn("delta", F.col("lag") - F.coalesce(F.lag("lag").over(per_part), F.lit(0)))
                     .withColumn("total_lag", F.sum("delta").over(per_group))
                     .select("node", "group", "time", "ts", "topic", "partition", "total_lag"))
    log_end = (log.topic_batches.filter(F.col("error").isNull())
               .groupBy(*key).agg((F.max("last_offset") + 1).alias("log_end_offset")))
    last_commit = latest_per_node(log.offset_commits, ["group", "topic", "partition"])
    current = (last_commit.filter(~F.col("tombstone"))
               .join(log_end, key, "left")
               .select("node", "group", "topic", "partition", "committed_offset",
                       F.coalesce("log_end_offset", F.lit(0)).alias("log_end_offset"),
                       F.timestamp_millis("timestamp").alias("last_commit_time"))
               .withColumn("lag", F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0))))
    trend = group_history.groupBy("node", "group").agg(
        # Records of lag gained per second over the group's commit history (least squares).
        (F.regr_slope("total_lag", "ts") * 1000).alias("lag_slope_per_s"),
        F.max("total_lag").alias("max_lag"), F.count("*").alias("commits"))
    groups = (current.groupBy("node", "group")
              .agg(F.sum("lag").alias("current_lag"), F.count("*").alias("partitions"),
                   F.max("last_commit_time").alias("last_commit_time"))
              .join(trend, ["node", "group"], "left")
              .withColumn("falling_behind", (F.col("current_lag") >= min_lag)
                          & (F.coalesce("lag_slope_per_s", F.lit(0.0)) > 0))
              .orderBy(F.desc("current_lag"), "node", "group"))
    return Lag(history.drop("ts"), group_history, current, groups)


def latest_per_node(df: DataFrame, key: list[str]) -> DataFrame:
    """The latest record per key within each node, in log order (lag is per node: its own topics)."""
    cols = [c for c in df.columns if c not in key and c != "node"]
    return (df.groupBy("node", *key).agg(F.max_by(F.struct(*cols), _LOG_ORDER).alias("r"))
            .select("node", *key, "r.*"))
