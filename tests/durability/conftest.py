"""Fixtures for the durability and limits suites: the real server as a subprocess (the integration
suite's `server_factory` and `ServerProcess`, reused as they are), plus the `durability` and `fuzz` markers."""
from __future__ import annotations

import pytest

# Importing it also pre-imports kafka-python's message modules with their deprecation warning silenced.
from tests.integration.conftest import ServerFactory, ServerProcess, server_factory  # noqa: F401

__all__ = ["ServerFactory", "ServerProcess"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "durability: crash consistency, disk and connection limits (real server)")
    config.addinivalue_line("markers", "fuzz: malformed-input fuzzing of a live server")
