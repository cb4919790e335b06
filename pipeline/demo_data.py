"""`coordinator-server pipeline demo-data --out DIR`: a real history, written by the real server.

Starts the server (`python -m coordinator_server`, as a subprocess per node) and drives it with stock
kafka-python clients: a producer writing to the node's topics all along, and consumer-group members —
each a `pipeline.demo_client` process of its own — that join, commit, leave with LeaveGroup, crash with
SIGKILL (so the coordinator has to expire them), plus a group deleted with DeleteGroups. At the end the
server itself is killed with SIGKILL and restarted, and its OffsetFetch answers for every group are
recorded: what the server reloaded from the log it wrote.

    DIR/node-0/            data directory of node 0 (`__consumer_offsets-N/`, `<topic>-<p>/`), and
                           `server-log.jsonl`: the server's JSON log of every run (for `pipeline explain`)
    DIR/node-1/            node 1: independent server, different groups and topics
    DIR/manifest.json      what the clients did and what the server answered (the tests' expectations)

So the pipeline's tests read logs the server really wrote, not hand-made fixtures. About 20 s; the nodes
run in parallel.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError, TopicAlreadyExistsError

START_TIMEOUT_S = 30.0
SESSION_TIMEOUT_MS = 3000
SERVER_FLAGS = [
    "--initial-rebalance-delay-ms", "0",  # joins complete at once: a short demo still has many generations
    "--min-session-timeout-ms", "1000",
    "--offsets-partitions", "4",  # a few __consumer_offsets partitions, so several are read and merged
    "--log-cleaner-enable", "false",  # keep the whole history: compaction would drop superseded commits
]


_T = TypeVar("_T")
_TRANSIENT = (KafkaConnectionError, KafkaTimeoutError)


def _admin(bootstrap: str, what: Callable[[KafkaAdminClient], _T], attempts: int = 5) -> _T:
    """Run an admin call with a fresh client, retrying connection failures: on a loaded CI machine a
    client's first connection can fail, and a demo run should not fail for that."""
    for attempt in range(attempts):
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo-admin")
            try:
                return what(admin)
            finally:
                admin.close()
        except _TRANSIENT:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


SERVER_LOG = "server-log.jsonl"  # in the data directory, where the server ignores it (it reads directories)


class Server:
    """The server as a subprocess on port 0 (the `listening` log event says which port), its JSON log
    (stderr) appended to `<data dir>/server-log.jsonl`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen[str] | None = None
        self.port = -1
        self.stderr_tail: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Server:
        argv = [sys.executable, "-m", "coordinator_server", "--host", "127.0.0.1", "--port", "0",
                "--data-dir", str(self.data_dir), "--log-format", "json", *SERVER_FLAGS]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.data_dir / SERVER_LOG, "a", encoding="utf-8")  # noqa: SIM115 (the reader closes it)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        listening = threading.Event()

        def read(proc: subprocess.Popen[str]) -> None:
            assert proc.stderr is not None
            with log_file:
                for line in proc.stderr:
                    log_file.write(line)
                    log_file.flush()  # a SIGKILLed server's last lines are on disk too
                    self.stderr_tail = [*self.stderr_tail[-50:], line.rstrip()]
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        if isinstance(event, dict) and event.get("event") == "listening":
                            self.port = int(event["port"])
                            listening.set()

        threading.Thread(target=read, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise RuntimeError("server did not start:\n" + "\n".join(self.stderr_tail))
        return self

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


class MemberStalled(RuntimeError):
    """A member did not get as far as the scenario needs in time. With kafka-python 3.0.12 that is, now
    and then on a loaded machine, a client that stops dead after a quick second rebalance (no heartbeat,
    no rejoin); `generate` then writes the history again from the start."""


class Member:
    """A `pipeline.demo_client` process and the events it reported."""

    def __init__(self, server: Server, group: str, topics: Sequence[str], client_id: str,
                 slow: bool = False, *client_args: str, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.group, self.client_id, self.topics = group, client_id, list(topics)
        self.events: list[dict[str, Any]] = []
        self.fate = "running"
        argv = [sys.executable, "-m", "pipeline.demo_client", "--bootstrap", server.bootstrap, "--group", group,
                "--client-id", client_id, "--session-timeout-ms", str(session_timeout_ms), *client_args]
        argv += [a for t in topics for a in ("--topic", t)] + (["--slow"] if slow else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def wait_for(self, event: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e["event"] == event for e in list(self.events)):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise MemberStalled(f"{self.client_id} reported no {event!r}: {self.events[-5:]}")
            time.sleep(0.05)

    def wait_commit(self, timeout_s: float = 60.0) -> None:
        """Until it committed in its latest generation, so that generation's work is in the log."""
        # Generous: on a loaded 2-core CI machine a member's first join (metadata, JoinGroup, the
        # rebalance delay, SyncGroup, a fetch) has taken more than 20 s.
        deadline = time.monotonic() + timeout_s
        while True:
            events = list(self.events)
            assigned = [i for i, e in enumerate(events) if e["event"] == "assigned"]
            if assigned and any(e["event"] == "commit" for e in events[assigned[-1]:]):
                return
            if time.monotonic() > deadline:
                raise MemberStalled(f"{self.client_id} did not commit: {events[-5:]}")
            time.sleep(0.05)

    def assignments(self) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == "assigned"]

    def wait_assigned(self, count: int, timeout_s: float = 60.0) -> dict[str, Any]:
        """Until it was assigned partitions `count` times in all (its count-th SyncGroup); that one."""
        deadline = time.monotonic() + timeout_s
        while len(self.assignments()) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise MemberStalled(f"{self.client_id} was not assigned {count} times: {self.events[-5:]}")
            time.sleep(0.05)
        return self.assignments()[count - 1]

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def leave(self) -> None:
        """Graceful: the client closes (LeaveGroup) and exits."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        self.proc.wait(30)
        self._reader.join(5)
        self.fate = "left"

    def crash(self) -> None:
        """kill -9: no LeaveGroup; the coordinator notices when the session times out."""
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
        self.fate = "killed"

    def record(self) -> dict[str, Any]:
        return {"group": self.group, "client_id": self.client_id, "topics": self.topics, "fate": self.fate,
                "events": self.events}


@dataclass
class Node:
    name: str
    data_dir: Path
    topics: dict[str, int]
    scenario: Callable[[Node], None]
    server: Server = field(init=False)
    members: list[Member] = field(default_factory=list)
    deleted_groups: list[str] = field(default_factory=list)
    stop_producing: threading.Event = field(default_factory=threading.Event)

    def member(self, group: str, topics: Sequence[str], client_id: str, slow: bool = False) -> Member:
        m = Member(self.server, group, topics, client_id, slow)
        self.members.append(m)
        return m


def _produce(node: Node, per_second: int) -> None:
    producer = KafkaProducer(bootstrap_servers=node.server.bootstrap, client_id=f"{node.name}-producer",
                             linger_ms=20)
    i = 0
    try:
        while not node.stop_producing.is_set():
            for topic in node.topics:
                producer.send(topic, key=str(i).encode(), value=f"{topic} record {i}".encode())
            i += 1
            time.sleep(1 / per_second)
        producer.flush(10)
    finally:
        producer.close(5)


def _stop_producer(node: Node, producer: threading.Thread | None) -> None:
    node.stop_producing.set()
    if producer is not None:
        producer.join(30)


def _shop(node: Node) -> None:
    """Node 0: an orders app that scales out and loses a member to SIGKILL, a payments app whose members
    are replaced, an audit consumer that falls behind, and a short-lived group that is deleted."""
    o1 = node.member("orders-app", ["orders"], "orders-1")
    p1 = node.member("payments-app", ["payments"], "payments-1")
    audit = node.member("audit", ["orders", "payments"], "audit-1", slow=True)
    o1.wait_commit()
    p1.wait_commit()
    tmp = node.member("scratch", ["payments"], "scratch-1")
    o2 = node.member("orders-app", ["orders"], "orders-2")
    o2.wait_commit()
    o3 = node.member("orders-app", ["orders"], "orders-3")
    o3.wait_commit()
    tmp.wait_commit()
    tmp.leave()  # the group is Empty now, so DeleteGroups may delete it
    _admin(node.server.bootstrap, lambda a: a.delete_groups(["scratch"]))
    node.deleted_groups.append("scratch")
    o2.crash()
    p2 = node.member("payments-app", ["payments"], "payments-2")
    p2.wait_commit()
    p1.leave()
    time.sleep(SESSION_TIMEOUT_MS / 1000 + 0.5)  # orders-2's session expires: another rebalance
    o1.wait_commit()
    time.sleep(1.0)
    for m in (o1, o3, p2, audit):
        m.leave()


def _billing(node: Node) -> None:
    """Node 1: one group on another server; a member joins and the first one leaves."""
    b1 = node.member("billing-app", ["invoices"], "billing-1")
    b1.wait_commit()
    b2 = node.member("billing-app", ["invoices"], "billing-2")
    b2.wait_commit()
    b1.leave()
    b2.wait_commit()
    time.sleep(1.0)
    b2.leave()


def _run_node(node: Node, manifest: dict[str, Any]) -> None:
    node.server = Server(node.data_dir).start()
    producer: threading.Thread | None = None
    try:
        def create(admin: KafkaAdminClient) -> None:
            with contextlib.suppress(TopicAlreadyExistsError):  # a retry after a lost answer
                admin.create_topics([NewTopic(t, n, 1) for t, n in node.topics.items()])

        _admin(node.server.bootstrap, create)
        producer = threading.Thread(target=_produce, args=(node, 40), daemon=True)
        producer.start()
        node.scenario(node)
    except BaseException:
        # The producer flushes against a live server first: killed under it, its last flush would fail.
        _stop_producer(node, producer)
        node.server.stop(signal.SIGKILL)
        raise
    finally:
        _stop_producer(node, producer)
        for m in node.members:
            if m.proc.poll() is None:
                m.crash()
    groups = sorted({m.group for m in node.members} - set(node.deleted_groups))
    before = _offset_fetch(node.server.bootstrap, groups)
    node.server.stop(signal.SIGKILL)  # a crash: the restart must replay the log it wrote
    node.server.start()
    try:
        after = _offset_fetch(node.server.bootstrap, groups)
        end_offsets = _end_offsets(node.server.bootstrap, node.topics)
    finally:
        node.server.stop()
    if before != after:
        raise RuntimeError(f"{node.name}: OffsetFetch changed across a restart: {before} != {after}")
    manifest[node.name] = {
        "data_dir": str(node.data_dir), "topics": node.topics, "deleted_groups": node.deleted_groups,
        "members": [m.record() for m in node.members], "offset_fetch": after, "end_offsets": end_offsets,
    }


def _offset_fetch(bootstrap: str, groups: Sequence[str]) -> dict[str, dict[str, int]]:
    """The server's OffsetFetch answers: group -> "topic:partition" -> committed offset."""
    out: dict[str, dict[str, int]] = {}
    for group in groups:
        answer = _admin(bootstrap, lambda a, g=group: a.list_group_offsets({g: None})[g])  # type: ignore[misc]
        out[group] = {f"{tp.topic}:{tp.partition}": om.offset for tp, om in sorted(answer.items())}
    return out


def _end_offsets(bootstrap: str, topics: dict[str, int], attempts: int = 5) -> dict[str, int]:
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    for attempt in range(attempts):
        try:
            consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="demo-end-offsets")
            try:
                return {f"{tp.topic}:{tp.partition}": o for tp, o in sorted(consumer.end_offsets(tps).items())}
            finally:
                consumer.close()
        except _TRANSIENT:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def generate(out: Path, force: bool = False, attempts: int = 3) -> Path:
    """Write the demo history under `out`; returns the manifest's path."""
    if out.exists() and any(out.iterdir()):
        if not force:
            raise SystemExit(f"{out} is not empty (use --force to replace it)")
        shutil.rmtree(out)
    for attempt in range(1, attempts + 1):
        try:
            return _generate(out)
        except MemberStalled as e:
            if attempt == attempts:
                raise
            print(f"demo-data: {e}; writing the history again", file=sys.stderr)
            shutil.rmtree(out)
    raise AssertionError("unreachable")


def _generate(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    nodes = [Node("node-0", out / "node-0", {"orders": 3, "payments": 2}, _shop),
             Node("node-1", out / "node-1", {"invoices": 2}, _billing)]
    manifest: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(node: Node) -> None:
        try:
            _run_node(node, manifest)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    path = out / "manifest.json"
    path.write_text(json.dumps({"nodes": manifest}, indent=1, sort_keys=True))
    return path


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coordinator-server pipeline demo-data",
                                     description="Drive real servers with real clients to write a log history.")
    parser.add_argument("--out", default="build/pipeline/demo", help="output directory (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    args = parser.parse_args(argv)
    # The children import this package: make sure they find it even when it is run from a source tree.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                            os.environ.get("PYTHONPATH")]))
    started = time.monotonic()
    path = generate(Path(args.out), args.force)
    print(f"demo data in {path.parent} ({time.monotonic() - started:.0f} s); nodes: "
          + ", ".join(str(p) for p in sorted(path.parent.glob("node-*"))))
    return 0
