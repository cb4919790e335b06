"""The pipeline's tests: one demo history and one Spark run per test session, shared by the xdist workers.

`pipeline_run` generates the demo data (real servers, real clients: `pipeline.demo_data`) and runs
`coordinator-server pipeline all` over it, in local mode on 2 cores, once: the first worker to get the
lock does it and writes a marker, the other waits and reuses the files. So however `-n` splits the tests,
there is one JVM and one demo run, and the tests themselves only read Parquet, HTML and JSON.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the `pipeline` extra is not installed (make pipeline-deps)")
pytest.importorskip("matplotlib", reason="the `pipeline` extra is not installed (make pipeline-deps)")

SPARK_TEST_CONF = ["spark.sql.shuffle.partitions=2", "spark.ui.enabled=false",
                   "spark.driver.memory=1g", "spark.sql.adaptive.coalescePartitions.enabled=true"]


@dataclass
class PipelineRun:
    demo: Path  # the demo data: node-0/, node-1/, manifest.json
    out: Path  # the pipeline's output: decoded/, snapshot/, rebalances/, lag/, report/
    manifest: dict[str, Any]
    seconds: dict[str, float]

    @property
    def nodes(self) -> dict[str, dict[str, Any]]:
        nodes: dict[str, dict[str, Any]] = self.manifest["nodes"]
        return nodes

    def node_uri(self, name: str) -> str:
        # Spark lists files as file: URIs; `node` in every row is the data directory as listed.
        return "file:" + str((self.demo / name).resolve())

    def parquet(self, name: str) -> Any:
        import pandas as pd

        return pd.read_parquet(self.out / name)


def _shared_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    base = tmp_path_factory.getbasetemp()
    # xdist workers each get base/popen-gwN; their parent is shared by the whole run.
    return (base if worker_id == "master" else base.parent) / "pipeline-shared"


def _run_once(shared: Path) -> None:
    from pipeline import cli, demo_data

    seconds: dict[str, float] = {}
    started = time.monotonic()
    demo_data.generate(shared / "demo")
    seconds["demo_data"] = time.monotonic() - started
    started = time.monotonic()
    argv = ["all", str(shared / "demo" / "node-0"), str(shared / "demo" / "node-1"), "--out", str(shared / "out"),
            "--master", "local[2]", "--server-log", str(shared / "demo" / "node-*" / demo_data.SERVER_LOG)]
    for conf in SPARK_TEST_CONF:
        argv += ["--conf", conf]
    code = cli.cli(argv)
    assert code == 0
    seconds["spark_jobs"] = time.monotonic() - started
    (shared / "seconds.json").write_text(json.dumps(seconds))
    (shared / "done").touch()


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[PipelineRun]:
    shared = _shared_dir(tmp_path_factory, worker_id)
    shared.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits here while the first one runs
        try:
            if (shared / "failed").exists():
                pytest.fail("the pipeline run failed on the other xdist worker; see its error")
            if not (shared / "done").exists():
                try:
                    _run_once(shared)
                except BaseException:
                    (shared / "failed").touch()
                    raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    manifest = json.loads((shared / "demo" / "manifest.json").read_text())
    seconds = json.loads((shared / "seconds.json").read_text())
    yield PipelineRun(shared / "demo", shared / "out", manifest, seconds)
