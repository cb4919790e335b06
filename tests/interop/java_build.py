"""Build the Java driver of the interop suite (tests/interop/java) once, into build/interop-java/.

The driver is one source file compiled with plain javac against Apache Kafka's jars in build/kafka/lib (the
kafka-clients release `make kafka-deps` resolves for the differential tests, with log4j2 and its SLF4J
binding): no Gradle or Maven build of its own. A build is redone only when the sources or the set of jars
changed (a hash of both, stamped beside the classes); the interop suite calls `driver_argv()` under a file
lock, as the xdist workers share one build, so an edited driver is never run stale.

The JVM flags cut start-up on a small machine: the client-compiler tier only, the serial collector, a small
heap and the JDK's class-data archive. A member's first event comes about a second after its start.

    python -m tests.interop.java_build     # builds, prints the command line of a driver
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "interop" / "java"
KAFKA_LIB = REPO / "build" / "kafka" / "lib"
OUT_DIR = REPO / "build" / "interop-java"
STAMP = OUT_DIR / ".source-hash"
MAIN_CLASS = "InteropDriver"
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", "-Xms32m", "-Xmx256m",
             "-XX:-UsePerfData", f"-Dlog4j2.configurationFile={SOURCE / 'log4j2.properties'}"]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} (a JDK 17 or newer) is not on PATH: run `make kafka-deps`")
    return path


def _jars() -> list[Path]:
    jars = sorted(KAFKA_LIB.glob("*.jar"))
    if not any(j.name.startswith("kafka-clients-") for j in jars):
        raise RuntimeError(f"Apache Kafka's jars are missing from {KAFKA_LIB}: run `make kafka-deps`")
    return jars


def _source_hash(sources: list[Path], jars: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for jar in jars:  # a different Kafka release is a different API to compile against
        digest.update(jar.name.encode() + b"\0")
    return digest.hexdigest()


@functools.cache
def classes_dir() -> Path:
    """build/interop-java with the driver's classes, compiled first if missing or stale."""
    javac = _tool("javac")
    jars = _jars()
    sources = sorted(SOURCE.glob("*.java"))
    wanted = _source_hash(sources, jars)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not STAMP.exists() or STAMP.read_text() != wanted:
            for old in OUT_DIR.glob("*.class"):
                old.unlink()
            # -XDignore.symbol.file: the driver takes SIGTERM over with sun.misc.Signal (jdk.unsupported),
            # which javac would otherwise warn about on every build.
            result = subprocess.run([javac, "-XDignore.symbol.file", "-Xlint:-options", "-nowarn",
                                     "-cp", f"{KAFKA_LIB}/*", "-d", str(OUT_DIR), *map(str, sources)],
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"javac of {SOURCE} failed:\n{result.stdout}{result.stderr}")
            STAMP.write_text(wanted)
    return OUT_DIR


def driver_argv() -> list[str]:
    return [_tool("java"), *JVM_FLAGS, "-cp", f"{classes_dir()}:{KAFKA_LIB}/*", MAIN_CLASS]


if __name__ == "__main__":
    try:
        print(" ".join(driver_argv()))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
