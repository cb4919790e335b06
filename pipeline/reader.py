"""The Spark reader: segment files -> typed DataFrames, with `binaryFile` + `mapInArrow`.

    log = read_log(spark, ["/data/node-1", "s3a://bucket/node-2"])
    log.group_metadata   # one row per GroupMetadata record (tombstones flagged)
    log.offset_commits   # one row per OffsetCommit record (tombstones flagged)
    log.consumer_groups  # one row per KIP-848 consumer group record (tombstones flagged)
    log.topic_batches    # one row per topic batch header (log-end offsets over time)

Why `binaryFile` and not a Python data source (`spark.read.format("coordinator-log")`), see
docs/pipeline.md#why-binaryfile: Spark's own file index lists and reads the files, so every URI Spark can
read (file:, hdfs:, s3a:, abfss:, gs:) works with the cluster's Hadoop configuration and credentials, and
listing many node directories is parallel; a Python data source would have to list and open files
itself (fsspec/pyarrow.fs with credentials of its own). Both give one task per segment; `mapInArrow` keeps
the decode in vectorised Arrow batches and also works over Spark Connect (no RDD API).

A path is a data directory (`<dir>/<topic>-<p>/*.log` are read), a partition directory, a segment file,
or any Hadoop glob of those (`/logs/node-*`). Several paths are several nodes; `node` is the data
directory a row came from.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    import pyarrow as pa

def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, t, True) for name, t in fields])


_S, _I, _L, _B = StringType(), IntegerType(), LongType(), BooleanType()
_MEMBER = _struct(
    ("member_id", _S), ("group_instance_id", _S), ("client_id", _S), ("client_host", _S),
    ("rebalance_timeout_ms", _I), ("session_timeout_ms", _I), ("subscribed_topics", ArrayType(_S)),
    ("assignment", ArrayType(_struct(("topic", _S), ("partitions", ArrayType(_I))))), ("protocol_error", _S),
)

# One row per `__consumer_offsets` record; fields a record type lacks are null. `log_partition`/`offset`
# are its place in the log (the order records apply in); `position` the byte position of its batch.
# Built from types, not DDL: parsing DDL needs a JVM, and the executors' Python workers have none.
RECORD_SCHEMA = _struct(
    ("node", _S), ("log_partition", _I), ("segment", _L), ("offset", _L), ("position", _L), ("timestamp", _L),
    ("record_type", _S), ("group", _S), ("tombstone", _B),
    ("topic", _S), ("partition", _I), ("committed_offset", _L), ("leader_epoch", _I), ("metadata", _S),
    ("commit_timestamp", _L), ("expire_timestamp", _L),
    ("protocol_type", _S), ("generation", _I), ("protocol", _S), ("leader", _S), ("state_timestamp", _L),
    ("members", ArrayType(_MEMBER)), ("key_version", _I), ("error", _S),
    # KIP-848 consumer group records (record_type "consumer_group"; `consumer_record` says which one).
    ("consumer_record", _S), ("member_id", _S), ("epoch", _I), ("member_type", _S), ("regex", _S),
    ("client_id", _S), ("client_host", _S), ("group_instance_id", _S), ("subscribed_topics", ArrayType(_S)),
    ("consumer_assignment", ArrayType(_struct(("topic_id", _S), ("partitions", ArrayType(_I))))),
)

TOPIC_BATCH_SCHEMA = _struct(
    ("node", _S), ("topic", _S), ("partition", _I), ("position", _L), ("base_offset", _L),
    ("last_offset", _L), ("records", _I), ("first_timestamp", _L), ("max_timestamp", _L),
    ("is_control", _B), ("error", _S),
)

_OFFSETS_PARTITION_DIR = re.compile(r"^__consumer_offsets-\d+$")
_OFFSETS_DIR = "/__consumer_offsets-"
_ROWS_PER_ARROW_BATCH = 4096


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


def _segments(spark: SparkSession, paths: Sequence[str], offsets: bool) -> DataFrame:
    # The offsets reader globs only `__consumer_offsets-*` (so it never reads topic data); the topic
    # reader globs every partition directory, which always matches in a data directory even before any
    # topic exists (an empty glob is an error in Spark), and drops the offsets segments.
    df = spark.read.format("binaryFile").load(segment_globs(paths, offsets_only=offsets))
    on_offsets = F.col("path").contains(_OFFSETS_DIR)
    return df.filter(on_offsets if offsets else ~on_offsets).select("path", "content")


def _decode_offsets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pipeline import decode  # imported on the executor

    def rows() -> Iterator[dict[str, object]]:
        for batch in batches:
            for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist(),
                                     strict=True):
                where = decode.parse_segment_path(path)
                if where is not None:
                    yield from decode.offsets_rows(where, content)

    return _to_arrow(rows(), RECORD_SCHEMA)


def _decode_topic_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pipeline import decode

    def rows() -> Iterator[dict[str, object]]:
        for batch in batches:
            for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist(),
                                     strict=True):
                where = decode.parse_segment_path(path)
                if where is not None and where.topic != decode.OFFSETS_TOPIC:
                    yield from decode.topic_batch_rows(where, content)

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
    return _segments(spark, paths, offsets=True).mapInArrow(_decode_offsets, RECORD_SCHEMA)


def read_topic_batches(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """One row per topic batch header under `paths` (TOPIC_BATCH_SCHEMA), including `error` rows."""
    return _segments(spark, paths, offsets=False).mapInArrow(_decode_topic_batches, TOPIC_BATCH_SCHEMA)


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
