"""The Java driver of the interop suite (tests/interop/java, clients `java` and `java+consumer`): compiled once
into build/interop-java by the tests' one javac helper (tests/kafka/javac.py), and the command line that runs it.

The driver logs to stderr (tests/interop/java/log4j2.properties), so stdout is its JSON report alone.

    python -m tests.interop.java_build     # builds, prints the command line of a driver
"""
from __future__ import annotations

import functools
import sys

from tests.kafka import javac

SOURCE = javac.REPO / "tests" / "interop" / "java"
BUILD_DIR = javac.REPO / "build" / "interop-java"


@functools.cache
def driver_argv() -> list[str]:
    return javac.java_command(javac.compiled(SOURCE, BUILD_DIR), "InteropDriver",
                              log4j2=SOURCE / "log4j2.properties")


if __name__ == "__main__":
    try:
        print(" ".join(driver_argv()))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
