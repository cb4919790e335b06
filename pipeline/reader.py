"""The Spark reader: segment files -> typed DataFrames, decoded in `mapInArrow`.

    log = read_log(spark, ["/data/node-1", "s3a://bucket/node-2"])
    log.group_metadata   # one row per GroupMetadata record (tombstones flagged)
    log.offset_commits   # one row per OffsetCommit record (tombstones flagged)
    log.consumer_groups  # one row per KIP-848 consumer group record (tombstones flagged)
    log.topic_batches    # one row per topic batch header (log-end offsets over time)

The driver lists the segments through Spark's Hadoop filesystem layer (`pipeline.segments`: every URI
Spark can read, with the cluster's configuration and credentials) and plans the tasks. Local segments
(`file:`) are read by the Python workers as byte ranges of whole batches, so a large segment is split
across tasks and no segment travels from the JVM to Python; segments on other filesystems are read whole
with `binaryFile` (docs/pipeline.md#how-segments-are-read). Either way the decode is `pipeline.columns`,
building Arrow batches column-wise.

A path is a data directory (`<dir>/<topic>-<p>/*.log` are read), a partition directory, a segment file,
or any Hadoop glob of those (`/logs/node-*`). Several paths are several nodes; `node` is the data
directory a row came from.
"""
from __future__ import annotations

import gc
import mmap
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from coordinator_server.topics.registry import OFFSETS_TOPIC
from pipeline import segments
from pipeline.schema import RECORD_SCHEMA, TOPIC_BATCH_SCHEMA

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RECORD_SCHEMA", "TOPIC_BATCH_SCHEMA", "CoordinatorLog", "read_log", "read_records",
           "read_topic_batches", "segment_globs"]

_OFFSETS_PARTITION_DIR = re.compile(r"^__consumer_offsets-\d+$")
_ROWS_PER_ARROW_BATCH = 4096
Tasks = list[list[segments.Range]]


def segment_globs(paths: Sequence[str], offsets_only: bool = False) -> list[str]:
    """The Hadoop globs of every segment under each path.

    A path ending in `.log` is a segment (or a glob of them: `data/__consumer_offsets-7/*.log`), a
    `__consumer_offsets-N` directory is that partition's segments, anything else is a data directory.
    Nothing is guessed from a name like `node-1`, which looks like a partition directory too.
    """
    globs = []
    for p in paths:
        p = p.rstrip("/")
        if p.endswith(".log"):
            globs.append(p)
        elif _OFFSETS_PARTITION_DIR.match(p.rsplit("/", 1)[-1]):
            globs.append(p + "/*.log")
        else:
            globs.append(p + ("/__consumer_offsets-*/*.log" if offsets_only else "/*/*.log"))
    return globs


def _listed(spark: SparkSession, paths: Sequence[str], offsets: bool) -> list[segments.Segment]:
    """The segments to read: the offsets reader globs only `__consumer_offsets-*` (it never lists topic
    data), the topic reader every partition directory but the offsets ones; files that are not a
    partition's segment (a deleted topic's directory) are left out."""
    from pipeline import decode

    found = []
    for seg in segments.list_segments(spark, segment_globs(paths, offsets_only=offsets)):
        where = decode.parse_segment_path(seg.uri)
        if where is not None and (where.topic == OFFSETS_TOPIC) == offsets:
            found.append(seg)
    return found


def _read(spark: SparkSession, listed: list[segments.Segment], schema: StructType,
          decode: Callable[[Tasks | None, Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]) -> DataFrame:
    """Local segments as planned tasks of byte ranges, read by the workers; others through binaryFile.
    `decode(tasks, batches)` gets the tasks with the task ids, or None with binaryFile's rows."""
    conf = spark._jsparkSession.sessionState().conf()  # type: ignore[attr-defined]
    split = spark.conf.get(segments.SPLIT_CONF, "true").lower() != "false"  # type: ignore[union-attr]
    tasks = segments.plan_tasks(listed, spark.sparkContext.defaultParallelism, conf.filesMaxPartitionBytes(),
                                split)
    frames = []
    if tasks:
        # One id per task, one task per partition: the ids pick the task's ranges, shipped in the closure.
        ids = spark.range(0, len(tasks), 1, numPartitions=len(tasks))
        frames.append(ids.mapInArrow(partial(decode, tasks), schema))
    remote = [s.uri for s in listed if segments.local_path(s.uri) is None]
    if remote:
        frames.append(spark.read.format("binaryFile").load(remote).select("path", "content")
                      .mapInArrow(partial(decode, None), schema))
    if not frames:
        return spark.createDataFrame([], schema)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def _sources(tasks: Tasks | None, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[Any, Any, int, int]]:
    """(where, content, start, end) to decode: the ranges of this task's ids, each segment mmapped
    read-only, or (tasks None) binaryFile's whole segments."""
    from pipeline import decode

    for batch in batches:
        if tasks is None:
            for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist(),
                                     strict=True):
                where = decode.parse_segment_path(path)
                if where is not None:
                    yield where, content, 0, len(content)
            continue
        for task in batch.column("id").to_pylist():
            for uri, start, end in tasks[task]:
                where = decode.parse_segment_path(uri)
                path = segments.local_path(uri)
                assert where is not None and path is not None
                with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as content:
                    yield where, content, start, end


def _settle_worker() -> None:
    """Leave what the Python worker holds now (modules, the key cache) out of its garbage collections:
    PySpark's worker runs a full `gc.collect()` after every task, which walked the ~200,000 objects of
    pyarrow, numpy and pandas each time (~10% of a 2M-record decode's Python CPU in 5 tasks)."""
    gc.freeze()


def _decode_offsets(tasks: Tasks | None, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pipeline import columns  # imported on the executor

    _settle_worker()
    for where, content, start, end in _sources(tasks, batches):
        yield from columns.offsets_batches(where, content, start, end)


def _decode_topic_batches(tasks: Tasks | None, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pipeline import decode

    _settle_worker()

    def rows() -> Iterator[dict[str, object]]:
        for where, content, start, end in _sources(tasks, batches):
            yield from decode.topic_batch_rows(where, content, start, end)

    return _to_arrow(rows(), TOPIC_BATCH_SCHEMA)


def _to_arrow(rows: Iterator[dict[str, object]], schema: StructType) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    chunk: list[dict[str, object]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= _ROWS_PER_ARROW_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)


def read_records(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Every `__consumer_offsets` record under `paths`, raw (RECORD_SCHEMA), including `error` rows."""
    return _read(spark, _listed(spark, paths, offsets=True), RECORD_SCHEMA, _decode_offsets)


def read_topic_batches(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """One row per topic batch header under `paths` (TOPIC_BATCH_SCHEMA), including `error` rows."""
    return _read(spark, _listed(spark, paths, offsets=False), TOPIC_BATCH_SCHEMA, _decode_topic_batches)


def _ms(name: str) -> Column:
    return F.timestamp_millis(F.col(name))


def group_metadata(records: DataFrame) -> DataFrame:
    """GroupMetadata records: group, generation, protocol, leader, members (client id/host, subscription,
    assignment per member decoded from the consumer protocol), timestamps; `tombstone` for deletions."""
    return records.filter(F.col("record_type") == "group_metadata").select(
        "node", "log_partition", "offset", "timestamp", _ms("timestamp").alias("time"), "group", "tombstone",
        "protocol_type", "generation", "protocol", "leader", "state_timestamp",
        _ms("state_timestamp").alias("state_time"), "members",
    )


def offset_commits(records: DataFrame) -> DataFrame:
    """OffsetCommit records: group, topic, partition, offset, leader epoch, metadata, commit and expiry
    timestamps; `tombstone` for deleted or expired offsets."""
    return records.filter(F.col("record_type") == "offset_commit").select(
        "node", "log_partition", "offset", "timestamp", _ms("timestamp").alias("time"), "group", "topic",
        "partition", "tombstone", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
        _ms("commit_timestamp").alias("commit_time"), "expire_timestamp",
        _ms("expire_timestamp").alias("expire_time"),
    )


def consumer_groups(records: DataFrame) -> DataFrame:
    """KIP-848 consumer group records (ConsumerGroup*): `consumer_record` names which one; group, member,
    epoch (group, target assignment or member epoch), member type and subscription, assignment by topic id;
    `tombstone` for deletions. Offsets of these groups are ordinary OffsetCommit records."""
    return records.filter(F.col("record_type") == "consumer_group").select(
        "node", "log_partition", "offset", "timestamp", _ms("timestamp").alias("time"), "group", "tombstone",
        "consumer_record", "key_version", "member_id", "epoch", "member_type", "regex", "client_id",
        "client_host", "group_instance_id", "subscribed_topics", "consumer_assignment",
    )


@dataclass
class CoordinatorLog:
    records: DataFrame  # raw, cached: the two typed views below share one decode
    topic_batches: DataFrame

    @property
    def group_metadata(self) -> DataFrame:
        return group_metadata(self.records)

    @property
    def offset_commits(self) -> DataFrame:
        return offset_commits(self.records)

    @property
    def consumer_groups(self) -> DataFrame:
        return consumer_groups(self.records)

    def errors(self) -> DataFrame:
        """Damaged batches and undecodable records, from both logs."""
        offsets = self.records.filter(F.col("record_type") == "error").select(
            "node", F.concat(F.lit("__consumer_offsets-"), F.col("log_partition")).alias("where"),
            "position", "error")
        topics = self.topic_batches.filter(F.col("error").isNotNull()).select(
            "node", F.concat_ws("-", "topic", F.col("partition").cast("string")).alias("where"),
            "position", "error")
        return offsets.unionByName(topics)


def read_log(spark: SparkSession, paths: Sequence[str], with_topics: bool = True) -> CoordinatorLog:
    records = read_records(spark, paths).cache()
    topics = read_topic_batches(spark, paths) if with_topics else spark.createDataFrame([], TOPIC_BATCH_SCHEMA)
    return CoordinatorLog(records, topics.cache())
