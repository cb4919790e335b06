"""Which segments a job reads and how they are cut into Spark tasks: the driver's side of `pipeline.reader`.

Listing. The segment globs are expanded on the driver before anything is handed to Spark, so nothing
reaches a Spark job unless it exists: a glob that matches nothing, a data directory with no topic logs,
an empty partition are "no segments", never a `FileNotFoundException` out of a job. A local glob (no
scheme, or `file:`) is expanded by Python's `glob` (`*`, `?`, `[...]`; ~5 ms for 400 segments, where a
round trip to the JVM per file took ~0.3-1 s of CPU); one with Hadoop's `{a,b}`, or on any other
filesystem, by Hadoop's `FileSystem.globStatus` through the session's JVM — the filesystem layer,
configuration and credentials `binaryFile` uses. Either way a segment is named by its URI as Spark lists
it (`file:/data/node-1/...`), which is what `node` is made of.

Reading. A segment on the local filesystem (a `file:` URI: a path without a scheme is one) is read by the
Python worker itself, through `mmap`, as byte ranges: a task touches only the pages of its ranges and no
segment is shipped from the JVM to Python. A segment anywhere else (`hdfs:`, `s3a:`, ...) is read whole
through `binaryFile`, one row per segment, as before: only the JVM has the credentials for those stores.

Splitting. A local segment larger than the split size is cut into ranges of whole batches: the cut points
come from walking the batch headers (through `mmap`, the header of each batch only, not the records), which
is the walk the decoder makes, so a range ends exactly where the decoder of the whole segment would step
to the next batch — a CRC-damaged batch keeps its trusted length, and an untrustworthy header stops the
walk, leaving it and the rest of the file in the last range, where it becomes the same one error row.
(The sparse `.index` file would give positions without reading the segment, but a stale or torn index is
possible — the server rebuilds it then — and a wrong cut would change the rows; the header walk cannot be
wrong, and costs ~0.5 µs a batch on the driver.)

Tasks. Ranges are packed into tasks as Spark packs file splits (`FilePartition`: largest first, next
fit, each range also counted with an open cost), aiming at `TASKS_PER_CORE` tasks per core of the same
size: few tasks, because each costs ~80 ms of CPU in the JVM and the worker whatever it reads, and more
than one per core so that a core slowed by other work is evened out. A task never reads more than
`spark.sql.files.maxPartitionBytes`. The open cost is ours, not `spark.sql.files.openCostInBytes` (4 MiB,
a remote store's): opening and mapping a local segment is ~50 µs, what the decoder reads in 64 KiB.
`spark.coordinator.pipeline.splitSegments=false` reads each segment whole (the benchmarks compare the two).
"""
from __future__ import annotations

import glob
import itertools
import mmap
import os
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pipeline.decode import header_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPLIT_CONF = "spark.coordinator.pipeline.splitSegments"
TASKS_PER_CORE = 2
LOCAL_OPEN_COST = 64 << 10
_LOG_OVERHEAD = 12
_LENGTH = struct.Struct(">i")


class Segment(NamedTuple):
    uri: str  # as Hadoop lists it
    size: int


class Range(NamedTuple):
    uri: str
    start: int  # byte position of the first batch
    end: int  # one past the last batch (the segment's size for the last range)


class InputError(ValueError):
    """A path Spark cannot list (unknown scheme, no access): the message is Hadoop's, without its stack."""


def list_segments(spark: SparkSession, globs: Sequence[str]) -> list[Segment]:
    """Every file the globs match, sorted by URI; a glob that matches nothing adds nothing."""
    found: dict[str, int] = {}
    for pattern in globs:
        local = _local_pattern(pattern)
        if local is not None and "{" not in local:
            for path in glob.glob(local):
                if os.path.isfile(path):
                    found["file:" + path] = os.path.getsize(path)
        else:
            found.update(_hadoop_glob(spark, pattern))
    return [Segment(uri, size) for uri, size in sorted(found.items())]


def _local_pattern(pattern: str) -> str | None:
    """The absolute local path of a glob without a scheme or with `file:`, None for another scheme."""
    if "://" not in pattern and not pattern.startswith("file:"):
        return os.path.abspath(pattern) if ":" not in pattern.split("/", 1)[0] else None
    path = local_path(pattern)
    return None if path is None else os.path.abspath(path)


def _hadoop_glob(spark: SparkSession, pattern: str) -> dict[str, int]:
    from py4j.protocol import Py4JJavaError

    jvm: Any = spark._jvm  # a classic session's gateway (docs/pipeline.md#how-segments-are-read)
    try:
        path = jvm.org.apache.hadoop.fs.Path(pattern)
        statuses = path.getFileSystem(spark._jsc.hadoopConfiguration()).globStatus(path)  # type: ignore[attr-defined]
    except Py4JJavaError as e:
        raise InputError(f"{pattern}: {e.java_exception.toString()}") from None
    # null when a path without wildcards does not exist
    return {st.getPath().toString(): st.getLen() for st in statuses or [] if st.isFile()}


def local_path(uri: str) -> str | None:
    """The local filesystem path of a `file:` URI as Hadoop lists it, None for any other scheme."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return None


def task_bytes(total_bytes: int, ranges: int, parallelism: int, max_partition_bytes: int) -> int:
    """The bytes a task is planned to read: `TASKS_PER_CORE` tasks a core, at most maxPartitionBytes."""
    per_task = (total_bytes + ranges * LOCAL_OPEN_COST) // max(1, parallelism * TASKS_PER_CORE)
    return min(max_partition_bytes, max(LOCAL_OPEN_COST, per_task))


def batch_cuts(path: str, size: int, every: int) -> list[int]:
    """Batch start positions, about `every` bytes apart, at which `path` can be cut (0 excluded)."""
    cuts: list[int] = []
    pos, last = 0, 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as content:
        size = min(size, len(content))
        while pos < size:
            # The decoder's own check, so the walk stops exactly where the decoder's would.
            if header_problem(content, pos, size) is not None:
                break
            if pos - last >= every:
                cuts.append(pos)
                last = pos
            pos += _LOG_OVERHEAD + _LENGTH.unpack_from(content, pos + 8)[0]
    return cuts


def segment_ranges(segment: Segment, every: int | None) -> list[Range]:
    """The segment as ranges of whole batches of about `every` bytes (one range when None or small)."""
    path = local_path(segment.uri)
    if every is None or path is None or segment.size <= every:
        return [Range(segment.uri, 0, segment.size)]
    bounds = [0, *batch_cuts(path, segment.size, every), segment.size]
    return [Range(segment.uri, a, b) for a, b in itertools.pairwise(bounds)]


def plan_tasks(segments: Sequence[Segment], parallelism: int, max_partition_bytes: int,
               split: bool = True) -> list[list[Range]]:
    """Local segments as Spark tasks, each a list of ranges (see the module docstring)."""
    local = [s for s in segments if local_path(s.uri) is not None and s.size > 0]
    if not local:
        return []
    most = task_bytes(sum(s.size for s in local), len(local), parallelism, max_partition_bytes)
    ranges = [r for s in local for r in segment_ranges(s, most if split else None)]
    ranges.sort(key=lambda r: r.end - r.start, reverse=True)
    tasks: list[list[Range]] = []
    current: list[Range] = []
    current_bytes = 0
    for r in ranges:  # Spark's next-fit packing (FilePartition.getFilePartitions)
        if current and current_bytes + (r.end - r.start) > most:
            tasks.append(current)
            current, current_bytes = [], 0
        current.append(r)
        current_bytes += r.end - r.start + LOCAL_OPEN_COST
    tasks.append(current)
    return tasks
