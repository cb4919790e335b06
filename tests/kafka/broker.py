"""A real Apache Kafka broker beside the server: one KRaft node that is its own controller, run from the jars
`make kafka-deps` puts in build/kafka/lib (tests/kafka/pom.xml pins the versions).

    broker = KafkaBroker(tmp_dir).start()     # formats a fresh log dir, starts, waits until ready
    ...connect to (broker.host, broker.port)...
    broker.stop()

Ready means more than listening: a fresh broker answers FindCoordinator with COORDINATOR_NOT_AVAILABLE until
it has created `__consumer_offsets`, and a group request with NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
until the group's partition of it is loaded. So `start` returns only once a FindCoordinator for a probe group
answers with no error and a DescribeGroups of one probe group per partition of `__consumer_offsets` answers
every group with no error. The JVM is sized for a 2-core machine shared with other work.

A node of a three-node cluster (tests/kafka/cluster.py) is a KafkaBroker too, given its node id and the
static quorum's voters; the cluster formats and launches its nodes, then waits until all are ready.

`python -m tests.kafka.broker [--port P] [--controller-port C] [--dir D]` runs one in the foreground
(`make kafka`) until interrupted. A broker started here dies with the process that started it
(PR_SET_PDEATHSIG), so a test run killed without its teardown leaves no JVM behind.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its schemas with deprecated importlib.resources calls on first import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

REPO = Path(__file__).resolve().parents[2]
LIB_DIR = REPO / "build" / "kafka" / "lib"
START_TIMEOUT_S = 180.0
FIND_COORDINATOR_VERSION = 4  # batched (coordinator_keys); Kafka 4 serves v0-v6
PROBE_GROUP = "kafka-beside-ready-probe"
OFFSETS_PARTITIONS = 50  # Kafka's default, and the server's

# Settings for one combined broker+controller on 2 cores. Every replication factor is 1 (one node) and the
# first rebalance of a classic group is not delayed, as the server is run in the differential tests.
BROKER_SETTINGS = {
    "process.roles": "broker,controller",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "num.replica.fetchers": "1",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # A consumer group's (KIP-848) target assignment computed at once, on the heartbeat that needs it, on the
    # coordinator's thread: what the server does. By default Kafka 4.4 batches it (at most once a second)
    # off that thread, so when a member sees its new assignment would depend on timing.
    "group.consumer.assignment.interval.ms": "0",
    "group.consumer.assignor.offload.enable": "false",
    "auto.create.topics.enable": "true",
    "log.flush.interval.messages": str(2**63 - 1),
}
JVM_OPTIONS = ["-Xms256m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:ParallelGCThreads=2",
               "-XX:ConcGCThreads=1", "-XX:CICompilerCount=2", "-Djava.awt.headless=true"]

LOG4J2_CONFIG = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def random_cluster_id() -> str:
    """A cluster id as Kafka's own tool makes one: 16 random bytes in URL-safe base64 without padding, never
    starting with '-' (a command line would take it for an option). Made here to save a JVM start."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _die_with_parent() -> None:
    # In the child, before exec: SIGKILL when the thread that started it exits.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.setpgrp()  # its own process group: a Ctrl-C at `make kafka` reaches it through us, once


class KafkaBroker:
    def __init__(self, work_dir: Path, *, port: int = 0, controller_port: int = 0, heap: str = "1g",
                 lib_dir: Path = LIB_DIR, host: str = "127.0.0.1", settings: dict[str, str] | None = None,
                 node_id: int = 1, voters: str | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.settings = {**BROKER_SETTINGS, **(settings or {})}  # e.g. the bench's flush per write
        self.node_id = node_id
        # A cluster's static quorum (`id@host:port,...`); None: this node alone, a dynamic quorum of one.
        self.voters = voters
        self.host = host
        self.port = port or free_port(host)
        self.controller_port = controller_port or free_port(host)
        self.heap = heap
        self.lib_dir = lib_dir
        self.log_path = self.work_dir / "kafka.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0  # how long start() took

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _java(self, *args: str) -> list[str]:
        if not any(self.lib_dir.glob("kafka_2.13-*.jar")):
            raise RuntimeError(f"no Kafka jars in {self.lib_dir}: run `make kafka-deps` first")
        java = shutil.which("java") or "java"
        return [java, f"-Xmx{self.heap}", *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
                "-cp", f"{self.lib_dir}/*", *args]

    def _write_config(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log_dir = self.work_dir / "log"
        shutil.rmtree(log_dir, ignore_errors=True)
        quorum = ({"controller.quorum.voters": self.voters} if self.voters else
                  {"controller.quorum.bootstrap.servers": f"{self.host}:{self.controller_port}"})
        settings = {
            **self.settings,
            "node.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            **quorum,
            "log.dirs": str(log_dir),
        }
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.work_dir / "log4j2.properties").write_text(LOG4J2_CONFIG)
        return path

    def start(self, timeout_s: float = START_TIMEOUT_S, *, fresh: bool = True) -> KafkaBroker:
        """Start and wait until ready: on a freshly formatted log dir, or (fresh=False, a restart) on the
        log dir of the last run, which it then loads; `started_s` is how long either took."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        began = time.monotonic()
        if fresh:
            self.format(random_cluster_id()).wait()
        self.launch()
        try:
            self._wait_ready(began + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - began
        return self

    def format(self, cluster_id: str) -> _Formatting:
        """Write the config and format a fresh log dir (a JVM of its own: a cluster formats its nodes at once)."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        config = self._write_config()
        # A single controller forms its own quorum (a dynamic one of one voter): --standalone. A static
        # quorum's voters are in the config.
        standalone = [] if self.voters else ["--standalone"]
        with open(self.log_path, "ab") as log:
            return _Formatting(subprocess.Popen(
                self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config), *standalone),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent))

    def launch(self) -> None:
        """Start the formatted node; `start` (or the cluster) waits until it is ready."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self._java("kafka.Kafka", str(self.work_dir / "server.properties")),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)

    def _wait_ready(self, deadline: float) -> None:
        error: object = "not listening"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode} before it was ready:\n{self.log_tail()}")
            try:
                error = self.find_coordinator_error(PROBE_GROUP)
                if error == 0:
                    error = self.unloaded_partitions()
                    if not error:
                        return
            except OSError as e:
                error = e
            time.sleep(0.1)
        raise RuntimeError(f"Kafka was not ready in time (last: {error!r}):\n{self.log_tail()}")

    def find_coordinator_error(self, group_id: str) -> int:
        """The error code of a FindCoordinator for one group (0 once the offsets topic is served)."""
        return int(find_coordinators((self.host, self.port), [group_id])[0].error_code)

    def unloaded_partitions(self) -> list[int]:
        """The partitions of `__consumer_offsets` whose probe group a DescribeGroups answers with an error."""
        probes = probe_groups(OFFSETS_PARTITIONS)
        return sorted(probes[g] for g in describe_errors((self.host, self.port), list(probes)))

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (Kafka shuts down cleanly), then SIGKILL if it takes longer than timeout_s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class _Formatting:
    """A running `StorageTool format`: `wait` raises if it failed, as `subprocess.run(check=True)` would."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def wait(self, timeout_s: float = 120.0) -> None:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        if code != 0:
            raise subprocess.CalledProcessError(code, self.proc.args)


def call(address: tuple[str, int], request: Any, response_cls: Any, timeout_s: float = 5.0) -> Any:
    """One request on a connection of its own, its response decoded."""
    request.with_header(correlation_id=1, client_id="kafka-beside")
    with socket.create_connection(address, timeout=timeout_s) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        return response_cls.decode(recv_exactly(sock, size), version=request.API_VERSION, header=True)


def find_coordinators(address: tuple[str, int], group_ids: list[str]) -> list[Any]:
    """A batched FindCoordinator of these groups at one node: its `coordinators` (node, host, port, error)."""
    request = FindCoordinatorRequest[FIND_COORDINATOR_VERSION](key_type=0, coordinator_keys=group_ids)
    return list(call(address, request, FindCoordinatorResponse).coordinators)


def describe_errors(address: tuple[str, int], group_ids: list[str]) -> list[str]:
    """The groups a DescribeGroups at one node answers with an error (NOT_COORDINATOR, a load in progress)."""
    request = DescribeGroupsRequest[5](groups=group_ids, include_authorized_operations=False)
    return [g.group_id for g in call(address, request, DescribeGroupsResponse).groups if g.error_code != 0]


def _java_string_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The partition of `__consumer_offsets` (and so the coordinator) of a group: the absolute value of the
    Java hash code of its id, modulo the partition count (the most negative hash counts as 0)."""
    h = _java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def probe_group_for(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> str:
    """Another group id with the same coordinator as `group_id`."""
    target = offsets_partition(group_id, partitions)
    return next(g for i in range(100_000) if offsets_partition(g := f"probe-{i}-{group_id}", partitions) == target)


def probe_groups(partitions: int) -> dict[str, int]:
    """One group id for each partition of `__consumer_offsets`."""
    probes: dict[str, int] = {}
    covered: set[int] = set()
    i = 0
    while len(covered) < partitions:
        group = f"{PROBE_GROUP}-{i}"
        p = offsets_partition(group, partitions)
        if p not in covered:
            covered.add(p)
            probes[group] = p
        i += 1
    return probes


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes from a blocking socket, or ConnectionError if it closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by Kafka")
        buf += chunk
    return buf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a single-node Apache Kafka broker in the foreground.")
    parser.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
    parser.add_argument("--controller-port", type=int, default=0, help="controller port (default: a free one)")
    parser.add_argument("--dir", default=None, help="work dir: config, log dir, kafka.log (default: a new tmp dir)")
    parser.add_argument("--heap", default="1g", help="the JVM's -Xmx")
    args = parser.parse_args(argv)
    work_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kafka-beside-"))
    broker = KafkaBroker(work_dir, port=args.port, controller_port=args.controller_port, heap=args.heap)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        broker.start()
        print(f"Kafka ready on {broker.address} after {broker.started_s:.1f} s (log: {broker.log_path});"
              " Ctrl-C stops it", flush=True)
        assert broker.proc is not None
        broker.proc.wait()
        print(f"Kafka exited with {broker.proc.returncode}:\n{broker.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
