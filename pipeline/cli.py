"""`coordinator-server pipeline JOB PATH... --out DIR`: the Spark jobs over coordinator logs.

    coordinator-server pipeline decode     PATH... --out OUT           (the typed records, tombstones flagged)
    coordinator-server pipeline snapshot   build/pipeline/demo/node-0 build/pipeline/demo/node-1 --out OUT
    coordinator-server pipeline rebalances PATH... --out OUT
    coordinator-server pipeline lag        PATH... --out OUT [--min-lag 100]
    coordinator-server pipeline report     PATH... --out OUT [--top 8]
    coordinator-server pipeline all        PATH... --out OUT           (all five, one Spark session)
    coordinator-server pipeline explain GROUP PATH... [--server-log FILE]... [--out OUT]
                                               (why each generation of GROUP rebalanced: a table on stdout)

(`demo-data` and `cluster-run` are subcommands of the command, `pipeline.main`, not jobs.)

Each PATH is a data directory (one per node), an `__consumer_offsets-N` directory or segment files, on
any filesystem Spark reads (file:, hdfs:, s3a:, ...), globs allowed. Results are Parquet under
OUT/<job>/ (the report: OUT/report/index.html).

Runs Spark in `local[*]` unless `--master` says otherwise. Under spark-submit the file itself is the
application (`spark-submit --master yarn .../pipeline/cli.py snapshot ...`): spark-submit's master and
configuration are then kept, never overridden here (docs/pipeline.md).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipeline.reader import CoordinatorLog

PROG = "coordinator-server pipeline"
# Arrow Java's per-access checks, off in the JVMs that read the decoder's Arrow batches (Spark turns every
# value of every row into its own row format through ArrowColumnVector): the bounds and reference-count check
# of each buffer read, and the null check of each `get` — Spark asks `isNullAt` first. With them on they
# were ~6-10% of the JVM's CPU in a 2M-commit decode (docs/pipeline.md#speed). The batches come from this
# package's own pyarrow, whole. (Java system property, its environment variable, value.)
ARROW_UNCHECKED = (("arrow.enable_unsafe_memory_access", "ARROW_ENABLE_UNSAFE_MEMORY_ACCESS", "true"),
                   ("arrow.enable_null_check_for_get", "ARROW_ENABLE_NULL_CHECK_FOR_GET", "false"))
# C2, the JIT's optimising compiler, takes a method after 3x HotSpot's default invocation and loop counts
# (Tier4*Threshold): a job of seconds spent ~1 CPU-s compiling, much of it on code that was soon done
# running; later, fewer compilations of the code that stays hot. Measured on the decode: 2M commits 3.73 ->
# 3.38 CPU-s, 20M 19.8 -> 18.2 (docs/pipeline.md#speed). The driver's JVM only (the executor in local
# mode): a cluster's executors keep their own options.
C2_LATER = ("-XX:Tier4InvocationThreshold=15000", "-XX:Tier4MinInvocationThreshold=1800",
            "-XX:Tier4CompileThreshold=45000", "-XX:Tier4BackEdgeThreshold=120000")
JOBS = ("decode", "snapshot", "rebalances", "lag", "report", "all")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Spark jobs over the coordinator's log "
                                     "(docs/pipeline.md). `demo-data` writes a history to try them on.")
    parser.add_argument("job", choices=(*JOBS, "explain"))
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="data directories (one per node), partition directories or segments; any Spark URI "
                        "(explain: the group first)")
    parser.add_argument("--out", help="output directory (any Spark URI; the report: local); "
                        "required except for explain")
    parser.add_argument("--server-log", action="append", default=[], metavar="FILE",
                        help="explain, report: the server's JSON log (--log-format json), repeatable, globs allowed")
    parser.add_argument("--master", help="Spark master URL (default: local[*], or spark-submit's)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration, repeatable")
    parser.add_argument("--min-lag", type=int, default=100,
                        help="lag: a group with at least this lag that keeps growing is falling behind")
    parser.add_argument("--top", type=int, default=8, help="report: how many groups the charts show")
    return parser


def spark_session(master: str | None, conf: Sequence[str], app: str) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    # spark-submit starts the Python driver with a gateway to the JVM it launched: its --master and
    # --conf are already in effect and must win, so nothing is defaulted then.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        builder = builder.master(master or "local[*]")
        # Executors run the driver's interpreter unless PYSPARK_PYTHON says otherwise: the one with this
        # package, on this machine's workers (local[N], a standalone cluster here) or at the same path on a
        # cluster's (docs/pipeline.md); Spark's default `python3` rarely has the package. SparkContext
        # reads the variable (the conf key spark.pyspark.python is only read by spark-submit).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if (master or "local").startswith("local"):
            # In local mode the driver is the only executor and holds the cached decode: Spark's 1 GiB
            # spills a 20M-record log to disk and took 2.6x as long as with 5 GiB (docs/pipeline.md).
            builder = builder.config("spark.driver.memory", f"{_local_driver_gib()}g")
        # Warnings and errors only, without the start-up noise (pipeline/log4j2.properties); Spark's
        # progress bar only on a terminal, where it redraws one line (in a log it would be a line a tick).
        log4j = Path(__file__).with_name("log4j2.properties")
        builder = builder.config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
        # Arrow's checks off (ARROW_UNCHECKED): in the driver's JVM, the executor in local mode, as system
        # properties; in a cluster's executors as environment variables, which Arrow reads too, so that the
        # cluster's own spark.executor.extraJavaOptions are kept. C2 later (C2_LATER): the driver's JVM.
        java_options = [f"-Dlog4j2.configurationFile=file:{log4j}",
                        *(f"-D{prop}={value}" for prop, _, value in ARROW_UNCHECKED), *C2_LATER]
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options))
        for _, env, value in ARROW_UNCHECKED:
            builder = builder.config(f"spark.executorEnv.{env}", value)
        # Spark's 200 shuffle partitions are for clusters; on one machine they are 200 tiny tasks a stage.
        builder = builder.config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
    elif master:
        builder = builder.master(master)
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{PROG}: --conf wants KEY=VALUE, got {item!r}")
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _local_driver_gib() -> int:
    """A quarter of the machine's memory, at least Spark's default of 1 GiB."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, total // 4 // 2**30)


def _write(df: DataFrame, out: str, name: str) -> str:
    path = f"{out.rstrip('/')}/{name}"
    df.write.mode("overwrite").parquet(path)
    return path


def run_job(spark: SparkSession, job: str, paths: Sequence[str], out: str, min_lag: int = 100,
            top: int = 8, log: CoordinatorLog | None = None, server_logs: Sequence[str] = ()) -> dict[str, str]:
    """Run one job (or `all`); returns what it wrote, name -> path."""
    from pipeline import jobs
    from pipeline.reader import read_log

    log = log or read_log(spark, paths)
    written: dict[str, str] = {}
    if job in ("decode", "all"):
        written["decoded/group_metadata"] = _write(log.group_metadata, out, "decoded/group_metadata")
        written["decoded/offset_commits"] = _write(log.offset_commits, out, "decoded/offset_commits")
    if job in ("snapshot", "all"):
        snap = jobs.snapshot(log)
        written["snapshot/offsets"] = _write(snap.offsets, out, "snapshot/offsets")
        written["snapshot/groups"] = _write(snap.groups, out, "snapshot/groups")
    if job in ("rebalances", "all"):
        reb = jobs.rebalances(log)
        written["rebalances/generations"] = _write(reb.generations, out, "rebalances/generations")
        written["rebalances/hourly"] = _write(reb.hourly, out, "rebalances/hourly")
        written["rebalances/top_groups"] = _write(reb.top_groups, out, "rebalances/top_groups")
    if job in ("lag", "all"):
        lag = jobs.lag(log, min_lag=min_lag)
        written["lag/history"] = _write(lag.history, out, "lag/history")
        written["lag/current"] = _write(lag.current, out, "lag/current")
        written["lag/groups"] = _write(lag.groups, out, "lag/groups")
    if job in ("report", "all"):
        from pipeline.report import build_report

        report_dir = Path(out.removeprefix("file:")) / "report"
        written["report"] = str(build_report(log, report_dir, top_n=top, min_lag=min_lag, server_logs=server_logs))
    return written


def cli(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.job == "explain":
        if len(args.paths) < 2:
            parser.error("explain wants GROUP PATH...")
    elif args.out is None:
        parser.error(f"{args.job} wants --out")
    from pipeline.segments import InputError

    started = time.monotonic()
    spark = spark_session(args.master, args.conf, f"coordinator-log {args.job}")
    try:
        from pipeline.reader import read_log

        if args.job == "explain":
            return explain(spark, args.paths[0], args.paths[1:], args.server_log, args.out)
        log = read_log(spark, args.paths)
        written = run_job(spark, args.job, args.paths, args.out, args.min_lag, args.top, log, args.server_log)
        summary = _summary(spark, log, written)
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    for name, path in written.items():
        print(f"{name}: {path}")
    read, damaged, rows = summary
    if damaged:
        # Damage is reported, not fatal: the jobs ran over everything that did decode.
        print(f"{PROG}: {damaged} damaged batch(es) or undecodable record(s) were skipped; "
              "`coordinator-server dump-log` shows where", file=sys.stderr)
    print(f"{args.job}: {read:,} records read, {damaged:,} damaged, {rows:,} rows written, "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


def explain(spark: SparkSession, group: str, paths: Sequence[str], server_logs: Sequence[str],
            out: str | None) -> int:
    """`pipeline explain`: the table on stdout, and explain/generations when --out is given."""
    from pipeline.explain import format_table
    from pipeline.explain_job import explain_groups, explanations_frame
    from pipeline.reader import read_log

    log = read_log(spark, paths, with_topics=False)
    explanations = explain_groups(spark, log, [group], server_logs)
    print(format_table(explanations))
    if out is not None:
        print(f"explain/generations: {_write(explanations_frame(spark, explanations), out, 'explain/generations')}")
    if not server_logs:
        print(f"{PROG}: no --server-log: times and membership changes only, not the causes", file=sys.stderr)
    return 0


def _summary(spark: SparkSession, log: CoordinatorLog, written: dict[str, str]) -> tuple[int, int, int]:
    """(records read, damaged entries, rows written): counts over the cached decode and the Parquet
    footers, no second decode."""
    from pyspark.sql import functions as F

    read = log.records.filter(F.col("record_type") != "error").count()
    damaged = log.errors().count()
    rows = sum(spark.read.parquet(path).count() for name, path in written.items() if name != "report")
    return read, damaged, rows


main = cli

if __name__ == "__main__":  # spark-submit runs this file as the application
    sys.exit(cli())
