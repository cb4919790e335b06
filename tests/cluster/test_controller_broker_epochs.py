"""KIP-380 broker epochs in the controller, against a real ZooKeeper: a broker whose registration is newer
than the one the controller last saw has restarted, even when the controller never saw it gone (its old
session expired and it registered again between two reconciliations). The partitions it led get a new
leader epoch, and it leaves the ISRs until it catches up; a broker that did not restart is left alone."""
from __future__ import annotations

from coordinator_server.cluster import zk_layout as zl
from coordinator_server.cluster.controller import Controller
from coordinator_server.cluster.zk_client import ZkClient
from coordinator_server.cluster.zk_layout import BrokerRegistration

TOPIC = "__consumer_offsets"


async def test_a_broker_that_registered_again_unseen_is_handled_as_failed_and_returned(zk_connect: str) -> None:
    brokers = {i: ZkClient(zk_connect, 3000) for i in range(3)}
    controller_zk = ZkClient(zk_connect, 3000)
    clients = [*brokers.values(), controller_zk]
    try:
        for i, zk in brokers.items():
            await zk.start()
            await zk.register_broker(BrokerRegistration(i, "127.0.0.1", 9092 + i))
        await controller_zk.start()
        await controller_zk.ensure_paths()
        # Driven by hand (no watches), so the restart below happens between two reconciliations.
        controller = Controller(controller_zk, 9, offsets_topic=TOPIC, offsets_partitions=3,
                                offsets_replication_factor=3, unclean_leader_election=False)
        await controller._campaign()
        await controller._reconcile()  # creates nothing new; records every broker's epoch
        before = {p: (await controller_zk.partition_state(TOPIC, p))[0] for p in range(3)}  # type: ignore[index]
        assert {s.leader for s in before.values()} == {0, 1, 2} and all(len(s.isr) == 3 for s in before.values())

        # Broker 0 dies and comes back under the same id: a new session, a new registration.
        await brokers[0].close()
        brokers[0] = ZkClient(zk_connect, 3000)
        clients.append(brokers[0])
        await brokers[0].start()
        await brokers[0].register_broker(BrokerRegistration(0, "127.0.0.1", 9092))
        await controller._reconcile()

        after = {p: (await controller_zk.partition_state(TOPIC, p))[0] for p in range(3)}  # type: ignore[index]
        for p, old in before.items():
            new = after[p]
            assert 0 not in new.isr, (p, new)  # it catches up before it is in sync again
            if old.leader == 0:
                assert new.leader in (1, 2) and new.leader_epoch == old.leader_epoch + 1, (p, old, new)
            else:
                assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch), (p, old, new)

        # Nothing restarted since: the next reconciliation changes nothing.
        await controller._reconcile()
        assert {p: (await controller_zk.partition_state(TOPIC, p))[0] for p in range(3)} == after  # type: ignore[index]
        assert (await controller_zk.get(zl.CONTROLLER)) is not None
    finally:
        for zk in clients:
            await zk.close()
