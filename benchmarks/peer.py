"""The peer: librdkafka's mock cluster (a classic group coordinator written in C), started in-process by
confluent-kafka with `test.mock.num.brokers`. librdkafka replaces the client's bootstrap.servers with the
mock cluster's listener, which Metadata (`list_topics`) then reports as the broker's host and port.

    python -m benchmarks.peer   # prints {"host", "port", "librdkafka"}; serves until stdin closes
"""
from __future__ import annotations

import json
import sys

import confluent_kafka


def main() -> None:
    producer = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = list(producer.list_topics(timeout=10).brokers.values())
    print(json.dumps({"host": brokers[0].host, "port": brokers[0].port,
                      "librdkafka": confluent_kafka.libversion()[0]}), flush=True)
    sys.stdin.read()  # the mock cluster's threads serve until the runner closes our stdin
    del producer


if __name__ == "__main__":
    main()
