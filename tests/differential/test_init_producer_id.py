"""InitProducerId with a transactional id, the same steps against Apache Kafka and against the server: the
same error codes, the same epochs, and the producer id kept or changed at the same steps (the ids themselves
differ between brokers). confluent-kafka's init_transactions() is among the steps."""
from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.differential.harness import Target
from tests.integration.txn_client import TransactionalIdClient

pytestmark = pytest.mark.integration


def steps(target: Target, transactional_id: str) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []
    client = TransactionalIdClient(target.host, target.port, transactional_id)
    first_pid: list[int] = []

    def record(label: str, answer: Any) -> Any:
        if answer.error_code == 0 and not first_pid:
            first_pid.append(answer.producer_id)
        same_pid = answer.producer_id == first_pid[0] if first_pid and answer.producer_id >= 0 else None
        seen.append((label, (answer.error_code, answer.producer_epoch, same_pid)))
        return answer

    try:
        record("bad timeout", client.init_producer_id(timeout_ms=900_001, retry=False))
        record("half an identity", client.init_producer_id(producer_id=3, producer_epoch=-1, retry=False))
        record("empty id", client.init_producer_id(transactional_id="", retry=False))
        first = record("new id", client.init_producer_id())
        record("again", client.init_producer_id())
        record("expected current", client.init_producer_id(producer_id=first.producer_id, producer_epoch=1))
        record("retry of the last bump", client.init_producer_id(producer_id=first.producer_id, producer_epoch=1))
        record("stale epoch v4", client.init_producer_id(producer_id=first.producer_id, producer_epoch=0,
                                                         retry=False))
        record("stale epoch v3", client.init_producer_id(version=3, producer_id=first.producer_id,
                                                         producer_epoch=0, retry=False))
        record("v0", client.init_producer_id(version=0))
        producer = Producer({"bootstrap.servers": f"{target.host}:{target.port}", "transactional.id": transactional_id})
        producer.init_transactions(60)
        producer.flush(1)
        record("after init_transactions", client.init_producer_id())
    finally:
        client.close()
    return seen


def test_init_producer_id_answers_as_kafka_does(targets: list[Target]) -> None:
    transactional_id = f"diff-tx-{uuid.uuid4()}"
    kafka, server = (steps(t, transactional_id) for t in targets)
    assert server == kafka
