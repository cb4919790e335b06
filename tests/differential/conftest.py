"""Apache Kafka and the server, each started once per test session, for the differential scenarios.

    def test_x(differential):
        differential("scenario-name")   # runs it against both; fails on any difference the doc lacks

Kafka comes from build/kafka/lib (`make kafka-deps`); without the jars the tests are skipped with that
command. xdist workers share one broker (tests/kafka/shared.py). The server runs with no initial rebalance
delay, as Kafka does here, and otherwise its defaults (which are Kafka's).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.differential.harness import LIB_DIR, REPO, SECTION, Target, documented, run_scenario
from tests.integration.conftest import ServerProcess
from tests.kafka.shared import BrokerAddress, shared_broker

OBSERVED_DIR = REPO / "build" / "differential"


def _shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # xdist workers each get base/popen-gwN; their parent is shared by the whole run.
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "kafka-shared"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerAddress]:
    if not any(LIB_DIR.glob("kafka_2.13-*.jar")):
        pytest.skip("no Apache Kafka jars in build/kafka/lib: run `make kafka-deps`")
    with shared_broker(_shared_dir(tmp_path_factory)) as broker:
        yield broker


@pytest.fixture(scope="session")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The server, started without waiting: `targets` waits once Kafka is up, so the two start together."""
    srv = ServerProcess(tmp_path_factory.mktemp("differential-server"), {"initial_rebalance_delay_ms": 0})
    srv.start(wait=False)
    yield srv
    if srv.running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            srv.terminate(10.0)


@pytest.fixture(scope="session")
def targets(coordinator: ServerProcess, kafka_broker: BrokerAddress) -> list[Target]:
    coordinator.wait_listening()
    return [Target("kafka", kafka_broker.host, kafka_broker.port), Target("server", coordinator.host, coordinator.port)]


@pytest.fixture
def differential(targets: list[Target]) -> Callable[[str], None]:
    def check(name: str) -> None:
        observed = run_scenario(name, targets)
        OBSERVED_DIR.mkdir(parents=True, exist_ok=True)
        (OBSERVED_DIR / f"{name}.md").write_text("".join(d.row() + "\n" for d in observed))
        listed = {row.difference for row in documented() if row.difference.scenario == name}
        unexpected = [d for d in observed if d not in listed]
        gone = sorted(d for d in listed if d not in observed)
        message = []
        if unexpected:
            message.append(f"Kafka and the server differ where docs/compatibility.md '{SECTION}' says nothing "
                           "(fix the server, or add the row with its reason):\n"
                           + "\n".join(d.row() for d in unexpected))
        if gone:
            message.append(f"rows of docs/compatibility.md '{SECTION}' that no longer differ (remove them):\n"
                           + "\n".join(d.row() for d in gone))
        assert not message, "\n\n".join(message)
    return check
