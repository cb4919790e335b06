"""The Spark session the CLI builds: Arrow Java's per-access checks are off where the decoder's batches are
read (`pipeline.cli.ARROW_UNCHECKED`), which only works if Arrow itself reads the names we set — checked in
a real JVM, through Arrow's own flags; and the driver's JVM runs with the later C2 thresholds."""
from __future__ import annotations

import os
import sys

from pipeline import cli

from .conftest import SPARK_TEST_CONF


def test_arrow_checks_are_off_in_the_driver_and_asked_for_in_the_executors() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = cli.spark_session("local[1]", SPARK_TEST_CONF, "session-test")
    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        assert jvm.org.apache.arrow.memory.BoundsChecking.BOUNDS_CHECKING_ENABLED is False
        assert jvm.org.apache.arrow.vector.NullCheckingForGet.NULL_CHECKING_ENABLED is False
        arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
        assert set(cli.C2_LATER) <= set(arguments), arguments
        conf = spark.sparkContext.getConf()
        assert conf.get("spark.executorEnv.ARROW_ENABLE_UNSAFE_MEMORY_ACCESS") == "true"
        assert conf.get("spark.executorEnv.ARROW_ENABLE_NULL_CHECK_FOR_GET") == "false"
    finally:
        spark.stop()
