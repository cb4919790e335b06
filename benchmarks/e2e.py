"""End to end through the topic store: a kafka-python producer and a 3-member kafka-python consumer group,
each in a process of its own.

    python -m benchmarks.e2e consume BOOTSTRAP   # prints "ready" once assigned, then {"count", "last_at"}
    python -m benchmarks.e2e produce BOOTSTRAP N # prints {"started_at", "seconds"}

Every wait is bounded: past its deadline a consumer prints {"error": ..., what it saw} and exits 2, so
the scenario fails loudly instead of hanging. E2E_CLIENT_DEBUG=1 turns on kafka-python's DEBUG logging
on stderr (with timestamps and the pid), for finding out why a member stuck.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings

warnings.simplefilter("ignore", DeprecationWarning)

from kafka import KafkaConsumer, KafkaProducer  # noqa: E402

TOPIC = "e2e"
ASSIGN_DEADLINE_S = 30.0  # to the first assignment
SETTLE_DEADLINE_S = 30.0  # for the group to stay unchanged for SETTLE_S
SETTLE_S = 1.5
DRAIN_DEADLINE_S = 300.0  # consuming, after "ready"


def _generation(consumer: KafkaConsumer) -> int | None:
    try:  # kafka-python's private state: only for the error report
        gen = consumer._coordinator._generation
        return None if gen is None else gen.generation_id
    except AttributeError:
        return None


def _fail(consumer: KafkaConsumer, what: str, **seen: object) -> None:
    assignment = sorted(tp.partition for tp in consumer.assignment())
    print(json.dumps({"error": what, "pid": os.getpid(), "assignment": assignment,
                      "generation": _generation(consumer), **seen}), flush=True)
    consumer.close(autocommit=False)
    sys.exit(2)


def consume(bootstrap: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="e2e", auto_offset_reset="earliest",
                             heartbeat_interval_ms=500, session_timeout_ms=10_000)
    # kafka-python 3.0.12 drops the result of a metadata-triggered rejoin of the leader when a poll() times
    # out between its JoinGroup and SyncGroup responses: the leader first assigns with no partition metadata
    # for the topic ("No partition metadata for topic e2e"), its metadata then arrives, the leader rejoins,
    # assigns with the new metadata (so need_rejoin() turns False) and join_group_async never collects the
    # finished join task. The member then has no assignment, sends no heartbeats, and poll() returns at once
    # (a busy loop at ~100% CPU) until the deadline below. In such runs the server answered that
    # generation's JoinGroup and the leader's SyncGroup with error 0 and the leader's partition, then expired
    # the silent member after session_timeout_ms, as Kafka does (the same bug is described in
    # tests/interop/drivers/kafka_python_driver.py).
    # The workaround, as an application would do it: subscribe, then make sure the topic's metadata is known
    # (topics() always fetches it, and the coordinator snapshots it for the subscription) before the first
    # poll() joins, so the first assignment already covers the 3 partitions and no metadata-triggered rejoin
    # follows; and poll with a longer timeout while waiting, so a rebalance is rarely cut mid-flight.
    consumer.subscribe([TOPIC])
    t0 = time.monotonic()
    while TOPIC not in consumer.topics() or not consumer.partitions_for_topic(TOPIC):
        if time.monotonic() - t0 > ASSIGN_DEADLINE_S:
            _fail(consumer, f"no metadata for topic {TOPIC} after {ASSIGN_DEADLINE_S:.0f} s")
        time.sleep(0.1)
    while not consumer.assignment():
        if time.monotonic() - t0 > ASSIGN_DEADLINE_S:
            _fail(consumer, f"no assignment after {ASSIGN_DEADLINE_S:.0f} s")
        consumer.poll(500)
    # The other two members may still be joining: settle until the group is stable for SETTLE_S.
    t1 = time.monotonic()
    stable_since, assignment = t1, consumer.assignment()
    changes = 0
    while time.monotonic() - stable_since < SETTLE_S:
        if time.monotonic() - t1 > SETTLE_DEADLINE_S:
            _fail(consumer, f"group not stable for {SETTLE_S} s within {SETTLE_DEADLINE_S:.0f} s",
                  changes=changes)
        consumer.poll(100)
        if consumer.assignment() != assignment:
            stable_since, assignment = time.monotonic(), consumer.assignment()
            changes += 1
    print("ready", flush=True)
    count, last_at, idle_since, t2 = 0, 0.0, time.monotonic(), time.monotonic()
    while time.monotonic() - idle_since < 5.0:
        if time.monotonic() - t2 > DRAIN_DEADLINE_S:
            _fail(consumer, f"still consuming after {DRAIN_DEADLINE_S:.0f} s", count=count)
        batch = consumer.poll(200, max_records=5000)
        n = sum(len(v) for v in batch.values())
        if n:
            count += n
            last_at = time.time()
            idle_since = time.monotonic()
    consumer.close()
    print(json.dumps({"count": count, "last_at": last_at}), flush=True)


def produce(bootstrap: str, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=64 * 1024)
    value = b"x" * 100
    started_at, t0 = time.time(), time.perf_counter()
    for i in range(n):
        producer.send(TOPIC, key=b"%d" % i, value=value)
    producer.flush(timeout=120)
    producer.close(timeout=30)
    print(json.dumps({"started_at": started_at, "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    if os.environ.get("E2E_CLIENT_DEBUG") == "1":
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s.%(msecs)03d %(process)d %(name)s %(levelname)s %(message)s",
                            datefmt="%H:%M:%S")
    if sys.argv[1] == "consume":
        consume(sys.argv[2])
    else:
        produce(sys.argv[2], int(sys.argv[3]))
