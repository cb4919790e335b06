"""End to end with stock kafka-python clients, each in its own process (issue 3's proof).

An idempotent `KafkaProducer` (default settings) writes 50,000 keyed records into a 12-partition topic
while a group of `KafkaConsumer`s with auto-commit reads them. Along the way one consumer closes
gracefully, the server is killed with SIGKILL and restarted on the same port and data directory, one
consumer is killed with SIGKILL and a new one joins. The invariants are listed in `e2e_support.verify`:
no record lost, duplicates only past the last acknowledged commit, acknowledged commits survive the
server's SIGKILL, and after the drain the committed offsets equal the final commits and the log end.
"""
from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition

from .conftest import ServerFactory, ServerProcess
from .e2e_support import Scenario, free_port, run_scenario, verify, workers

pytestmark = pytest.mark.integration

TOPIC = "e2e"
PARTITIONS = 12


def read_committed(srv: ServerProcess, group: str, topic: str, partitions: int) -> tuple[dict[int, int], dict[int, int]]:
    """Committed offsets (OffsetFetch) and log end offsets (ListOffsets) from a fresh KafkaConsumer."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = KafkaConsumer(bootstrap_servers=srv.address, group_id=group, enable_auto_commit=False)
    try:
        committed = {tp.partition: consumer.committed(tp) for tp in tps}
        ends = {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()
    return committed, ends


def test_kafka_python_group_survives_consumer_and_server_failures(server_factory: ServerFactory) -> None:
    port = free_port()
    srv = server_factory(port=port, topic=[f"{TOPIC}:{PARTITIONS}"], initial_rebalance_delay_ms=0,
                         min_session_timeout_ms=500)
    assert srv.port == port
    with workers("kafka-python", srv.address, TOPIC) as ws:
        outcome = run_scenario(srv, "kafka-python", TOPIC, Scenario(partitions=PARTITIONS), ws, read_committed)
        assert srv.port == port
        stats = verify(outcome, PARTITIONS)
    print(stats)
