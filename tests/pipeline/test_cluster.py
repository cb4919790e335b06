"""The pipeline on a real Spark standalone cluster (`pipeline.standalone`: a master and two workers from the
installed pyspark, as subprocesses): the jobs submitted with `--master spark://...` and with pyspark's own
`spark-submit` write the same Parquet as the local run of `conftest.pipeline_run`, read back with pyarrow;
and `pipeline cluster-run` (what `make pipeline-cluster` calls) stops its cluster when the job fails and on
Ctrl-C, leaving no process behind.

One cluster for both submissions, inside one test, so that however xdist splits the suite there is one
cluster of this module at a time (a master, two workers and their executors are five JVMs). The
spark-submit run is one job (`lag`: it reads both the offsets and the topic segments) rather than `all`,
which the `--master` run already covers, to keep the module near two minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline import cli, cluster_run, demo_data, standalone

from .conftest import SPARK_TEST_CONF, PipelineRun

pytestmark = pytest.mark.timeout(900)

VENV_BIN = Path(sys.executable).parent
RUN_TIMEOUT_S = 600  # generous: other suites share the 2 cores


def _env() -> dict[str, str]:
    # The drivers' executors must run the venv's interpreter, where `pipeline` and kafka-python are installed.
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")


def _conf_args() -> list[str]:
    return [arg for conf in SPARK_TEST_CONF for arg in ("--conf", conf)]


def _node_dirs(run: PipelineRun) -> list[str]:
    return [str(run.demo / name) for name in sorted(run.nodes)]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _datasets(out: Path) -> list[str]:
    """Every Parquet dataset a run wrote (each directory Spark marked complete)."""
    return sorted(str(p.parent.relative_to(out)) for p in out.rglob("_SUCCESS"))


def _split(row: dict[str, Any]) -> tuple[str, dict[str, float]]:
    # Floats (averages, slopes) are summed in partition order, which differs between the runs; the rest
    # must be identical and orders the rows.
    fixed = {k: v for k, v in row.items() if not isinstance(v, float)}
    floats = {k: v for k, v in row.items() if isinstance(v, float)}
    return json.dumps(fixed, sort_keys=True, default=str), floats


def assert_same_parquet(got: Path, expected: Path) -> None:
    """Row for row, as plain Parquet read by pyarrow: the same schema and the same rows in any order."""
    left, right = pq.read_table(got), pq.read_table(expected)
    assert left.schema == right.schema, got
    rows = sorted((_split(r) for r in left.to_pylist()), key=lambda r: r[0])
    want = sorted((_split(r) for r in right.to_pylist()), key=lambda r: r[0])
    assert len(rows) == len(want) > 0, got
    for (fixed, floats), (want_fixed, want_floats) in zip(rows, want, strict=True):
        assert fixed == want_fixed, got
        assert floats.keys() == want_floats.keys()
        for key, value in floats.items():
            assert value == pytest.approx(want_floats[key], rel=1e-9, nan_ok=True), (got, key, fixed)


def _explainer_section(page: Path) -> str:
    return page.read_text(encoding="utf-8").split("Why groups rebalanced", 1)[1].split("<h2>", 1)[0]


def _completed_app(cluster: standalone.StandaloneCluster, name: str) -> dict[str, Any]:
    apps = [a for a in cluster.status()["completedapps"] if a["name"] == name]
    assert len(apps) == 1, cluster.status()["completedapps"]
    return apps[0]


def _processes_in(directory: Path) -> list[int]:
    """Processes this test started whose command line or working directory is under `directory`: the
    daemons name their log/work directory, executors and their Python workers run inside it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue  # exited meanwhile, or not ours to read
        if str(directory) in cmdline or cwd.startswith(str(directory)):
            found.append(int(proc.name))
    return found


def test_jobs_on_a_standalone_cluster_equal_the_local_run(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    logs = tmp_path / "cluster-logs"
    with standalone.cluster(workers=2, worker_cores=1, worker_memory="1g", log_dir=logs) as cluster:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        assert standalone.alive_workers(cluster.status()) == 2

        # 1. The CLI as the driver, with the cluster's URL as --master: every job.
        out = tmp_path / "master-out"
        _run([str(VENV_BIN / "coordinator-server"), "pipeline", "all", *_node_dirs(pipeline_run),
              "--out", str(out), "--master", cluster.master_url, *_conf_args(),
              "--server-log", str(pipeline_run.demo / "node-*" / demo_data.SERVER_LOG)])
        datasets = _datasets(out)
        assert datasets == _datasets(pipeline_run.out)
        assert len(datasets) == 10
        for name in datasets:
            assert_same_parquet(out / name, pipeline_run.out / name)
        # The report's explainer read the servers' JSON logs on the executors, and explains as the local run did.
        explained = _explainer_section(out / "report" / "index.html")
        assert "session_expired" in explained
        assert explained == _explainer_section(pipeline_run.out / "report" / "index.html")
        app = _completed_app(cluster, "coordinator-log all")
        assert app["cores"] == 2  # one executor on each worker
        # Each worker ran an executor of that application: its work directory has the executor's logs.
        for i in range(2):
            assert list((logs / f"worker-{i}" / app["id"]).glob("*/stderr")), f"worker-{i} ran no executor"

        # 2. pyspark's spark-submit running pipeline/cli.py as the application: its master and conf are kept.
        submitted = tmp_path / "submit-out"
        _run([str(standalone.spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
              *_conf_args(), cli.__file__, "lag", *_node_dirs(pipeline_run), "--out", str(submitted)])
        assert _datasets(submitted) == ["lag/current", "lag/groups", "lag/history"]
        for name in _datasets(submitted):
            assert_same_parquet(submitted / name, pipeline_run.out / name)
        assert _completed_app(cluster, "coordinator-log lag")["cores"] == 2
    assert _processes_in(logs) == []


def _cluster_run(tmp_path: Path, *job: str) -> subprocess.Popen[bytes]:
    """`pipeline cluster-run` with one worker, its logs under tmp_path/logs and its output in files (a pipe
    left unread could fill and stall it)."""
    argv = [str(VENV_BIN / "coordinator-server"), "pipeline", "cluster-run", "--workers", "1",
            "--logs", str(tmp_path / "logs"), *job, *_conf_args()]
    with open(tmp_path / "stdout", "wb") as out, open(tmp_path / "stderr", "wb") as err:
        return subprocess.Popen(argv, env=_env(), stdout=out, stderr=err)


BANNER = "Spark standalone cluster: master spark://127.0.0.1:"


def _webui(stderr: str) -> str:
    # "Spark standalone cluster: master spark://127.0.0.1:P (web UI http://127.0.0.1:W), ..."
    return stderr.split(BANNER, 1)[1].split("(web UI ", 1)[1].split(")", 1)[0]


def _master_status(webui: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{webui}/json", timeout=5) as response:
            status: dict[str, Any] = json.load(response)
            return status
    except OSError:
        return None


def test_cluster_run_stops_its_cluster_when_the_job_fails(tmp_path: Path) -> None:
    # A path no filesystem serves: the job fails once it lists its input, after the cluster had started
    # (a local path that does not exist is no segments, not a failure: docs/pipeline.md).
    process = _cluster_run(tmp_path, "snapshot", "nosuchscheme://host/node", "--out", str(tmp_path / "out"))
    process.wait(timeout=RUN_TIMEOUT_S)
    stderr = (tmp_path / "stderr").read_text(errors="replace")
    assert process.returncode == 2, stderr
    assert BANNER in stderr
    assert 'No FileSystem for scheme "nosuchscheme"' in stderr  # the job's own error
    assert _master_status(_webui(stderr)) is None
    assert _processes_in(tmp_path / "logs") == []


def test_cluster_run_stops_its_cluster_on_ctrl_c(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    process = _cluster_run(tmp_path, "all", *_node_dirs(pipeline_run), "--out", str(tmp_path / "out"))
    stderr = tmp_path / "stderr"
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while BANNER not in stderr.read_text(errors="replace"):
            assert process.poll() is None, "cluster-run ended before its cluster was up"
            assert time.monotonic() < deadline
            time.sleep(0.5)
        webui = _webui(stderr.read_text(errors="replace"))
        # Ctrl-C mid-job: once the application runs on the cluster.
        while not (_master_status(webui) or {}).get("activeapps"):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert "cluster-run: interrupted; the cluster is stopped" in stderr.read_text(errors="replace")
    assert _master_status(webui) is None
    assert _processes_in(tmp_path / "logs") == []


def test_cluster_run_defaults_yield_to_the_users_conf() -> None:
    job = ["all", "/logs/node-0", "--out", "/out", "--conf", "spark.executor.memory=512m"]
    argv = cluster_run.job_argv(job, ["spark.executor.memory=512m"], "spark://127.0.0.1:7077", 4, "1g")
    assert argv[:len(job)] == job
    parsed = cli.build_parser().parse_args(argv)
    assert parsed.master == "spark://127.0.0.1:7077"
    assert parsed.conf == ["spark.executor.memory=512m", "spark.sql.shuffle.partitions=8",
                           "spark.ui.showConsoleProgress=false"]


def test_only_alive_workers_count() -> None:
    # A worker that died stays listed by the master for a while, as DEAD.
    status = {"workers": [{"state": "ALIVE"}, {"state": "DEAD"}, {"state": "ALIVE"}]}
    assert standalone.alive_workers(status) == 2
    assert standalone.alive_workers({}) == 0


def test_two_clusters_start_side_by_side(tmp_path: Path) -> None:
    # Two masters on one machine (the test workers of `make test`, a user's own cluster): every port they
    # bind is their own; Spark's REST submission server, on its fixed port 6066, made the second one hang.
    with standalone.cluster(workers=0, log_dir=tmp_path / "a") as a, \
            standalone.cluster(workers=0, log_dir=tmp_path / "b") as b:
        assert a.master_url != b.master_url
        assert a.status()["status"] == b.status()["status"] == "ALIVE"
