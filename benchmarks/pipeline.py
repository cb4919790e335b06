"""The `pipeline` scenario: the Spark pipeline's decode of `__consumer_offsets` against the server's own
start-up replay of the same log, per CPU second, and one large segment split across tasks against read whole.

    python -m benchmarks.pipeline replay DATA_DIR          the replay in this process; prints its CPU time
    python -m benchmarks.pipeline decode DATA_DIR [whole]  the decode job in local[*]; prints the CPU time
                                                           of this process, the Spark JVM and its Python workers

Each side runs in a process of its own. The replay is `storage.replay.LatestRecords` over every partition's
`checked_batches` (what `CoordinatorLog.replay_latest` runs at start-up: CRC checks, record framing, every
key, the surviving values), its CPU from `getrusage(RUSAGE_SELF)` around it. The decode is
`pipeline.reader.read_records` written to Spark's `noop` sink, so every row is decoded and handed to the
JVM and nothing is written; its CPU is that of the driver's whole process tree (driver, JVM, the Python
daemon and workers, from /proc, exited workers included through their parents' `cutime`), read right
before and right after the job, so the JVM's start-up is not counted but all of the job's work is.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .procs import run_json

KEYS = 20_000  # 200 groups x 100 partitions: the brief's `preload commits DIR N 20000`
_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its waited-for children) from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After "pid (comm)": state ppid ... utime(14) stime(15) cutime(16) cstime(17), 1-based from pid.
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / _TICKS


def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and every live descendant (each with its exited, waited-for children)."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo += children.get(pid, [])
    return total


def replay_main(data_dir: Path) -> dict[str, Any]:
    from coordinator_server.storage.log import PartitionLog
    from coordinator_server.storage.replay import LatestRecords

    partitions = sorted(int(d.name.rsplit("-", 1)[1]) for d in data_dir.glob("__consumer_offsets-*"))
    logs = [(p, PartitionLog.open(data_dir, p)) for p in partitions]  # recovery is not the replay
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    records = 0
    for p, plog in logs:
        latest = LatestRecords(p)
        latest.add_batches(plog.checked_batches())
        for _ in latest.records():
            pass
        records += latest.records_read
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    for _, plog in logs:
        plog.close()
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"records": records, "cpu_s": cpu, "wall_s": wall}


def decode_main(data_dir: Path, whole: bool) -> dict[str, Any]:
    from pipeline.cli import spark_session
    from pipeline.reader import read_records
    from pipeline.segments import SPLIT_CONF

    spark = spark_session(None, [f"{SPLIT_CONF}={'false' if whole else 'true'}", "spark.ui.enabled=false"],
                          "bench-pipeline")
    try:
        # Start the Python workers first, one per core, and import the decoder in them (a tiny job): the
        # JVM's and the workers' start-up and imports are not the decode, as the replay's imports are not
        # the replay. (With PYTHONDONTWRITEBYTECODE set, as here, every import compiles from source.)
        cores = spark.sparkContext.defaultParallelism
        spark.range(0, cores, 1, cores).mapInArrow(_import_decoder, "id long").write.format("noop") \
            .mode("overwrite").save()
        cpu, started = tree_cpu_s(os.getpid()), time.perf_counter()
        df = read_records(spark, [str(data_dir)])
        df.write.format("noop").mode("overwrite").save()
        wall = time.perf_counter() - started
        cpu = tree_cpu_s(os.getpid()) - cpu
        tasks = df.rdd.getNumPartitions()
    finally:
        spark.stop()
    return {"cpu_s": cpu, "wall_s": wall, "tasks": tasks, "cores": len(os.sched_getaffinity(0))}


def _import_decoder(batches: Iterator[Any]) -> Iterator[Any]:
    # The imports are the point: the measured job then finds them done in every worker. pandas too:
    # pyarrow imports it at its first conversion of any array (~0.3 s of a worker's start-up).
    import pandas  # noqa: F401

    import pipeline.columns
    import pipeline.reader  # noqa: F401

    return batches


def _child(*args: str) -> dict[str, Any]:
    """`python -m benchmarks.pipeline ARGS` with the CPU of the whole subprocess tree that was waited for
    (RUSAGE_CHILDREN; includes the JVM's start-up), beside what the child measured itself."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_json("benchmarks.pipeline", *args, timeout_s=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["process_cpu_s"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return result


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median CPU (runs of one side, alternated with the other side's)."""
    return sorted(runs, key=lambda r: r["cpu_s"])[len(runs) // 2]


def run(quick: bool, work: Path) -> dict[str, Any]:
    # `make bench-quick` stays within its few minutes: one small log, one run each way. The 2M log's decode
    # is a 2-second job whose CPU moved by ±10% from run to run on a quiet machine (3.65-4.52 CPU-s in seven
    # runs): both sides are run three times, alternated, and the median of each counts. The 20M log's runs
    # take minutes and move less: once each.
    sizes = [200_000] if quick else [2_000_000, 20_000_000]
    logs = []
    for records in sizes:
        data = work / f"pipeline-{records}"
        shutil.rmtree(data, ignore_errors=True)
        written = run_json("benchmarks.preload", "commits", str(data), str(records), str(KEYS), timeout_s=3600)
        repeats = 3 if records <= 2_000_000 and not quick else 1
        replays, decodes = [], []
        for _ in range(repeats):
            replays.append(_child("replay", str(data)))
            decodes.append(_child("decode", str(data)))
        replay, decode = _median_run(replays), _median_run(decodes)
        segments = len(list(data.glob("__consumer_offsets-*/*.log")))
        shutil.rmtree(data, ignore_errors=True)
        replay_rate = written["records"] / replay["cpu_s"]
        decode_rate = written["records"] / decode["cpu_s"]
        logs.append({"records": written["records"], "bytes": written["bytes"], "segments": segments,
                     "replay": replay, "decode": decode, "replay_records_per_cpu_s": replay_rate,
                     "decode_records_per_cpu_s": decode_rate, "decode_records_per_s": written["records"] / decode["wall_s"],
                     "decode_vs_replay": decode_rate / replay_rate,
                     "replay_cpu_s_runs": [r["cpu_s"] for r in replays],
                     "decode_cpu_s_runs": [r["cpu_s"] for r in decodes]})
    return {"logs": logs, "split": split_vs_whole(sizes[0], work, repeats=1 if quick else 2)}


def split_vs_whole(records: int, work: Path, repeats: int = 2) -> dict[str, Any]:
    """One group's commits in one partition, in one segment (1 GiB segments): read whole it is one task on
    one core; split, it is cut by the batch-header walk into tasks for every core. Best of `repeats`,
    interleaved, for the wall time (other work on the machine only ever slows a run down)."""
    data = work / "pipeline-one-segment"
    shutil.rmtree(data, ignore_errors=True)
    written = run_json("benchmarks.preload", "commits", str(data), str(records), "100", str(1 << 30), timeout_s=3600)
    runs: dict[str, list[dict[str, Any]]] = {"whole": [], "split": []}
    for _ in range(repeats):
        runs["whole"].append(_child("decode", str(data), "whole"))
        runs["split"].append(_child("decode", str(data)))
    segment = max(data.glob("__consumer_offsets-*/*.log"), key=lambda p: p.stat().st_size).stat().st_size
    shutil.rmtree(data, ignore_errors=True)
    best = {k: min(runs[k], key=lambda r: r["wall_s"]) for k in runs}
    return {"records": written["records"], "segment_bytes": segment, "runs": runs,
            "whole_s": best["whole"]["wall_s"], "split_s": best["split"]["wall_s"],
            "whole_tasks": best["whole"]["tasks"], "split_tasks": best["split"]["tasks"],
            "split_speedup": best["whole"]["wall_s"] / best["split"]["wall_s"]}


def main() -> None:
    what, data_dir = sys.argv[1], Path(sys.argv[2])
    result = replay_main(data_dir) if what == "replay" else decode_main(data_dir, sys.argv[3:] == ["whole"])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
