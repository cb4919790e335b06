"""Kafka's consumer-groups tool and its Java Admin, run in one JVM per call (tests/kafka/java/GroupTools.java).

    answers = run_group_tools("127.0.0.1:9092", [{"tool": ["--list"]}, {"admin": "listGroups"}])

GroupTools.java is compiled with javac against build/kafka/lib (`make kafka-deps`) into build/kafka/java-tools,
and compiled again only when its source changes: the stamp there holds the source's hash. xdist workers may
both find it stale, so the compile is done under a file lock, into a fresh directory renamed into place.
The JVM is sized for short runs on 2 cores (the C1 compiler only, the serial collector, a small heap), and the
tool's and the Admin's log4j output is kept to errors, on stderr, so that stdout is the answers alone.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LIB_DIR = REPO / "build" / "kafka" / "lib"
SOURCE = Path(__file__).resolve().parent / "java" / "GroupTools.java"
BUILD_DIR = REPO / "build" / "kafka" / "java-tools"
CLASSES = BUILD_DIR / "classes"
STAMP = BUILD_DIR / "source.sha256"
RUN_TIMEOUT_S = 120.0
JVM_OPTIONS = ["-Xmx192m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
               "-XX:CICompilerCount=1", "-Djava.awt.headless=true"]

LOG4J2_CONFIG = """\
status = error
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = ERR
"""


def _source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def compiled_classes() -> Path:
    """The directory of GroupTools' classes, compiled first if the source changed since the last compile."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    wanted = _source_hash()
    with open(BUILD_DIR / "compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if STAMP.read_text().strip() == wanted and (CLASSES / "GroupTools.class").exists() \
                    and (BUILD_DIR / "log4j2.properties").exists():
                return CLASSES
        fresh = BUILD_DIR / "classes.new"
        shutil.rmtree(fresh, ignore_errors=True)
        javac = shutil.which("javac")
        if javac is None:
            raise RuntimeError("no javac: GroupTools.java needs a JDK (Debian: default-jdk-headless)")
        done = subprocess.run([javac, "-d", str(fresh), "-cp", f"{LIB_DIR}/*", "-encoding", "UTF-8",
                               "-Xlint:none", str(SOURCE)], capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {SOURCE}:\n{done.stdout}{done.stderr}")
        shutil.rmtree(CLASSES, ignore_errors=True)
        fresh.rename(CLASSES)
        (BUILD_DIR / "log4j2.properties").write_text(LOG4J2_CONFIG)
        STAMP.write_text(wanted + "\n")
        return CLASSES


def run_group_tools(bootstrap: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step's answer, in order (GroupTools.java says what a step and an answer are)."""
    classes = compiled_classes()
    java = shutil.which("java") or "java"
    command = [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={BUILD_DIR / 'log4j2.properties'}",
               "-cp", f"{classes}:{LIB_DIR}/*", "GroupTools", bootstrap]
    done = subprocess.run(command, input=json.dumps(steps), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"GroupTools exited with {done.returncode}:\n{done.stderr[-4000:]}")
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    assert len(answers) == len(steps), (steps, answers)
    return answers
