"""End to end through the topic store: a kafka-python producer and a 3-member kafka-python consumer group,
each in a process of its own.

    python -m benchmarks.e2e consume BOOTSTRAP   # prints "ready" once assigned, then {"count", "last_at"}
    python -m benchmarks.e2e produce BOOTSTRAP N # prints {"started_at", "seconds"}
"""
from __future__ import annotations

import json
import sys
import time
import warnings

warnings.simplefilter("ignore", DeprecationWarning)

from kafka import KafkaConsumer, KafkaProducer  # noqa: E402

TOPIC = "e2e"


def consume(bootstrap: str) -> None:
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="e2e", auto_offset_reset="earliest",
                             heartbeat_interval_ms=500, session_timeout_ms=10_000)
    while not consumer.assignment():
        consumer.poll(100)
    # The other two members may still be joining: settle until the group is stable for 1.5 s.
    stable_since, assignment = time.monotonic(), consumer.assignment()
    while time.monotonic() - stable_since < 1.5:
        consumer.poll(100)
        if consumer.assignment() != assignment:
            stable_since, assignment = time.monotonic(), consumer.assignment()
    print("ready", flush=True)
    count, last_at, idle_since = 0, 0.0, time.monotonic()
    while time.monotonic() - idle_since < 5.0:
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
    producer.flush()
    producer.close()
    print(json.dumps({"started_at": started_at, "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "consume":
        consume(sys.argv[2])
    else:
        produce(sys.argv[2], int(sys.argv[3]))
