"""The fuzz suite's marker (the durability suite registers the same pair, whichever is collected)."""
from __future__ import annotations

import pytest

# Importing it pre-imports kafka-python's message modules with their deprecation warning silenced.
import tests.integration.conftest  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "durability: crash consistency, disk and connection limits (real server)")
    config.addinivalue_line("markers", "fuzz: malformed-input fuzzing of a live server")
