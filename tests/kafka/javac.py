"""The tests' small Java programs, compiled with plain javac against Apache Kafka's jars, and the JVM that runs them.

Two suites run Java of their own: the differential tests drive Kafka's consumer-groups tool and Admin
(tests/kafka/java/GroupTools.java) and the interop suite drives Kafka's own consumer and producer
(tests/interop/java/InteropDriver.java). Both compile against build/kafka/lib, the jars `make kafka-deps`
resolves for the broker beside the server, so the client is always the broker's release and no Gradle or
Maven project is needed for one file.

    classes = compiled(SOURCES, REPO / "build" / "interop-java")
    argv = java_command(classes, "InteropDriver", log4j2=SOURCES / "log4j2.properties")

A build is redone only when the sources or the set of jars change: a hash of both is stamped beside the
classes. xdist workers may both find it stale, so the compile runs under a file lock, into a fresh directory
renamed into place, and a worker never runs half-written classes.

The JVM is sized for short runs on 2 cores: the client-compiler tier only, the serial collector, a small heap
and the JDK's class-data archive bring a program's first line to about a second after its start.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KAFKA_LIB = REPO / "build" / "kafka" / "lib"
COMPILE_TIMEOUT_S = 180.0
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", "-Xms32m", "-Xmx256m",
             "-XX:-UsePerfData", "-Djava.awt.headless=true"]


def tool(name: str) -> str:
    """The path of a JDK tool (java, javac), or an error that says how to install one."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} (a JDK 17 or newer) is not on PATH: run `make kafka-deps`")
    return path


def kafka_jars() -> list[Path]:
    jars = sorted(KAFKA_LIB.glob("*.jar"))
    if not any(j.name.startswith("kafka-clients-") for j in jars):
        raise RuntimeError(f"Apache Kafka's jars are missing from {KAFKA_LIB}: run `make kafka-deps`")
    return jars


def _build_hash(sources: list[Path], jars: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for jar in jars:  # a different Kafka release is a different API to compile against
        digest.update(jar.name.encode() + b"\0")
    return digest.hexdigest()


def compiled(source_dir: Path, build_dir: Path) -> Path:
    """build_dir/classes holding the compiled *.java of source_dir, compiled first if missing or stale."""
    sources = sorted(source_dir.glob("*.java"))
    if not sources:
        raise RuntimeError(f"no Java sources in {source_dir}")
    jars = kafka_jars()
    wanted = _build_hash(sources, jars)
    classes, stamp = build_dir / "classes", build_dir / "build.sha256"
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if stamp.read_text().strip() == wanted and classes.is_dir():
                return classes
        fresh = build_dir / "classes.new"
        shutil.rmtree(fresh, ignore_errors=True)
        # -XDignore.symbol.file: a driver may take SIGTERM over with sun.misc.Signal (jdk.unsupported),
        # which javac would otherwise warn about on every build.
        done = subprocess.run([tool("javac"), "-XDignore.symbol.file", "-Xlint:-options", "-nowarn",
                               "-encoding", "UTF-8", "-cp", f"{KAFKA_LIB}/*", "-d", str(fresh),
                               *map(str, sources)],
                              capture_output=True, text=True, check=False, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"javac of {source_dir} failed:\n{done.stdout}{done.stderr}")
        shutil.rmtree(classes, ignore_errors=True)
        fresh.rename(classes)
        stamp.write_text(wanted + "\n")
        return classes


def java_command(classes: Path, main_class: str, *, log4j2: Path) -> list[str]:
    """The command line that runs main_class from classes with Kafka's jars, logging as log4j2 says."""
    return [tool("java"), *JVM_FLAGS, f"-Dlog4j2.configurationFile={log4j2}",
            "-cp", f"{classes}:{KAFKA_LIB}/*", main_class]
