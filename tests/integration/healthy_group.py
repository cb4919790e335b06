"""A healthy group of real clients to run beside a misbehaving one (tests/integration/test_hostile_clients.py).

confluent-kafka (librdkafka) consumers in one group, each polled by its own thread, committing
synchronously every few records, fed by a confluent-kafka producer. librdkafka heartbeats on its own
thread, so a heartbeat that the server answers late or not at all shows as a member removed for
session expiry and a rebalance in the server's log. `assert_healthy(srv, seconds)` watches a window:
records consumed, commits acknowledged, no client errors, and no member of this group removed.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from .conftest import ServerProcess


class HealthyGroup:
    def __init__(self, bootstrap: str, topic: str, group: str, members: int = 2,
                 conf: dict[str, Any] | None = None, session_timeout_ms: int = 6000, produce: bool = True) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.members = members
        self.produce = produce
        self.conf = {"bootstrap.servers": bootstrap, **(conf or {})}
        self.session_timeout_ms = session_timeout_ms
        self.consumed = 0
        self.commits = 0
        self.member_commits = [0] * members
        self.errors: list[str] = []
        self.commit_latencies: list[tuple[float, float]] = []  # (monotonic end, seconds) of each sync commit
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> HealthyGroup:
        if self.produce:
            self._threads.append(threading.Thread(target=self._produce, daemon=True))
        for i in range(self.members):
            self._threads.append(threading.Thread(target=self._consume, args=(i,), daemon=True))
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)

    def counts(self) -> tuple[int, int, int]:
        with self._lock:
            return self.consumed, self.commits, len(self.errors)

    def wait_running(self, timeout_s: float = 30.0) -> None:
        """Until every member has committed what it consumed (the group formed with all of them).

        Each member, not the group's total: one fast member can consume and commit alone while the
        other is still starting, and that member's join would then rebalance the group in the middle
        of the window a test watches."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self.consumed >= 20 and min(self.member_commits) >= 1:
                    return
            time.sleep(0.1)
        raise AssertionError(f"healthy group never ran: {self.counts()} commits per member {self.member_commits}"
                             f" errors={self.errors[-5:]}")

    def assert_healthy(self, srv: ServerProcess, seconds: float) -> tuple[int, int]:
        """Watch `seconds`: the group consumes and commits, no client error, no member removed.
        Returns (records consumed, commits acknowledged) in the window."""
        removed_before = self._removed(srv)
        c0, k0, e0 = self.counts()
        time.sleep(seconds)
        c1, k1, e1 = self.counts()
        assert e1 == e0, f"client errors in the window: {self.errors[e0:][:5]}"
        assert c1 - c0 >= 10 * seconds, f"consumed only {c1 - c0} records in {seconds} s; {self._story(srv)}"
        assert k1 - k0 >= seconds, f"only {k1 - k0} commits in {seconds} s; {self._story(srv)}"
        removed = self._removed(srv)[len(removed_before):]
        assert not removed, f"healthy members removed: {removed}"
        return c1 - c0, k1 - k0

    def _story(self, srv: ServerProcess) -> str:
        """The server's last rebalance events for this group: what a failed window needs explained."""
        names = {"preparing_rebalance", "join_completed", "group_stable", "member_added", "member_removed",
                 "pending_member_expired", "rebalance_timeout", "static_member_replaced"}
        story = [{k: v for k, v in e.items() if k not in ("group_id", "logger", "level")}
                 for e in srv.events() if e.get("group_id") == self.group and e.get("event") in names]
        return f"server events for {self.group}: {story[-12:]}"

    def _removed(self, srv: ServerProcess) -> list[dict[str, Any]]:
        return [e for e in srv.events("member_removed") if e.get("group_id") == self.group]

    def _produce(self) -> None:
        from confluent_kafka import Producer
        producer = Producer({**self.conf, "linger.ms": 5})
        i = 0
        while not self._stop.is_set():
            try:
                producer.produce(self.topic, f"v{i}".encode())
                i += 1
            except BufferError:
                pass
            producer.poll(0.005)
        producer.flush(5)

    def _consume(self, index: int) -> None:
        from confluent_kafka import Consumer, KafkaException
        consumer = Consumer({**self.conf, "group.id": self.group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": self.session_timeout_ms,
                             "heartbeat.interval.ms": 500, "client.id": f"healthy-{index}",
                             "topic.metadata.refresh.interval.ms": 2000})
        consumer.subscribe([self.topic])
        since_commit = 0
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if not msg.error().retriable() and msg.error().code() != msg.error()._PARTITION_EOF:
                        with self._lock:
                            self.errors.append(str(msg.error()))
                    continue
                since_commit += 1
                with self._lock:
                    self.consumed += 1
                if since_commit >= 10:
                    try:
                        started = time.monotonic()
                        consumer.commit(asynchronous=False)
                        ended = time.monotonic()
                        since_commit = 0
                        with self._lock:
                            self.commits += 1
                            self.member_commits[index] += 1
                            self.commit_latencies.append((ended, ended - started))
                    except KafkaException as e:
                        # A commit during a rebalance fails legitimately; the window check sees rebalances.
                        if not e.args[0].retriable() and "REBALANCE" not in str(e):
                            with self._lock:
                                self.errors.append(str(e))
        finally:
            consumer.close()
