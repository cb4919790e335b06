"""The suites test the compiled hot path (setup.py), not the pure-Python one beside it."""
from __future__ import annotations

import importlib
import os
import re

import pytest

from coordinator_server.build_info import compiled
from tests.compiled_build import ROOT, c_extension_sources, compiled_sources, extension_of, module_name

PURE = os.environ.get("COORDINATOR_PURE_PYTHON", "") not in ("", "0")


@pytest.mark.skipif(PURE, reason="COORDINATOR_PURE_PYTHON is set: the install skipped the compiler")
def test_every_listed_module_is_imported_compiled() -> None:
    sources = compiled_sources()
    assert len(sources) >= 10
    for source in sources:
        assert extension_of(source) is not None, f"{source} was not compiled: run `make build`"
        module = importlib.import_module(module_name(source))
        assert module.__file__ is not None and not module.__file__.endswith(".py"), module.__file__
    assert compiled()


@pytest.mark.skipif(PURE, reason="COORDINATOR_PURE_PYTHON is set: the install skipped the compiler")
def test_the_c_extensions_are_built() -> None:
    from coordinator_server.storage.syncfs_thread import SyncfsThread

    for source in c_extension_sources():
        assert extension_of(source) is not None, f"{source} was not compiled: run `make build`"
        importlib.import_module(module_name(source))
    assert SyncfsThread is not None


def test_the_makefile_rebuilds_on_a_change_to_each_listed_module() -> None:
    # The Makefile finds the list with sed (COMPILED_SOURCES); the same pattern must find every entry.
    text = (ROOT / "setup.py").read_text()
    assert [ROOT / m for m in re.findall(r'^    "(.*\.py)",$', text, re.M)] == compiled_sources()
    assert [ROOT / m for m in re.findall(r'^    "(.*\.c)",$', text, re.M)] == c_extension_sources()
    assert "$(BUILD_STAMP): $(STAMP) $(COMPILED_SOURCES)" in (ROOT / "Makefile").read_text()
