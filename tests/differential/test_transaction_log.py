"""`__transaction_state` as Apache Kafka writes it, read back with the transaction core's codec: a real
transactional producer (confluent-kafka) commits one transaction and aborts the next against Kafka; every
record its coordinator wrote for the id decodes to the states Kafka's state machine went through, and our
encoder writes each value byte for byte as Kafka did. The id's partition is the one the group partitioner
gives (transactional ids hash as group ids do)."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from coordinator_server.group.partitioner import partition_for
from coordinator_server.txn.records import decode_key, decode_value, encode_value
from coordinator_server.txn.state import TransactionState as S
from tests.kafka.shared import BrokerAddress

pytestmark = pytest.mark.integration

TRANSACTION_STATE = "__transaction_state"
TRANSACTION_STATE_PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default


def run_transactions(bootstrap: str, transactional_id: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10_000})
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        producer.produce(topic, b"value")
        producer.flush(10)  # an abort purges what the client has not sent yet
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def records_of(bootstrap: str, transactional_id: str, wanted: int, timeout_s: float = 30.0) -> list[bytes | None]:
    partition = partition_for(transactional_id, TRANSACTION_STATE_PARTITIONS)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TRANSACTION_STATE, partition, 0)])
    found: list[bytes | None] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(found) < wanted and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            if decode_key(message.key()) == transactional_id:
                found.append(message.value())
    finally:
        consumer.close()
    return found


def test_kafkas_transaction_log_decodes_and_reencodes_byte_for_byte(kafka_broker: BrokerAddress) -> None:
    transactional_id = f"txn-{uuid.uuid4()}"
    run_transactions(kafka_broker.address, transactional_id, f"txn-data-{uuid.uuid4().hex[:8]}")
    # Empty; Ongoing, PrepareCommit, CompleteCommit; Ongoing, PrepareAbort, CompleteAbort.
    values = records_of(kafka_broker.address, transactional_id, 7)
    decoded = [decode_value(v) for v in values]
    assert all(d is not None for d in decoded), values
    states = [d.state for d in decoded if d is not None]
    assert states == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING, S.PREPARE_ABORT,
                      S.COMPLETE_ABORT], states
    first = decoded[0]
    assert first is not None and first.producer_id >= 0 and first.partitions == frozenset()
    ongoing = decoded[1]
    assert ongoing is not None and len(ongoing.partitions) == 1 and ongoing.txn_start_timestamp_ms > 0
    for d in decoded:
        assert d is not None and d.producer_id == first.producer_id
    completed = decoded[3]
    assert completed is not None and completed.partitions == frozenset()
    for value, d in zip(values, decoded, strict=True):
        assert value is not None
        assert encode_value(d, int.from_bytes(value[:2], "big")) == value, (d, value.hex())
