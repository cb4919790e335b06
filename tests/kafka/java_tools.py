"""Kafka's consumer-groups tool and its Java Admin, run in one JVM per call (tests/kafka/java/GroupTools.java).

    answers = run_group_tools("127.0.0.1:9092", [{"tool": ["--list"]}, {"admin": "listGroups"}])

GroupTools.java is compiled into build/kafka/java-tools by the tests' one javac helper (tests/kafka/javac.py),
again only when it changes. The tool's and the Admin's log4j output is kept to errors, on stderr
(tests/kafka/java/log4j2.properties), so that stdout is the answers alone.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.kafka import javac

SOURCE = Path(__file__).resolve().parent / "java"
BUILD_DIR = javac.REPO / "build" / "kafka" / "java-tools"
RUN_TIMEOUT_S = 120.0


def run_group_tools(bootstrap: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step's answer, in order (GroupTools.java says what a step and an answer are)."""
    command = [*javac.java_command(javac.compiled(SOURCE, BUILD_DIR), "GroupTools",
                                   log4j2=SOURCE / "log4j2.properties"), bootstrap]
    done = subprocess.run(command, input=json.dumps(steps), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"GroupTools exited with {done.returncode}:\n{done.stderr[-4000:]}")
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    assert len(answers) == len(steps), (steps, answers)
    return answers
