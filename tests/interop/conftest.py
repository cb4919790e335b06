"""Interop suite: every real client, each in its own process, against the real server.

A driver (tests/interop/drivers/*, tests/interop/node/*, tests/interop/go/*, tests/interop/java/) is one group member or one
producer. It reports on stdout as JSON lines (see drivers/common.py); `Member` collects them. Members are
started in their own process group, so kill -9 / SIGSTOP reach a wrapped kcat too, and every one is
killed at teardown whatever the outcome.

A cell a client cannot do is marked `@pytest.mark.unsupported("reason")`: it is reported as skipped
with "not supported by client: <reason>" (and shows as such in docs/compatibility.md), never silently.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ServerFactory, ServerProcess, server_factory  # noqa: F401
from tests.interop import go_build, java_build

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "interop" / "node"
TOPIC = "t"
PARTITIONS = 10
ALL = frozenset(range(PARTITIONS))

CLIENTS = ["kafka-python", "confluent-kafka", "aiokafka", "kcat", "kafkajs", "sarama", "kafka-go",
           "platformatic-kafka", "franz-go", "ibm-sarama", "kafka-go-0.4", "java",
           # KIP-848's protocol (group.protocol=consumer): librdkafka 2.16, franz-go 1.22 and Apache Kafka's
           # own Java client speak it.
           "confluent-kafka+consumer", "franz-go+consumer", "java+consumer"]
CONSUMER_PROTOCOL_SUFFIX = "+consumer"
_PY_DRIVERS = {"kafka-python": "kafka_python_driver", "confluent-kafka": "confluent_driver",
               "aiokafka": "aiokafka_driver", "kcat": "kcat_driver"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "interop: a real client library in a subprocess against the real server")
    config.addinivalue_line("markers", "unsupported(reason): the client cannot do this scenario (reported, not run)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    mark = item.get_closest_marker("unsupported")
    if mark is not None:
        pytest.skip(f"not supported by client: {mark.args[0]}")


_NODE_DRIVERS = {"kafkajs": ("kafkajs", "kafkajs_driver.js"),
                 "platformatic-kafka": ("@platformatic/kafka", "platformatic_driver.mjs")}
# Debian's old releases (GOPATH build) and the current ones from the module proxy (tests/interop/go/mod).
_GO_CLIENTS = {"sarama", "kafka-go"}
_GO_MODULE_CLIENTS = {"franz-go", "ibm-sarama", "kafka-go-0.4"}


def driver_argv(client: str) -> list[str]:
    if client in _NODE_DRIVERS:
        package, script = _NODE_DRIVERS[client]
        node = shutil.which("node")
        if node is None or not (NODE_DIR / "node_modules" / package).is_dir():
            raise RuntimeError(f"{package} is not installed: run `make interop-deps`")
        return [node, str(NODE_DIR / script)]
    if client in _GO_CLIENTS:
        return [str(go_build.driver_binary()), "--client", client]
    if client in _GO_MODULE_CLIENTS:
        return [str(go_build.module_driver_binary()), "--client", client]
    if client == "java":  # Apache Kafka's KafkaConsumer and KafkaProducer (tests/interop/java)
        return java_build.driver_argv()
    if client == "kcat" and shutil.which("kcat") is None:
        raise RuntimeError("kcat is not installed: run `make interop-deps`")
    return [sys.executable, "-m", f"tests.interop.drivers.{_PY_DRIVERS[client]}"]


class Member:
    """One driver process and what it reported."""

    def __init__(self, client: str, name: str, srv: ServerProcess, log_dir: Path, **opts: Any) -> None:
        self.client = client
        self.name = name
        self.opts = opts
        base = client.removesuffix(CONSUMER_PROTOCOL_SUFFIX)
        argv = [*driver_argv(base), "--bootstrap", srv.address, "--topic", TOPIC]
        if base != client:
            argv += ["--group-protocol", "consumer"]
        for key, value in opts.items():
            if value is not None:
                argv += ["--" + key.replace("_", "-"), str(value)]
        self.argv = argv
        self.stderr_path = log_dir / f"{name}.stderr"
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=err, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    # ---------------------------------------------------------------------------------- reports

    def evs(self, *names: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if not names or e["ev"] in names]

    @property
    def owned(self) -> frozenset[int]:
        changes = self.evs("assigned", "revoked", "lost")
        return frozenset(changes[-1]["owned"]) if changes else frozenset()

    @property
    def version(self) -> str:
        starts = self.evs("start")
        return str(starts[0]["version"]) if starts else "?"

    def records(self, since: float = 0.0) -> list[tuple[int, int]]:
        return [(p, o) for e in self.evs("records") if e["t"] >= since for p, o in e["recs"]]

    def revoked_since(self, since: float) -> set[int]:
        return {p for e in self.evs("revoked", "lost") if e["t"] >= since for p in e["partitions"]}

    def describe(self) -> str:
        tail = [json.dumps(e)[:300] for e in self.evs() if e["ev"] != "records"][-12:]
        try:
            err = self.stderr_path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            err = []
        return (f"--- {self.name} ({self.client}) rc={self.proc.poll()} owned={sorted(self.owned)}\n"
                + "\n".join(tail) + "\n  stderr:\n  " + "\n  ".join(err))

    # ---------------------------------------------------------------------------------- control

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill9(self) -> None:
        self._signal_group(signal.SIGKILL)
        self.proc.wait(10)

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def terminate(self, timeout_s: float = 20.0) -> int:
        """SIGTERM: the driver closes its client (LeaveGroup for a dynamic member) and exits."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self.cleanup()

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        return self.proc.wait(timeout_s)

    def cleanup(self) -> None:
        self._signal_group(signal.SIGCONT)
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Harness:
    """Starts members against one server, remembers them, kills them all at teardown."""

    def __init__(self, srv: ServerProcess, log_dir: Path, record: Callable[[str, object], None]) -> None:
        self.srv = srv
        self.log_dir = log_dir
        self.members: list[Member] = []
        self._record = record
        self._versions: dict[str, str] = {}

    def start(self, client: str, name: str, **opts: Any) -> Member:
        m = Member(client, name, self.srv, self.log_dir, **opts)
        self.members.append(m)
        return m

    def produce(self, client: str, count: int, timeout_s: float = 60.0) -> None:
        p = self.start(client, f"producer-{len(self.members)}", role="producer", count=count)
        code = p.wait_exit(timeout_s)
        p.cleanup()
        assert code == 0 and p.evs("produced"), "producer failed:\n" + p.describe()

    def note_versions(self) -> None:
        for m in self.members:
            if m.version != "?":
                self._versions[m.client] = m.version
        for client, version in sorted(self._versions.items()):
            self._record(f"version:{client}", version)

    def report(self) -> str:
        lines = [line[:400] for line in self.srv.stderr_lines()
                 if '"connection_opened"' not in line and '"partition_loaded"' not in line]
        server = "\n".join(lines[-25:])
        return ("\n".join(m.describe() for m in self.members) + f"\n--- logs in {self.log_dir}\n"
                "--- server log tail\n" + server)

    def wait(self, cond: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{self.report()}")
            time.sleep(0.1)

    def wait_partitioned(self, members: list[Member], timeout_s: float = 30.0, settle_s: float = 1.0,
                         what: str = "") -> dict[str, frozenset[int]]:
        """Until every member owns a non-empty set, the sets are disjoint and cover the topic, and stay so."""

        def snapshot() -> dict[str, frozenset[int]] | None:
            sets = {m.name: m.owned for m in members}
            if not all(sets.values()) or sum(len(s) for s in sets.values()) != PARTITIONS:
                return None
            return sets if frozenset().union(*sets.values()) == ALL else None

        deadline = time.monotonic() + timeout_s
        while True:
            first = snapshot()
            if first is not None:
                time.sleep(settle_s)
                if snapshot() == first:
                    return first
            if time.monotonic() > deadline:
                names = ", ".join(m.name for m in members)
                raise AssertionError(f"timed out after {timeout_s}s: {what or names} never owned each of the "
                                     f"{PARTITIONS} partitions exactly once\n{self.report()}")
            time.sleep(0.1)


LOG_ROOT = REPO / "build" / "interop-logs"


def fixed_port() -> int:
    """A free port below the ephemeral range: restarted on it, the server cannot meet a client that, while
    the server was down, connected to itself on that port (a TCP self-connect needs an ephemeral port)."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


@pytest.fixture
def harness(server_factory: ServerFactory, request: pytest.FixtureRequest,  # noqa: F811
            record_property: Callable[[str, object], None]) -> Iterator[Harness]:
    """A server (debug logs) and the members of one test; every log ends up in build/interop-logs/<test>/."""
    log_dir = LOG_ROOT / re.sub(r"[^A-Za-z0-9_.:-]+", "_", request.node.name).replace(":", "-")
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    # A short initial rebalance delay (Kafka's default is 3000 ms): clients send their first JoinGroup before
    # their own first Metadata answer, so with 0 the first leader assigns from an empty metadata snapshot
    # and must rejoin at once — which trips a kafka-python 3.0.12 bug (tests/client_contract.py).
    # KIP-848 members' session timeout and heartbeat interval are the coordinator's: 3 s and 300 ms, as the
    # classic members' are in the scenarios that kill one.
    srv = server_factory(initial_rebalance_delay_ms=300, min_session_timeout_ms=500, log_level="debug",
                         topic=[f"{TOPIC}:{PARTITIONS}"], port=fixed_port(),
                         group_consumer_min_session_timeout_ms=3000, group_consumer_session_timeout_ms=3000,
                         group_consumer_min_heartbeat_interval_ms=300, group_consumer_heartbeat_interval_ms=300)
    h = Harness(srv, log_dir, record_property)
    try:
        yield h
    finally:
        h.note_versions()
        for m in h.members:
            m.cleanup()
        (log_dir / "server.log").write_text("\n".join(srv.stderr_lines()) + "\n")
