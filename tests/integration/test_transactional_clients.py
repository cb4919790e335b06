"""kafka-python's and aiokafka's transactional producers against one node: each commits one transaction and
aborts another, and a read_committed consumer (confluent-kafka, tests/integration/eos_support.py) reads the
committed records once and the aborted ones never, while a read_uncommitted one reads both. Each client sends
its own versions of InitProducerId, AddPartitionsToTxn, Produce and EndTxn."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer

from tests.integration.conftest import ServerFactory
from tests.integration.eos_support import read_to_end

pytestmark = pytest.mark.integration


def test_kafka_python_commits_and_aborts(server_factory: ServerFactory) -> None:
    srv = server_factory(topic=["kp-tx:1"])
    producer = KafkaProducer(bootstrap_servers=srv.address, transactional_id=f"kp-{uuid.uuid4()}",
                             request_timeout_ms=10_000)
    try:
        producer.init_transactions()
        for name, commit in (("kept", True), ("dropped", False)):
            producer.begin_transaction()
            for i in range(3):
                producer.send("kp-tx", value=f"{name}{i}".encode(), partition=0)
            producer.flush(timeout=10)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=5)
    assert read_to_end(srv.address, "kp-tx", 1) == {0: ["kept0", "kept1", "kept2"]}
    assert read_to_end(srv.address, "kp-tx", 1, "read_uncommitted") == {
        0: ["kept0", "kept1", "kept2", "dropped0", "dropped1", "dropped2"]}


def test_aiokafka_commits_and_aborts(server_factory: ServerFactory) -> None:
    srv = server_factory(topic=["aio-tx:1"])

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=srv.address, transactional_id=f"aio-{uuid.uuid4()}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait("aio-tx", value=f"kept{i}".encode(), partition=0)
            await producer.begin_transaction()
            for i in range(3):
                await producer.send_and_wait("aio-tx", value=f"dropped{i}".encode(), partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert read_to_end(srv.address, "aio-tx", 1) == {0: ["kept0", "kept1", "kept2"]}
    assert read_to_end(srv.address, "aio-tx", 1, "read_uncommitted") == {
        0: ["kept0", "kept1", "kept2", "dropped0", "dropped1", "dropped2"]}
