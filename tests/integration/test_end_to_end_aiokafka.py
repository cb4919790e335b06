"""End to end with aiokafka clients, each in its own process: the scenario of test_end_to_end.py.

An idempotent `AIOKafkaProducer` writes 50,000 keyed records into a 12-partition topic while a group of
`AIOKafkaConsumer`s with auto-commit reads them; one consumer closes gracefully, the server is killed
with SIGKILL and restarted on the same port and data directory, one consumer is killed with SIGKILL and
a new one joins. The checks (`e2e_support.verify`) read the server back with an aiokafka consumer too.
"""
from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from .conftest import ServerFactory, ServerProcess
from .e2e_support import Scenario, free_port, run_scenario, verify, workers

pytestmark = pytest.mark.integration

TOPIC = "e2e-aio"
PARTITIONS = 12


def read_committed(srv: ServerProcess, group: str, topic: str, partitions: int) -> tuple[dict[int, int], dict[int, int]]:
    """Committed offsets (OffsetFetch) and log end offsets (ListOffsets) from a fresh AIOKafkaConsumer."""

    async def read() -> tuple[dict[int, int], dict[int, int]]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer = AIOKafkaConsumer(bootstrap_servers=srv.address, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            committed = {tp.partition: await consumer.committed(tp) for tp in tps}
            ends = {tp.partition: off for tp, off in (await consumer.end_offsets(tps)).items()}
        finally:
            await consumer.stop()
        return committed, ends

    return asyncio.run(read())


def test_aiokafka_group_survives_consumer_and_server_failures(server_factory: ServerFactory) -> None:
    port = free_port()
    srv = server_factory(port=port, topic=[f"{TOPIC}:{PARTITIONS}"], initial_rebalance_delay_ms=0,
                         min_session_timeout_ms=500)
    assert srv.port == port
    with workers("aiokafka", srv.address, TOPIC) as ws:
        outcome = run_scenario(srv, "aiokafka", TOPIC, Scenario(partitions=PARTITIONS), ws, read_committed)
        assert srv.port == port
        stats = verify(outcome, PARTITIONS)
    print(stats)
