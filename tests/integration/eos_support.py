"""confluent-kafka's transactional producer and read_committed consumer, used as an exactly-once application
uses them (one helper for every exactly-once test, so no test leans on a client's timing luck).

- `read_to_end` reads a topic's partitions from the beginning up to the end a consumer of that isolation level
  is shown (`get_watermark_offsets`: the log end for read_uncommitted, the last stable offset for
  read_committed), and returns the values in offset order per partition. It stops when the consumer's position
  reaches that end on every partition, not after a quiet period: control records and aborted records move the
  position without yielding a message.
- `TransformLoop` is librdkafka's documented consume-transform-produce loop (the `transactions` example):
  consume a batch, begin a transaction, produce its transformation, `send_offsets_to_transaction` with the
  consumer's positions and group metadata, commit; on an abortable error abort and rewind the consumer to its
  committed offsets; on a fatal or fenced error start over with a new producer and consumer, which is what an
  application restarted after a crash does.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

DEFAULT_TIMEOUT_S = 30.0


def transactional_producer(bootstrap: str, transactional_id: str, **config: Any) -> Producer:
    settings = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                "transaction.timeout.ms": 60_000, "linger.ms": 5, **config}
    return Producer(settings)


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
                timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[int, list[str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        consumer.assign(tps)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for p in range(partitions)}
        values: dict[int, list[str]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while True:
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [TopicPartition(topic, p) for p in range(partitions)])}
            if all(ends[p] == 0 or positions[p] >= ends[p] for p in range(partitions)):
                return values
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: read to {positions}, not to {ends} in {timeout_s} s")
            msg = consumer.poll(0.2)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            if msg.error():
                raise KafkaException(msg.error())
            values[msg.partition()].append(msg.value().decode())
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[int, int]:
    """The group's committed offsets (-1001 where none), read as a consumer of the group reads them: librdkafka
    asks with require_stable, so this waits until no transactional offset of the group is pending."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout_s)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


class ApplicationCrash(Exception):
    """Raised by a test's crash point: the application dies there (its producer and consumer are abandoned,
    never closed) and a new instance starts, as a supervisor restarts a killed process."""


class TransformLoop:
    """Reads `source`, writes `transform(value)` to `sink`, exactly once, in transactions of at most `batch`
    records, as group `group` with transactional id `transactional_id`."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, transactional_id: str,
                 transform: Callable[[str], str] = str.upper, batch: int = 5) -> None:
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        self.group, self.transactional_id, self.transform, self.batch = group, transactional_id, transform, batch
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.restarts = 0
        self.commit_timeout_s = 10.0
        # Crashed instances' clients, kept referenced: a crashed process never closes them, and destroying a
        # transactional producer whose broker is gone is not what a crash does.
        self._abandoned: list[object] = []
        self._started_with = bootstrap

    def start(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """A new producer (its init_transactions fences and finishes whatever an earlier instance left open)
        and a new consumer that resumes from the group's committed offsets."""
        self.close()
        self._started_with = self.bootstrap
        self.producer = transactional_producer(self.bootstrap, self.transactional_id)
        self.producer.init_transactions(timeout_s)
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 10_000})
        self.consumer.subscribe([self.source])

    def abandon(self) -> None:
        self._abandoned += [self.producer, self.consumer]
        self.producer = self.consumer = None

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
        self.consumer = None
        self.producer = None

    def poll_batch(self, timeout_s: float = 1.0) -> list[Any]:
        assert self.consumer is not None
        msgs = self.consumer.consume(self.batch, timeout_s)
        for msg in msgs:
            if msg.error():
                raise KafkaException(msg.error())
        return msgs

    def process(self, msgs: Sequence[Any], before_commit: Callable[[], None] | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """One transaction: the transformed records and the consumer's positions, committed together.
        `before_commit` runs after everything is sent and before the commit (a test's crash point)."""
        assert self.producer is not None and self.consumer is not None
        self.producer.begin_transaction()
        for msg in msgs:
            self.producer.produce(self.sink, value=self.transform(msg.value().decode()), partition=msg.partition())
        self.producer.send_offsets_to_transaction(self.consumer.position(self.consumer.assignment()),
                                                  self.consumer.consumer_group_metadata(), timeout_s)
        if before_commit is not None:
            before_commit()
        self.producer.commit_transaction(self.commit_timeout_s)

    def run_until(self, done: Callable[[], bool], timeout_s: float = 60.0,
                  before_commit: Callable[[int], Callable[[], None] | None] | None = None) -> None:
        """Process batches until `done()`; an error ends this producer and consumer and starts new ones,
        as a supervised application restarts. `before_commit(n)` may give the n-th transaction's crash point."""
        deadline = time.monotonic() + timeout_s
        transactions = 0
        if self.producer is None:
            self.start()
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"not done within {timeout_s} s ({transactions} transactions, "
                                     f"{self.restarts} restarts)")
            if self._started_with != self.bootstrap:
                # The server was restarted on another port (a test's artefact: a real one keeps its address):
                # this instance cannot reach it again, so the application is restarted, as after a crash.
                self.abandon()
                self.restarts += 1
                self.start()
            try:
                msgs = self.poll_batch()
                if not msgs:
                    continue
                hook = before_commit(transactions) if before_commit is not None else None
                transactions += 1
                self.process(msgs, hook)
            except ApplicationCrash:
                self.abandon()
                self.restarts += 1
                self.start()
            except KafkaException as e:
                error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if error is not None and error.code() == KafkaError._UNSUPPORTED_FEATURE:
                    raise  # no restart makes a broker serve what it does not
                if (self._started_with == self.bootstrap and error is not None and error.txn_requires_abort()
                        and self._abort()):
                    continue
                self.abandon()
                self.restarts += 1
                self.start()

    def _abort(self) -> bool:
        """Abort the open transaction and rewind to the committed offsets; False when that failed too."""
        assert self.producer is not None and self.consumer is not None
        try:
            self.producer.abort_transaction(self.commit_timeout_s)
            committed = self.consumer.committed(self.consumer.assignment(), self.commit_timeout_s)
            for tp in committed:
                self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                  tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
            return True
        except KafkaException:
            return False
