"""Fixtures for the durability and limits suites: the real server as a subprocess (the integration
suite's `ServerProcess`), plus the `durability` marker."""
from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Importing it also pre-imports kafka-python's message modules with their deprecation warning silenced.
from tests.integration.conftest import ServerFactory, ServerProcess

__all__ = ["ServerFactory", "ServerProcess"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "durability: crash consistency, disk and connection limits (real server)")
    config.addinivalue_line("markers", "fuzz: malformed-input fuzzing of a live server")


@pytest.fixture
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    started: list[ServerProcess] = []

    def factory(*, env: dict[str, str] | None = None, data_dir: Path | None = None, start: bool = True,
                **flags: Any) -> ServerProcess:
        srv = ServerProcess(data_dir or tmp_path_factory.mktemp("coordinator-data"), flags, env)
        started.append(srv)
        return srv.start() if start else srv

    yield factory
    for srv in started:
        if srv.running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                srv.terminate(5.0)
