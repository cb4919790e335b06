"""AddPartitionsToTxn and EndTxn by hand, the same steps against Apache Kafka and against the server: the same
error codes at each step — partitions taken into a transaction, a partition that does not exist (and the others
not attempted), wrong producer ids and epochs (with KIP-588's downgrade for old versions), ending with nothing
open, a commit then its retry, an abort with no partitions, and what a producer id of another transactional id
is answered."""
from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.differential.harness import Target
from tests.integration.txn_client import TransactionalIdClient

pytestmark = pytest.mark.integration


def steps(target: Target, transactional_id: str, topic: str) -> list[tuple[str, Any]]:
    admin = AdminClient({"bootstrap.servers": f"{target.host}:{target.port}"})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    seen: list[tuple[str, Any]] = []
    client = TransactionalIdClient(target.host, target.port, transactional_id)
    try:
        ids = client.init_producer_id()
        pid, epoch = ids.producer_id, ids.producer_epoch
        seen.append(("end with nothing open", client.end_txn(pid, epoch, True)))
        seen.append(("abort with nothing open", client.end_txn(pid, epoch, False)))
        seen.append(("unknown partition", client.add_partitions(pid, epoch, {topic: [0, 9]})))
        seen.append(("unknown topic", client.add_partitions(pid, epoch, {f"{topic}-none": [0], topic: [1]})))
        seen.append(("wrong producer id", client.add_partitions(pid + 1, epoch, {topic: [0]})))
        seen.append(("wrong epoch v3", client.add_partitions(pid, epoch + 1, {topic: [0]}, retry=False)))
        seen.append(("wrong epoch v1", client.add_partitions(pid, epoch + 1, {topic: [0]}, version=1, retry=False)))
        seen.append(("add", client.add_partitions(pid, epoch, {topic: [0, 1]})))
        seen.append(("add again", client.add_partitions(pid, epoch, {topic: [1]})))
        seen.append(("end with the wrong epoch", client.end_txn(pid, epoch + 1, True)))
        seen.append(("end with the wrong epoch v1", client.end_txn(pid, epoch + 1, True, version=1)))
        seen.append(("commit", client.end_txn(pid, epoch, True)))
        seen.append(("commit's retry", client.end_txn(pid, epoch, True, retry=True)))
        seen.append(("abort after commit", client.end_txn(pid, epoch, False)))
        seen.append(("next transaction", client.add_partitions(pid, epoch, {topic: [0]})))
        seen.append(("abort", client.end_txn(pid, epoch, False)))
        other = TransactionalIdClient(target.host, target.port, f"{transactional_id}-other")
        try:
            seen.append(("another id's producer id", other.add_partitions(pid, epoch, {topic: [0]})))
            seen.append(("an unknown id's end", other.end_txn(pid, epoch, True)))
        finally:
            other.close()
    finally:
        client.close()
    return seen


def test_transaction_steps_answer_as_kafka_does(targets: list[Target]) -> None:
    suffix = uuid.uuid4().hex[:10]
    kafka, server = (steps(t, f"diff-steps-{suffix}", f"steps-{suffix}") for t in targets)
    assert server == kafka
