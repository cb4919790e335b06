"""A normal run with nothing to read is a quiet, successful run: a real `coordinator-server pipeline`
process (its own Spark JVM) over a data directory with no topic logs and an empty offsets segment, plus a
glob that matches nothing. Spark used to fail the job with FileNotFoundException stack traces."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import SPARK_TEST_CONF


def test_nothing_to_read_is_a_quiet_empty_run(tmp_path: Path) -> None:
    data = tmp_path / "node-0"
    (data / "__consumer_offsets-0").mkdir(parents=True)
    (data / "__consumer_offsets-0" / "00000000000000000000.log").touch()  # an empty partition
    (data / "orders-0").mkdir()  # a topic with no segment yet
    argv = [sys.executable, "-m", "pipeline.cli", "snapshot", str(data), str(tmp_path / "node-*-missing"),
            "--out", str(tmp_path / "out"), "--master", "local[1]"]
    for conf in SPARK_TEST_CONF:
        argv += ["--conf", conf]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "snapshot: 0 records read, 0 damaged, 0 rows written" in proc.stderr, proc.stderr[-3000:]
    assert f"snapshot/offsets: {tmp_path / 'out'}/snapshot/offsets" in proc.stdout
