"""Every suite: refuse to run against a stale compiled build. Python imports a module's compiled .so
(setup.py, built in place by `pip install -e .`) before its .py, so an edit not rebuilt would go untested,
and a module dropped from the list but still compiled would run against another build's library."""
from __future__ import annotations

import gc
import importlib.machinery
import threading
from collections.abc import Iterator

import pytest

from tests.compiled_build import ROOT, c_extension_sources, compiled_sources, extension_of, source_of


def pytest_sessionstart(session: pytest.Session) -> None:
    listed = compiled_sources()
    c_listed = c_extension_sources()
    stale = [str(source.relative_to(ROOT)) for source in [*listed, *c_listed]
             if (ext := extension_of(source)) is not None and source.stat().st_mtime > ext.stat().st_mtime]
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    unlisted = [str(path.relative_to(ROOT)) for package in ("coordinator_server", "protocol")
                for path in (ROOT / package).rglob("*.so")
                if path.name.endswith(suffixes) and source_of(path) not in listed
                and source_of(path, ".c") not in c_listed]
    if stale or unlisted:
        pytest.exit(f"the compiled build does not match the sources (older than {stale}, not in setup.py {unlisted}):"
                    " run `make build` (or `pip install --no-deps -e .`) first", returncode=4)


@pytest.fixture(autouse=True)
def _close_leaked_kafka_python_producers() -> Iterator[None]:
    """kafka-python 3.0.12's `KafkaProducer.close(timeout)` raises out of its flush when records are still
    unsent, and then never stops its sender thread; once the test's server is gone, that thread loops on
    UnknownBrokerIdError and logs every turn into pytest's capture. In one CI rehearsal such a thread held
    a core and grew its worker to 2.5 GB, starving every later test there. A producer a test left open is
    stopped here, so one test's failure stays that test's. No producer outlives a test legitimately: the
    session fixtures that produce (the pipeline's demo history) stop theirs before they return."""
    yield
    from kafka import KafkaProducer
    from kafka.producer.sender import Sender

    if not any(isinstance(t, Sender) and t.is_alive() for t in threading.enumerate()):
        return
    for obj in gc.get_objects():
        if isinstance(obj, KafkaProducer) and not getattr(obj, "_closed", True) and obj._sender is not None:
            obj._sender.force_close()
