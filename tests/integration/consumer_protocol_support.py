"""confluent-kafka consumers with `group.protocol=consumer` (KIP-848) for the integration and cluster tests:
each member polls in its own thread and records every assign/revoke callback and message on one shared
timeline (one process, one clock), so tests can check that no partition was held by two members at once."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka

TOPIC = "orders"
PARTITIONS = 10


@dataclass
class Timeline:
    """Every assign/revoke callback and every message, with the time it happened (one process, one clock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[tuple[float, str, str, int]] = field(default_factory=list)  # (t, member, assign|revoke, p)
    messages: list[tuple[float, str, int, int, bytes]] = field(default_factory=list)  # (t, member, p, offset, key)

    def add(self, member: str, kind: str, partitions: list[Any]) -> None:
        now = time.monotonic()
        with self.lock:
            self.events.extend((now, member, kind, tp.partition) for tp in partitions)

    def intervals(self) -> dict[int, list[tuple[float, float, str]]]:
        """Per partition, the (from, to, member) spans each member held it."""
        open_at: dict[tuple[str, int], float] = {}
        spans: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
        with self.lock:
            events = sorted(self.events)
        for t, member, kind, p in events:
            if kind == "assign":
                open_at[(member, p)] = t
            elif (member, p) in open_at:
                spans[p].append((open_at.pop((member, p)), t, member))
        for (member, p), t in open_at.items():
            spans[p].append((t, float("inf"), member))
        return spans


class Member:
    """A confluent-kafka consumer with group.protocol=consumer, polled by its own thread."""

    def __init__(self, bootstrap: str, name: str, timeline: Timeline, group: str, instance_id: str | None = None,
                 topic: str = TOPIC) -> None:
        self.name = name
        self.timeline = timeline
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "client.id": name, "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 200, "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 0,
        }
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        self.consumer = confluent_kafka.Consumer(conf)
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        self.stopping = threading.Event()
        self.errors: list[str] = []
        # What the callbacks said it holds: Consumer.assignment() from another thread than the polling one
        # can block on librdkafka's main thread while that waits for a callback on the polling one.
        self.held: set[int] = set()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        self.timeline.add(self.name, "assign", partitions)
        with self.timeline.lock:
            self.held |= {tp.partition for tp in partitions}

    def _on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        self.timeline.add(self.name, "revoke", partitions)
        with self.timeline.lock:
            self.held -= {tp.partition for tp in partitions}

    def _run(self) -> None:
        while not self.stopping.is_set():
            msg = self.consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            with self.timeline.lock:
                self.timeline.messages.append((time.monotonic(), self.name, msg.partition(), msg.offset(), msg.key()))

    def assignment(self) -> set[int]:
        with self.timeline.lock:
            return set(self.held)

    def close(self) -> None:
        """Leave the group (epoch -1, or -2 for a static member) from the polling thread's consumer."""
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


class KeyedStream:
    """Produces keyed records at a steady pace until stopped; remembers where each went."""

    def __init__(self, bootstrap: str, per_second: int = 200, topic: str = TOPIC) -> None:
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
        self.topic = topic
        self.sent: dict[tuple[int, int], bytes] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.per_second = per_second
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:  # on the producing thread (producer.poll)
        if err is None:
            with self.lock:
                self.sent[(msg.partition(), msg.offset())] = msg.key()

    def _run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, key=b"key-%d" % (i % 97), value=b"%d" % i, on_delivery=self._delivered)
            i += 1
            self.producer.poll(0)
            time.sleep(1 / self.per_second)
        self.producer.flush(10)

    def stop(self) -> dict[tuple[int, int], bytes]:
        self.stopping.set()
        self.thread.join(15)
        with self.lock:
            return dict(self.sent)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def settled(members: list[Member], partitions: int = PARTITIONS) -> Callable[[], bool]:
    """Every partition held by exactly one of `members`, the counts balanced (the uniform assignor)."""
    def check() -> bool:
        held = [m.assignment() for m in members]
        share = partitions // len(members)
        return (sum(len(h) for h in held) == partitions and set().union(*held) == set(range(partitions))
                and all(share <= len(h) <= share + 1 for h in held))
    return check
