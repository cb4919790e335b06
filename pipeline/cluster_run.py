"""`coordinator-server pipeline cluster-run [--workers N ...] JOB PATH... --out OUT`: a job on a Spark
standalone cluster of this machine, started for the run and stopped after it (`make pipeline-cluster`).

    coordinator-server pipeline cluster-run --workers 2 all build/pipeline/demo/node-0 \
        build/pipeline/demo/node-1 --out build/pipeline/cluster/out

Starts a master and the workers (`pipeline.standalone`), prints the `spark://` URL, runs the job line
exactly as `coordinator-server pipeline` would with `--master` set to that URL, and stops the cluster
however the job ends: an error, Ctrl-C or SIGTERM. Everything after this command's own options is the
job's command line.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from pipeline import cli as pipeline_cli
from pipeline import standalone

COMMAND = f"{pipeline_cli.PROG} cluster-run"
LOOPBACK = "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: a prefix of this command's options must not swallow one of the job's.
    parser = argparse.ArgumentParser(prog=COMMAND, allow_abbrev=False, usage=f"{COMMAND} [options] JOB PATH... "
                                     "--out OUT [job options]", description="Run a pipeline job on a Spark standalone cluster of "
                                     "this machine, started for the run and stopped after it (docs/pipeline.md).")
    parser.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    parser.add_argument("--worker-cores", type=int, default=1, help="cores per worker (default 1)")
    parser.add_argument("--worker-memory", default="1g", help="executor memory per worker (default 1g)")
    parser.add_argument("--logs", type=Path, default=Path("build/pipeline/cluster/logs"),
                        help="the master's, workers' and executors' logs (default build/pipeline/cluster/logs)")
    return parser


def job_argv(job: Sequence[str], given_conf: Sequence[str], master_url: str, total_cores: int,
             worker_memory: str) -> list[str]:
    """The job's command line with the cluster's master, and the defaults the user did not set."""
    given = {item.partition("=")[0] for item in given_conf}
    defaults = {
        # An executor takes its whole worker: one per worker, as big as the worker offers.
        "spark.executor.memory": worker_memory,
        # Two tasks per core, as the local run has; Spark's 200 are for big clusters.
        "spark.sql.shuffle.partitions": str(2 * total_cores),
        "spark.ui.showConsoleProgress": "false",
    }
    argv = [*job, "--master", master_url]
    for key, value in defaults.items():
        if key not in given:
            argv += ["--conf", f"{key}={value}"]
    return argv


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn `kill PID` into an exception so the `finally` that stops the cluster runs.
    raise SystemExit(128 + signum)


def cli(argv: Sequence[str]) -> int:
    args, job = build_parser().parse_known_args(list(argv))
    # The job's line is checked before any JVM starts: a typo costs no cluster start-up.
    parsed = pipeline_cli.build_parser().parse_args(job)
    if parsed.master:
        raise SystemExit(f"{COMMAND}: the master is the cluster this command starts; drop --master")
    # The driver listens where the executors reach it: loopback, like the cluster (not the hostname's address).
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        with standalone.cluster(workers=args.workers, worker_cores=args.worker_cores,
                                worker_memory=args.worker_memory, log_dir=args.logs, host=LOOPBACK) as running:
            print(f"Spark standalone cluster: master {running.master_url} (web UI {running.webui_url}), "
                  f"{args.workers} worker(s) x {args.worker_cores} core(s) / {args.worker_memory}; "
                  f"logs in {running.log_dir}", file=sys.stderr, flush=True)
            code = pipeline_cli.cli(job_argv(job, parsed.conf, running.master_url,
                                             args.workers * args.worker_cores, args.worker_memory))
        print(f"ran on {running.master_url}; the cluster is stopped", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        # Ctrl-C: pyspark cancelled the jobs, the `with` stopped the cluster; no traceback for that.
        print(f"{COMMAND}: interrupted; the cluster is stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
