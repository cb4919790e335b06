"""A KIP-848 consumer group through a coordinator move: two confluent-kafka members with
`group.protocol=consumer` share a replicated topic; kill -9 of their coordinator moves the group to another
node, which rebuilds it from its replica of `__consumer_offsets` (the ConsumerGroup* records) when it loads
the partition. The members go on heartbeating at their epochs there: no partition is revoked, no member
rejoins and no new target assignment is computed."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from protocol.consumer_group_messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from tests.cluster.cluster_support import Cluster, Node

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.integration.consumer_protocol_support import Member, Timeline, settled, wait_until  # noqa: E402

pytestmark = pytest.mark.integration

TOPIC = "moving"
PARTITIONS = 6
GROUP_FLAGS = dict(group_consumer_min_heartbeat_interval_ms=100, group_consumer_heartbeat_interval_ms=250,
                   group_consumer_min_session_timeout_ms=3000, group_consumer_session_timeout_ms=10_000)


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path, topic=[f"{TOPIC}:{PARTITIONS}"], default_replication_factor=3,
                **GROUP_FLAGS).start_all()
    yield c
    c.stop_all()


def bootstrap(nodes: list[Node]) -> str:
    return ",".join(f"127.0.0.1:{n.fixed_port}" for n in nodes)


def test_a_consumer_group_moves_with_its_coordinator_at_its_epochs(cluster: Cluster) -> None:
    group = "cg-move"
    old = cluster.wait_coordinator(group)
    timeline = Timeline()
    servers = bootstrap(cluster.running())
    members = [Member(servers, f"m{i}", timeline, group, topic=TOPIC) for i in range(2)]
    try:
        wait_until(settled(members, PARTITIONS), 60, "two members to share the partitions")
        before = [m.assignment() for m in members]
        epoch = old.events("consumer_group_target_assigned")[-1]["assignment_epoch"]
        cluster.wait_full_isr(what="the group's records on every replica")

        cluster.kill9(old.node_id)
        killed_at = time.monotonic()
        new = cluster.wait_coordinator(group, timeout_s=30, accept=lambda n: n != old.node_id)
        new.wait_for_event("coordinator_partition_loaded", timeout_s=30)
        time.sleep(4.0)  # the members find the new coordinator and heartbeat there at their epochs
        assert [m.assignment() for m in members] == before
        assert not [e for e in timeline.events if e[2] == "revoke" and e[0] > killed_at]
        assert not [e for e in new.events("consumer_member_joining") if e.get("group_id") == group]
        assert not [e for e in new.events("consumer_group_target_assigned") if e.get("group_id") == group]
        assert not [e for e in new.events("consumer_group_epoch_bumped") if e.get("group_id") == group]
        [described] = cluster.ask(ConsumerGroupDescribeRequest[1](group_ids=[group], include_authorized_operations=False),
                                  ConsumerGroupDescribeResponse, nodes=[new]).groups
        assert (described.error_code, described.assignment_epoch) == (0, epoch)
        assert [m.member_epoch for m in described.members] == [epoch, epoch]
    finally:
        for m in members:
            m.close()

