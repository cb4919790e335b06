"""The topic store in a cluster (issue 12): a topic is created once for the whole cluster through ZooKeeper,
its partitions are replicated with an ISR like `__consumer_offsets`, a producer's acks=all is answered only
once the ISR has the records, consumers read up to the high watermark, and kill -9 of a partition's leader
loses nothing that was acknowledged. Real kafka-python producers, consumers and admin client."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, NotEnoughReplicasError
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.cluster.cluster_support import Cluster, Node

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 3


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path, topic=[]).start_all()
    yield c
    c.stop_all()


def bootstrap(nodes: list[Node]) -> list[str]:
    return [f"127.0.0.1:{n.fixed_port}" for n in nodes]


def topic_metadata(cluster: Cluster, node: Node) -> Any:
    md = cluster.ask(MetadataRequest[10](topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name=TOPIC)],
                                         allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                         include_topic_authorized_operations=False), MetadataResponse, [node])
    [topic] = md.topics
    return topic


def wait_topic(cluster: Cluster, check: Any, what: str, timeout_s: float = 30.0) -> dict[int, Any]:
    """Until every running node's Metadata of the topic passes `check`; the last answers by node."""
    deadline = time.monotonic() + timeout_s
    while True:
        answers = {n.node_id: topic_metadata(cluster, n) for n in cluster.running()}
        if all(check(t) for t in answers.values()):
            return answers
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s}s: {answers}")
        time.sleep(0.2)


def full_isr(topic: Any) -> bool:
    return topic.error_code == 0 and len(topic.partitions) == PARTITIONS and all(
        p.leader_id >= 0 and len(p.isr_nodes) == 3 for p in topic.partitions)


def produce(producer: KafkaProducer, start: int, count: int) -> dict[int, list[tuple[int, bytes]]]:
    """`count` keyed records with acks=all; what was acknowledged, by partition: (offset, value)."""
    futures = [producer.send(TOPIC, key=f"k{i % 17}".encode(), value=f"v{i}".encode()) for i in range(start, start + count)]
    acked: dict[int, list[tuple[int, bytes]]] = {}
    for i, f in zip(range(start, start + count), futures, strict=True):
        md = f.get(timeout=60)
        acked.setdefault(md.partition, []).append((md.offset, f"v{i}".encode()))
    return acked


def test_a_replicated_topic_keeps_every_acknowledged_record_across_leader_failures(cluster: Cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster.running()), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    finally:
        admin.close()
    answers = wait_topic(cluster, full_isr, "the topic did not reach every node with a full ISR")
    # One topic for the whole cluster: every node reports the same id, leaders and replicas.
    assert len({t.topic_id for t in answers.values()}) == 1
    layouts = {tuple((p.partition_index, p.leader_id, tuple(sorted(p.replica_nodes))) for p in sorted(
        t.partitions, key=lambda p: p.partition_index)) for t in answers.values()}
    assert len(layouts) == 1, layouts
    leaders = {p.leader_id for p in answers[0].partitions}
    assert len(leaders) == 3, answers[0]  # one leader per broker

    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster.running()), acks="all", retries=20,
                             retry_backoff_ms=200, linger_ms=5, request_timeout_ms=20000, max_block_ms=30000)
    acked = produce(producer, 0, 300)

    # kill -9 the leader of partition 0 while records keep coming: the producer follows the new leader,
    # and what it was told is acknowledged is on the survivors.
    victim = next(p.leader_id for p in answers[0].partitions if p.partition_index == 0)
    cluster.kill9(victim)
    for partition, records in produce(producer, 300, 300).items():
        acked.setdefault(partition, []).extend(records)
    moved = wait_topic(cluster, lambda t: all(p.leader_id not in (victim, -1) for p in t.partitions),
                       "leadership did not move off the killed node")
    assert all(victim not in p.isr_nodes for p in next(iter(moved.values())).partitions)

    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap(cluster.running()), group_id="readers",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=1000)
    seen: dict[int, list[tuple[int, bytes]]] = {}
    wanted = sum(len(r) for r in acked.values())
    deadline = time.monotonic() + 60
    try:
        while sum(len(r) for r in seen.values()) < wanted and time.monotonic() < deadline:
            for message in consumer:
                seen.setdefault(message.partition, []).append((message.offset, message.value))
    finally:
        consumer.close()
    for partition, records in acked.items():
        got = dict(seen.get(partition, []))
        missing = [(o, v) for o, v in records if got.get(o) != v]
        assert not missing, (partition, missing[:5], len(missing))
        offsets = [o for o, _ in seen[partition]]
        assert offsets == sorted(set(offsets)), partition  # in order, nothing twice
    # The producer is idempotent (kafka-python's default): a batch it retried across the failover is
    # recognised by the new leader, whose producer state came from what it copied, and written once.
    values = [v for records in seen.values() for _, v in records]
    assert len(values) == len(set(values)), [v for v in set(values) if values.count(v) > 1][:5]

    # With one replica alive the ISR is below min.insync.replicas=2: acks=all is refused, nothing written.
    second = next(n.node_id for n in cluster.running())
    cluster.kill9(second)
    wait_topic(cluster, lambda t: all(len(p.isr_nodes) == 1 and p.leader_id >= 0 for p in t.partitions),
               "the ISR did not shrink to the last node")
    strict = KafkaProducer(bootstrap_servers=bootstrap(cluster.running()), acks="all", retries=0, linger_ms=0,
                           request_timeout_ms=10000, max_block_ms=20000)
    try:
        with pytest.raises(NotEnoughReplicasError):
            strict.send(TOPIC, partition=0, value=b"refused").get(timeout=30)
    finally:
        strict.close()

    # Both come back, catch up from the leaders (truncating first) and rejoin every ISR.
    cluster.start(victim)
    cluster.start(second)
    wait_topic(cluster, full_isr, "the restarted nodes did not rejoin every ISR", timeout_s=60)
    acked_after = produce(producer, 600, 30)
    assert sum(len(r) for r in acked_after.values()) == 30
    producer.close()

    # Deleting it is cluster-wide too: gone from every node's Metadata and from every data directory.
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster.running()), request_timeout_ms=30000)
    try:
        admin.delete_topics([TOPIC])
    except KafkaError as e:  # pragma: no cover - shown in the assertion below
        raise AssertionError(f"delete failed: {e!r}") from e
    finally:
        admin.close()
    wait_topic(cluster, lambda t: t.error_code == 3, "the topic was not deleted everywhere")  # UNKNOWN_TOPIC
    deadline = time.monotonic() + 15
    while any(any(d.name.startswith(f"{TOPIC}-") for d in n.data_dir.iterdir()) for n in cluster.running()):
        assert time.monotonic() < deadline, [list(n.data_dir.iterdir()) for n in cluster.running()]
        time.sleep(0.2)
