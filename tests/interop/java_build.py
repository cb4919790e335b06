"""Build the Java driver of the interop suite (tests/interop/java, clients `java` and `java+consumer`) once,
into build/interop-java/, and give the command line that runs it.

The driver is one source file compiled with `javac` against Apache Kafka's jars (build/kafka/lib, from
`make kafka-deps`: the same kafka-clients the broker beside the server runs), so it needs no build tool. It is
recompiled only when its source is newer than its class file, under a file lock: the xdist workers share one
build. The JVM is started for a short-lived client on 2 cores (C1 only, the serial collector, a small heap),
and the client's log goes to stderr (tests/interop/java/log4j2.properties), so stdout is the JSON report.

    python -m tests.interop.java_build     # builds it, prints the command line
"""
from __future__ import annotations

import fcntl
import functools
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIR = REPO / "tests" / "interop" / "java"
SOURCE = SOURCE_DIR / "InteropDriver.java"
LIB_DIR = REPO / "build" / "kafka" / "lib"
OUT_DIR = REPO / "build" / "interop-java"
CLASS = OUT_DIR / "InteropDriver.class"
JVM_OPTIONS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", "-Xmx256m",
               f"-Dlog4j2.configurationFile={SOURCE_DIR / 'log4j2.properties'}"]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"no `{name}` on PATH: the Java driver needs a JDK 17+ (run `make kafka-deps`)")
    return path


def _compile() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if CLASS.exists() and CLASS.stat().st_mtime >= SOURCE.stat().st_mtime:
            return
        result = subprocess.run([_tool("javac"), "-Xlint:all", "-Werror", "-cp", f"{LIB_DIR}/*", "-d", str(OUT_DIR),
                                 str(SOURCE)], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"javac {SOURCE} failed:\n{result.stdout}{result.stderr}")


@functools.cache
def driver_argv() -> list[str]:
    if not any(LIB_DIR.glob("kafka-clients-*.jar")):
        raise RuntimeError("no kafka-clients jar in build/kafka/lib: run `make kafka-deps`")
    _compile()
    return [_tool("java"), *JVM_OPTIONS, "-cp", f"{OUT_DIR}:{LIB_DIR}/*", "InteropDriver"]


if __name__ == "__main__":
    try:
        print(" ".join(driver_argv()))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
