"""Shared machinery of the end-to-end tests: real Kafka clients, each in its own OS process.

Run as a script, this file *is* the client process (stdlib imports only at the top, so it runs with
`.venv/bin/python tests/integration/e2e_support.py ...` outside pytest):

    e2e_support.py consumer --client kafka-python|aiokafka --bootstrap H:P --group G --topic T --name N
    e2e_support.py producer --client kafka-python|aiokafka --bootstrap H:P --topic T --total N

Every process writes JSON lines on stdout (flushed per line), each with `t` = time.time() at emission:

    consumer: {"ev": "started"}
              {"ev": "assigned", "gen": G, "partitions": [...]}       (rebalance listener)
              {"ev": "revoked", "partitions": [...]}
              {"ev": "recs", "p": P, "o": [offsets...], "k": [keys...]}  one per partition per poll
              {"ev": "commit", "offsets": {"P": offset}}            an OffsetCommit the server acknowledged
              {"ev": "final_commit", "offsets": {...}}              after the `pause` command's commit()
              {"ev": "closed"}
    producer: {"ev": "acks", "a": [[key, partition, offset], ...]}  acknowledged records
              {"ev": "error", "key": K, "error": "..."}             a record the producer gave up on
              {"ev": "done", "acked": N}

A consumer reads commands on stdin: `pause` (stop polling, commit the current positions synchronously,
report them as final_commit; kafka-python's commit() returns after the ack) and `close` (pause if not
yet, then close the client, which sends LeaveGroup, and exit 0). SIGKILL is a real crash.

"commit" events come from instrumenting the client's one commit coroutine (kafka-python's
`ConsumerCoordinator._send_offset_commit_request`, aiokafka's `GroupCoordinator._do_commit_offsets`):
the wrapper reports the offsets after the coroutine returned without raising, i.e. after the server
acknowledged every partition. Automatic, pre-rebalance and explicit commits all go through it.

The test side (`Workers`, `run_scenario`, `verify`) starts these processes, collects their events and
checks the end-to-end invariants; see `verify`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conftest import ServerProcess

SCRIPT = Path(__file__).resolve()


def free_port() -> int:
    """A port that was free a moment ago (the server is started on it, so a restart keeps it).

    Picked *below* the kernel's ephemeral range: while the server is down, the clients keep connecting
    to the port, and one whose own ephemeral port happened to be the same would connect to itself
    (TCP simultaneous open) and keep the restarted server from binding."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, max(low, 10_001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


# ===================================================================================== process side

_out_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    line = json.dumps({"ev": ev, "t": time.time(), **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _stdin_commands() -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("eof")

    threading.Thread(target=read, daemon=True).start()
    return q


def _offsets_json(offsets: dict[Any, Any]) -> dict[str, int]:
    return {str(tp.partition): int(getattr(om, "offset", om)) for tp, om in offsets.items()}


def kafka_python_consumer(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name, enable_auto_commit=True,
        auto_commit_interval_ms=a.auto_commit_interval_ms, session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_interval_ms, auto_offset_reset="earliest",
        max_poll_records=a.max_poll_records, request_timeout_ms=10_000, reconnect_backoff_max_ms=200,
    )
    coord = consumer._coordinator
    original = coord._send_offset_commit_request

    async def reporting_commit(offsets: Any) -> Any:
        result = await original(offsets)  # raises unless every partition was acknowledged
        emit("commit", offsets=_offsets_json(offsets))
        return result

    coord._send_offset_commit_request = reporting_commit

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", gen=coord._generation.generation_id, partitions=sorted(tp.partition for tp in assigned))

    # Topic metadata after subscribing and before the first join: otherwise a leader may assign from empty
    # metadata and rejoin when it arrives, and kafka-python 3.0.12 drops that rejoin's SyncGroup result if
    # a poll(timeout_ms) expires between its JoinGroup and SyncGroup responses (ConsumerCoordinator.
    # need_rejoin() is then False, so join_group_async never collects the finished join task): the member
    # stays REBALANCING with heartbeats disabled and no assignment, until its session expires. The
    # coordinator's metadata snapshot is of the subscribed topics, rebuilt only when a metadata response
    # arrives, so the round trip must come after `subscribe` (`topics()` always makes one; metadata fetched
    # before it left the snapshot empty, and every first assignment was followed by the leader's rejoin).
    consumer.subscribe([a.topic], listener=Listener())
    assert a.topic in consumer.topics(), f"no metadata for {a.topic}"
    commands = _stdin_commands()
    emit("started")
    paused = False
    failing_since: float | None = None
    while True:
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            cmd = ""
        if cmd in ("pause", "close", "eof") and not paused:
            paused = True
            positions = {TopicPartition(a.topic, tp.partition): consumer.position(tp) for tp in consumer.assignment()}
            offsets = {tp: OffsetAndMetadata(pos, "", -1) for tp, pos in positions.items()}
            consumer.commit(offsets)  # synchronous: returns once the server acknowledged it
            emit("final_commit", offsets=_offsets_json(offsets))
        if cmd in ("close", "eof"):
            consumer.close(autocommit=False)
            emit("closed")
            return
        if paused:
            time.sleep(0.02)
            continue
        # kafka-python 3.0.12 raises a retriable connection error out of poll() when a metadata refresh it
        # waits on fails while the server is down (seen on CI in the server-restart step: its coordinator
        # lookup awaited the refresh, which met ECONNREFUSED). An application keeps polling through an
        # outage; so does this worker, for up to a minute, and says so on its event stream.
        try:
            batches = consumer.poll(timeout_ms=100)
            failing_since = None
        except KafkaError as e:
            emit("poll_error", error=repr(e), retriable=bool(getattr(e, "retriable", False)))
            failing_since = failing_since or time.monotonic()
            if not getattr(e, "retriable", False) or time.monotonic() - failing_since > 60:
                raise
            time.sleep(0.1)
            continue
        for tp, records in batches.items():
            emit("recs", p=tp.partition, o=[r.offset for r in records], k=[r.key.decode() for r in records])


def aiokafka_consumer(a: argparse.Namespace) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    async def main() -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue[str] = asyncio.Queue()

        def read_stdin() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(commands.put_nowait, line.strip())
            loop.call_soon_threadsafe(commands.put_nowait, "eof")

        threading.Thread(target=read_stdin, daemon=True).start()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name, enable_auto_commit=True,
            auto_commit_interval_ms=a.auto_commit_interval_ms, session_timeout_ms=a.session_timeout_ms,
            heartbeat_interval_ms=a.heartbeat_interval_ms, auto_offset_reset="earliest",
            max_poll_records=a.max_poll_records, request_timeout_ms=10_000, retry_backoff_ms=100,
        )

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                emit("revoked", partitions=sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned: Any) -> None:
                emit("assigned", gen=consumer._coordinator.generation,
                     partitions=sorted(tp.partition for tp in assigned))

        consumer.subscribe([a.topic], listener=Listener())
        await consumer.start()
        coord = consumer._coordinator
        original = coord._do_commit_offsets

        async def reporting_commit(assignment: Any, offsets: Any) -> Any:
            result = await original(assignment, offsets)  # raises unless every partition was acknowledged
            if offsets:
                emit("commit", offsets=_offsets_json(offsets))
            return result

        coord._do_commit_offsets = reporting_commit
        emit("started")
        paused = False
        while True:
            cmd = "" if commands.empty() else commands.get_nowait()
            if cmd in ("pause", "close", "eof") and not paused:
                paused = True
                offsets = {}
                for tp in consumer.assignment():
                    offsets[TopicPartition(a.topic, tp.partition)] = OffsetAndMetadata(await consumer.position(tp), "")
                await consumer.commit(offsets)
                emit("final_commit", offsets=_offsets_json(offsets))
            if cmd in ("close", "eof"):
                await consumer.stop()
                emit("closed")
                return
            if paused:
                await asyncio.sleep(0.02)
                continue
            batch = await consumer.getmany(timeout_ms=100)
            for tp, records in batch.items():
                emit("recs", p=tp.partition, o=[r.offset for r in records], k=[r.key.decode() for r in records])

    asyncio.run(main())


def key_of(i: int) -> str:
    return f"k{i:06d}"


def kafka_python_producer(a: argparse.Namespace) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=a.bootstrap, client_id="e2e-producer", linger_ms=5,
                             reconnect_backoff_max_ms=200)  # otherwise default settings: idempotent, acks=all
    lock = threading.Lock()
    acked: list[list[Any]] = []
    total_acked = 0

    def drain() -> None:
        nonlocal total_acked
        with lock:
            batch, acked[:] = list(acked), []
        if batch:
            total_acked += len(batch)
            emit("acks", a=batch)

    for start in range(0, a.total, a.chunk):
        for i in range(start, min(start + a.chunk, a.total)):
            key = key_of(i)
            fut = producer.send(a.topic, key=key.encode(), value=b"value-%d" % i)
            fut.add_callback(lambda md, k=key: _locked_append(lock, acked, [k, md.partition, md.offset]))
            fut.add_errback(lambda e, k=key: emit("error", key=k, error=repr(e)))
        drain()
        time.sleep(a.interval_s)
    producer.flush(timeout=60)
    drain()
    producer.close(timeout=10)
    emit("done", acked=total_acked)


def _locked_append(lock: threading.Lock, out: list[Any], item: Any) -> None:
    with lock:
        out.append(item)


def aiokafka_producer(a: argparse.Namespace) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=a.bootstrap, client_id="e2e-producer", linger_ms=5,
                                    enable_idempotence=True, retry_backoff_ms=100)
        await producer.start()
        acked: list[list[Any]] = []
        total_acked = 0
        pending: set[Any] = set()

        def done(fut: Any, key: str) -> None:
            pending.discard(fut)
            if fut.cancelled():
                emit("error", key=key, error="cancelled")
            elif fut.exception() is not None:
                emit("error", key=key, error=repr(fut.exception()))
            else:
                md = fut.result()
                acked.append([key, md.partition, md.offset])

        def drain() -> None:
            nonlocal total_acked
            if acked:
                total_acked += len(acked)
                emit("acks", a=list(acked))
                acked.clear()

        try:
            for start in range(0, a.total, a.chunk):
                for i in range(start, min(start + a.chunk, a.total)):
                    key = key_of(i)
                    fut = await producer.send(a.topic, key=key.encode(), value=b"value-%d" % i)
                    pending.add(fut)
                    fut.add_done_callback(lambda f, k=key: done(f, k))
                drain()
                await asyncio.sleep(a.interval_s)
            await producer.flush()
            while pending:
                await asyncio.sleep(0.01)
            drain()
        finally:
            await producer.stop()
        emit("done", acked=total_acked)

    asyncio.run(main())


def worker_main(argv: list[str]) -> None:
    import logging

    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["consumer", "producer"])
    p.add_argument("--client", choices=["kafka-python", "aiokafka"], required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="e2e")
    p.add_argument("--name", default="c")
    p.add_argument("--session-timeout-ms", type=int, default=3000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=300)
    p.add_argument("--auto-commit-interval-ms", type=int, default=200)
    p.add_argument("--max-poll-records", type=int, default=500)
    p.add_argument("--total", type=int, default=0)
    p.add_argument("--chunk", type=int, default=500)
    p.add_argument("--interval-s", type=float, default=0.1)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {a.role}/{a.name} %(levelname)s %(name)s: %(message)s")
    {("consumer", "kafka-python"): kafka_python_consumer, ("consumer", "aiokafka"): aiokafka_consumer,
     ("producer", "kafka-python"): kafka_python_producer, ("producer", "aiokafka"): aiokafka_producer,
     }[(a.role, a.client)](a)


# ======================================================================================== test side


class Worker:
    """One client process; its stdout events and stderr lines are collected by reader threads."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._events: list[dict[str, Any]] = []
        self._stderr: list[str] = []
        self._lock = threading.Lock()
        self.killed = False
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"ev": "garbage", "line": line}
            with self._lock:
                self._events.append(event)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self._stderr.append(line.rstrip("\n"))

    def events(self, ev: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._events if ev is None or e["ev"] == ev]

    def stderr_tail(self, n: int = 25) -> str:
        """The last `n` lines, or from its last traceback on if the process died of one."""
        with self._lock:
            lines = self._stderr[-n:]
            if self.proc.poll() not in (None, 0) and not self.killed:
                starts = [i for i, line in enumerate(self._stderr) if line.startswith("Traceback")]
                if starts:
                    lines = self._stderr[starts[-1]:][-200:]
            return "\n".join(lines)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        self.killed = True
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def wait_exit(self, timeout_s: float) -> int:
        """The exit code, once the process has exited and its last lines are read: an exit can be seen
        before the reader threads reach the end of its pipes (on CI the producer's final "done" was missed)."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout_s}s:\n{self.stderr_tail()}") from None
        for t in self._threads:
            t.join(10)
        return rc

    def stop(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)
        for t in self._threads:
            t.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- consumer views ------------------------------------------------------------------------------

    def assignment(self) -> tuple[int | None, frozenset[int]]:
        """(generation, partitions) this consumer holds now, from its rebalance-listener events."""
        gen, parts = None, frozenset[int]()
        for e in self.events():
            if e["ev"] == "assigned":
                gen, parts = e["gen"], frozenset(e["partitions"])
            elif e["ev"] == "revoked":
                gen, parts = None, frozenset()
        return gen, parts


@dataclass
class Workers:
    """Every process of one test; `close()` kills whatever is still running."""

    client: str
    bootstrap: str
    topic: str
    group: str = "e2e"
    consumer_args: list[str] = field(default_factory=list)
    all: list[Worker] = field(default_factory=list)

    def consumer(self, name: str) -> Worker:
        w = Worker(name, ["consumer", "--client", self.client, "--bootstrap", self.bootstrap, "--topic", self.topic,
                          "--group", self.group, "--name", name, *self.consumer_args])
        self.all.append(w)
        return w

    def producer(self, total: int, chunk: int, interval_s: float) -> Worker:
        w = Worker("producer", ["producer", "--client", self.client, "--bootstrap", self.bootstrap, "--topic",
                                self.topic, "--total", str(total), "--chunk", str(chunk), "--interval-s", str(interval_s)])
        self.all.append(w)
        return w

    @property
    def consumers(self) -> list[Worker]:
        return [w for w in self.all if w.name != "producer"]

    def close(self) -> None:
        for w in self.all:
            w.stop()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {w.name} (rc={w.proc.poll()}) stderr:\n{w.stderr_tail()}" for w in self.all)


@contextlib.contextmanager
def workers(client: str, bootstrap: str, topic: str, **kw: Any) -> Iterator[Workers]:
    ws = Workers(client, bootstrap, topic, **kw)
    try:
        yield ws
    finally:
        ws.close()


def wait_until(cond: Callable[[], Any], timeout_s: float, what: str, diag: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{diag()}")
        time.sleep(0.05)


def balanced(members: list[Worker], partitions: int) -> bool:
    """Every member holds a non-empty share of one generation, the shares disjoint and covering all."""
    views = [m.assignment() for m in members]
    if any(gen is None or not parts for gen, parts in views) or len({gen for gen, _ in views}) != 1:
        return False
    return sum(len(p) for _, p in views) == partitions and frozenset().union(*(p for _, p in views)) == set(range(partitions))


def acked_count(producer: Worker) -> int:
    return sum(len(e["a"]) for e in producer.events("acks"))


def consumed_offsets(ws: Workers) -> dict[int, set[int]]:
    seen: dict[int, set[int]] = defaultdict(set)
    for w in ws.consumers:
        for e in w.events("recs"):
            seen[e["p"]].update(e["o"])
    return seen


def produced_records(producer: Worker) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for e in producer.events("acks"):
        for key, p, o in e["a"]:
            assert (p, o) not in out, f"two acknowledged records at partition {p} offset {o}: {out[(p, o)]}, {key}"
            out[(p, o)] = key
    return out


@dataclass
class Scenario:
    """Timeline knobs; fractions are of the records acknowledged to the producer."""

    records: int = 50_000
    partitions: int = 12
    chunk: int = 500
    interval_s: float = 0.08
    graceful_close_at: float = 0.15
    server_kill_at: float = 0.35
    consumer_kill_at: float = 0.5
    join_at: float = 0.65


@dataclass
class Outcome:
    workers: Workers
    produced: dict[tuple[int, int], str]
    end_offsets: dict[int, int]
    committed_after_restart: dict[int, int]
    timeline: list[tuple[float, str]]
    mid_run_kill_at: float = 0.0  # time.time() just before the mid-run SIGKILL of the server
    committed_after_mid_run_restart: dict[int, int] = field(default_factory=dict)


def run_scenario(srv: ServerProcess, client: str, topic: str, sc: Scenario, ws: Workers,
                 read_committed: Callable[[ServerProcess, str, str, int], tuple[dict[int, int], dict[int, int]]]
                 ) -> Outcome:
    """Consumers c1-c3 form the group; the producer writes `sc.records`; along the way c1 closes
    gracefully, the server is killed with SIGKILL and restarted on its port, c2 is killed with SIGKILL
    and c4 joins. After the drain the consumers commit and close, the server is killed and restarted
    once more, and `read_committed` reads (committed offsets, log end offsets) from the restarted server."""
    t0 = time.monotonic()
    timeline: list[tuple[float, str]] = []

    def mark(what: str) -> None:
        timeline.append((round(time.monotonic() - t0, 2), what))

    def diag() -> str:  # what the clients saw, and the server's side of the group's rebalances
        names = {"preparing_rebalance", "join_completed", "group_stable", "member_added", "member_removed",
                 "pending_member_expired", "rebalance_timeout", "group_empty"}
        story = [{k: v for k, v in e.items() if k in ("timestamp", "event", "reason", "member_id", "generation_id",
                                                      "members")}
                 for e in srv.events() if e.get("group_id") == ws.group and e.get("event") in names]
        views = {w.name: w.assignment() for w in ws.all if w.name.startswith("c")}
        return f"{ws.diagnostics()}\n--- assignments: {views}\n--- server events: {story[-15:]}"

    c1, c2, c3 = (ws.consumer(n) for n in ("c1", "c2", "c3"))
    wait_until(lambda: balanced([c1, c2, c3], sc.partitions), 45, "c1-c3 balanced", diag)
    mark("c1-c3 balanced")
    producer = ws.producer(sc.records, sc.chunk, sc.interval_s)

    def at(fraction: float) -> None:
        wait_until(lambda: acked_count(producer) >= fraction * sc.records or not producer.alive, 60,
                   f"{fraction:.0%} acknowledged", diag)

    at(sc.graceful_close_at)
    c1.send("close")
    assert c1.wait_exit(20) == 0, c1.stderr_tail()
    assert c1.events("closed")
    mark(f"c1 closed gracefully ({acked_count(producer)} acked)")
    wait_until(lambda: balanced([c2, c3], sc.partitions), 30, "c2, c3 balanced", diag)
    mark("c2, c3 balanced")

    at(sc.server_kill_at)
    kill_at = time.time()
    srv.kill9()
    mark(f"server killed with SIGKILL ({acked_count(producer)} acked)")
    srv.restart()
    mark("server restarted")
    mid_run_committed, _ = read_committed(srv, ws.group, topic, sc.partitions)
    mark("committed offsets read after the restart")

    at(sc.consumer_kill_at)
    c2.kill9()
    mark(f"c2 killed with SIGKILL ({acked_count(producer)} acked)")
    wait_until(lambda: balanced([c3], sc.partitions), 30, "c3 alone holding everything", diag)
    mark("c3 holds all partitions")

    at(sc.join_at)
    c4 = ws.consumer("c4")
    wait_until(lambda: balanced([c3, c4], sc.partitions), 45, "c3, c4 balanced", diag)
    mark(f"c4 joined, c3/c4 balanced ({acked_count(producer)} acked)")

    assert producer.wait_exit(90) == 0, producer.stderr_tail()
    assert not producer.events("error"), producer.events("error")[:5]
    assert producer.events("done")[0]["acked"] == sc.records
    mark("producer done")
    produced = produced_records(producer)
    ends: dict[int, int] = defaultdict(int)
    for p, _ in produced:
        ends[p] += 1

    def drained() -> bool:
        seen = consumed_offsets(ws)
        return all(len(seen[p]) >= ends[p] for p in range(sc.partitions))

    wait_until(drained, 60, "every produced record consumed", diag)
    mark("drained")
    for c in (c3, c4):
        c.send("pause")
    for c in (c3, c4):
        wait_until(lambda c=c: c.events("final_commit"), 20, f"{c.name}'s final commit", diag)
    for c in (c3, c4):
        c.send("close")
    for c in (c3, c4):
        assert c.wait_exit(20) == 0, c.stderr_tail()
    mark("c3, c4 committed and closed")
    srv.kill9()
    srv.restart()
    mark("server killed and restarted after the run")
    committed, end_offsets = read_committed(srv, ws.group, topic, sc.partitions)
    mark("committed offsets read")
    return Outcome(ws, produced, end_offsets, committed, timeline, kill_at, mid_run_committed)


def verify(out: Outcome, partitions: int) -> dict[str, Any]:
    """The invariants; returns statistics for the test's report.

    1. The log holds exactly what the producer had acknowledged: offsets 0..end-1 of every partition,
       each acknowledged once (idempotent producer across a broker SIGKILL: no duplicates, no holes).
    2. Every consumed (partition, offset) carries the key the producer wrote there.
    3. No gap: the union of consumed offsets of each partition is 0..end-1.
    4. Within one ownership (an assignment of a generation until the next revocation) a consumer reads a
       partition contiguously: no skipped record, no rewind.
    5. Duplicates only in the uncommitted window: an ownership of partition p that a consumer got at time
       T starts at an offset >= every commit of p that any consumer saw acknowledged before T. So a
       record is read twice only if it lies past the last acknowledged commit before the failure or
       rebalance that moved its partition (or, for a partition that stays put, past the commit before
       the rebalance). Commits acknowledged before the server's SIGKILL count too: acknowledged =>
       durable.
    6. Read right after the mid-run restart, the committed offset of every partition is at least every
       commit of it acknowledged before the SIGKILL.
    7. After the drain, the final commit() of each consumer, then SIGKILL and restart of the server:
       the committed offset of every partition is the last one acknowledged to any consumer, equals
       the final commit of its last owner, and equals the log end offset.
    """
    ws, produced = out.workers, out.produced
    ends: dict[int, int] = defaultdict(int)
    for p, _ in produced:
        ends[p] += 1
    for p in range(partitions):
        assert {o for (pp, o) in produced if pp == p} == set(range(ends[p])), f"partition {p}: holes in the log"
        assert out.end_offsets[p] == ends[p], f"partition {p}: log end {out.end_offsets[p]} != acknowledged {ends[p]}"

    consumptions: dict[tuple[int, int], int] = defaultdict(int)
    commits: list[tuple[float, int, int]] = []  # (time acknowledged, partition, offset)
    for w in ws.consumers:
        for e in w.events():
            if e["ev"] in ("commit", "final_commit"):
                commits += [(e["t"], int(p), o) for p, o in e["offsets"].items()]
    commits.sort()

    def acknowledged_before(p: int, t: float) -> int:
        return max((o for tc, pp, o in commits if pp == p and tc < t), default=0)

    ownerships = 0
    for w in ws.consumers:
        owned_since: dict[int, float] = {}
        last: dict[int, int] = {}
        for e in w.events():
            if e["ev"] == "assigned":
                owned_since = dict.fromkeys(e["partitions"], e["t"])
                last = {}
            elif e["ev"] == "revoked":
                owned_since, last = {}, {}
            elif e["ev"] == "recs":
                p = e["p"]
                assert p in owned_since, f"{w.name} got records of partition {p} it does not own: {e}"
                for o, k in zip(e["o"], e["k"], strict=True):
                    assert produced.get((p, o)) == k, f"{w.name}: partition {p} offset {o} has key {k}, " \
                                                      f"the producer wrote {produced.get((p, o))}"
                    consumptions[(p, o)] += 1
                    if p in last:
                        assert o == last[p] + 1, f"{w.name}: partition {p} jumped from {last[p]} to {o}"
                    else:
                        ownerships += 1
                        floor = acknowledged_before(p, owned_since[p])
                        assert o >= floor, (f"{w.name}: ownership of partition {p} since {owned_since[p]} starts at "
                                            f"{o}, below {floor}, acknowledged before it")
                    last[p] = o

    for p in range(partitions):
        missing = [o for o in range(ends[p]) if (p, o) not in consumptions]
        assert not missing, f"partition {p}: {len(missing)} records never consumed, first {missing[:5]}"

    for p, got in out.committed_after_mid_run_restart.items():
        floor = acknowledged_before(p, out.mid_run_kill_at)
        assert (got if got is not None else 0) >= floor, (
            f"partition {p}: committed {got} after the mid-run restart, but {floor} was acknowledged before the kill")

    last_ack: dict[int, tuple[float, int]] = {}
    for t, p, o in commits:
        last_ack[p] = (t, o)
    final: dict[int, int] = {}
    for w in ws.consumers:
        for e in w.events("final_commit"):
            final.update({int(p): o for p, o in e["offsets"].items()})
    for p in range(partitions):
        assert out.committed_after_restart[p] == last_ack[p][1] == final[p] == ends[p], (
            f"partition {p}: committed after restart {out.committed_after_restart[p]}, last acknowledged "
            f"{last_ack[p][1]}, final commit {final[p]}, log end {ends[p]}")

    duplicates = sum(n - 1 for n in consumptions.values())
    return {"records": len(produced), "duplicates": duplicates, "ownerships": ownerships,
            "acknowledged_commits": len(commits), "timeline": out.timeline}


if __name__ == "__main__":
    worker_main(sys.argv[1:])
