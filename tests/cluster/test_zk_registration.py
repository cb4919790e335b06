"""A broker's registration in ZooKeeper (`ZkClient.register_broker`) against a real ZooKeeper: an id held by
another live session is refused, and the refusal names both ways that happens — another node with the same
--node-id, or this node's previous process (kill -9) whose session has not expired yet, which is how a
node restarted within --zookeeper-session-timeout-ms of its crash fails (as a Kafka broker does)."""
from __future__ import annotations

import pytest

from coordinator_server.cluster.zk_client import ZkClient
from coordinator_server.cluster.zk_layout import BrokerRegistration


async def test_an_id_held_by_another_session_is_refused_until_that_session_ends(zk_connect: str) -> None:
    first, second = ZkClient(zk_connect, 3000), ZkClient(zk_connect, 3000)
    await first.start()
    await second.start()
    try:
        await first.register_broker(BrokerRegistration(1, "127.0.0.1", 9092))
        await first.register_broker(BrokerRegistration(1, "127.0.0.1", 9092))  # its own session: already done
        with pytest.raises(RuntimeError) as refused:
            await second.register_broker(BrokerRegistration(1, "127.0.0.1", 9093))
        message = str(refused.value)
        assert "another node running with --node-id 1" in message
        assert "previous session has not expired yet" in message and "3000 ms" in message

        await first.close()  # its session ends, and its ephemeral registration with it
        await second.register_broker(BrokerRegistration(1, "127.0.0.1", 9093))
        assert [(b.node_id, b.port) for b in (await second.brokers()).values()] == [(1, 9093)]
    finally:
        await first.close()
        await second.close()
