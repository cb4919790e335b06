"""Real consumer groups through a coordinator failover (issue 12): a confluent-kafka (librdkafka) group and a
kafka-python group, coordinated by the same node, consume a replicated topic and commit after each batch;
kill -9 of that node moves both groups to another one, both clients rediscover it and re-form, every record
is consumed, and no acknowledged commit is lost."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from tests.client_contract import kafka_python_subscribe
from tests.cluster.cluster_support import Cluster, Node

pytestmark = pytest.mark.integration

TOPIC = "events"
PARTITIONS = 4


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path, topic=[f"{TOPIC}:{PARTITIONS}"], default_replication_factor=3).start_all()
    yield c
    c.stop_all()


def bootstrap(nodes: list[Node]) -> str:
    return ",".join(f"127.0.0.1:{n.fixed_port}" for n in nodes)


class Member(threading.Thread):
    """One consumer in its own thread: poll, record what it saw, commit synchronously; `acked` holds the
    offsets of every commit the server acknowledged."""

    def __init__(self, poll: Callable[[], list[tuple[int, int]]], commit: Callable[[dict[int, int]], None],
                 close: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self._poll, self._commit, self._close = poll, commit, close
        self.seen: set[tuple[int, int]] = set()
        self.acked: dict[int, int] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    records = self._poll()
                except Exception as e:  # a failover is allowed to surface as an error; the member goes on
                    self.errors.append(repr(e))
                    continue
                if not records:
                    continue
                self.seen.update(records)
                positions: dict[int, int] = {}
                for p, o in records:
                    positions[p] = max(positions.get(p, 0), o + 1)
                try:
                    self._commit(positions)
                except Exception as e:
                    self.errors.append(repr(e))
                    continue
                for p, o in positions.items():
                    self.acked[p] = max(self.acked.get(p, 0), o)
        finally:
            self._close()


def confluent_member(servers: str, group: str) -> Member:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([TOPIC])

    def poll() -> list[tuple[int, int]]:
        out = []
        for m in consumer.consume(num_messages=100, timeout=0.3):
            if m.error() is None:
                out.append((m.partition(), m.offset()))
        return out

    def commit(positions: dict[int, int]) -> None:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in positions.items()], asynchronous=False)

    return Member(poll, commit, consumer.close)


def kafka_python_member(servers: str, group: str) -> Member:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=500, metadata_max_age_ms=1000)
    kafka_python_subscribe(consumer, [TOPIC])

    def poll() -> list[tuple[int, int]]:
        batches = consumer.poll(timeout_ms=300, max_records=100)
        return [(tp.partition, m.offset) for tp, ms in batches.items() for m in ms]

    def commit(positions: dict[int, int]) -> None:
        consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()})

    return Member(poll, commit, consumer.close)


def groups_on_one_coordinator(cluster: Cluster) -> tuple[str, str, int]:
    """A group name for each client whose coordinators are the same node (so one kill moves both)."""
    first = {i: cluster.wait_coordinator(f"kp-{i}").node_id for i in range(12)}
    for j in range(12):
        node = cluster.wait_coordinator(f"cf-{j}").node_id
        for i, other in first.items():
            if other == node:
                return f"cf-{j}", f"kp-{i}", node
    raise AssertionError("no two groups share a coordinator")


def produce(cluster: Cluster, servers: str, start: int, count: int) -> dict[int, int]:
    """acks=all; the end offset of each partition afterwards. The producer's own delivery timeout bounds the
    wait, so a record that cannot be written fails with the producer's reason, shown with the topic's
    leaders and ISRs and the nodes' last log lines."""
    producer = KafkaProducer(bootstrap_servers=servers.split(","), acks="all", retry_backoff_ms=200,
                             request_timeout_ms=20000, max_block_ms=30000, delivery_timeout_ms=90000)
    futures = [producer.send(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(start, start + count)]
    ends: dict[int, int] = {}
    try:
        for f in futures:
            md = f.get(timeout=120)
            ends[md.partition] = max(ends.get(md.partition, 0), md.offset + 1)
    except Exception as e:
        raise AssertionError(f"records {start}..{start + count} not all written ({e!r}); {TOPIC} is "
                             f"{cluster.topic_state(TOPIC)}\n{cluster.log_tails()}") from e
    finally:
        producer.close(timeout=5)
    return ends


def wait_for(check: Callable[[], bool], what: str, timeout_s: float, members: list[Member]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s}s; errors: {[m.errors[-3:] for m in members]}")
        time.sleep(0.2)


def all_seen(members: list[Member], ends: dict[int, int]) -> bool:
    seen: set[tuple[int, int]] = set().union(*(m.seen for m in members))
    return all((p, o) in seen for p, end in ends.items() for o in range(end))


def test_confluent_kafka_and_kafka_python_groups_survive_their_coordinators_kill_9(cluster: Cluster) -> None:
    cf_group, kp_group, coordinator = groups_on_one_coordinator(cluster)
    servers = bootstrap(cluster.running())
    ends = produce(cluster, servers, 0, 400)
    cf = [confluent_member(servers, cf_group) for _ in range(2)]
    kp = [kafka_python_member(servers, kp_group) for _ in range(2)]
    members = cf + kp
    for m in members:
        m.start()
    try:
        wait_for(lambda: all_seen(cf, ends) and all_seen(kp, ends), "both groups consumed the first records",
                 60, members)
        acked_before: list[dict[int, int]] = [dict(m.acked) for m in members]
        # On a loaded machine a follower can fall behind for replica.lag.time.max.ms and leave an ISR; a
        # partition whose ISR is then its leader alone has no one to take over (unclean election is off, as
        # in Kafka) and stays offline while the leader is dead. The kill comes once every replica is in sync.
        for topic in ("__consumer_offsets", TOPIC):
            cluster.wait_full_isr(what="every replica", topic=topic)

        cluster.kill9(coordinator)
        # Both groups move to another node within the ZooKeeper session (3 s) plus the load.
        for group in (cf_group, kp_group):
            cluster.wait_coordinator(group, timeout_s=30, accept=lambda n: n != coordinator)
        survivors = bootstrap(cluster.running())
        for p, end in produce(cluster, survivors, 400, 400).items():
            ends[p] = max(ends.get(p, 0), end)
        wait_for(lambda: all_seen(cf, ends) and all_seen(kp, ends), "both groups consumed everything after the "
                 "failover", 90, members)
        # Each group goes on committing on its new coordinator: its commits reach the end of every partition.
        for group_members in (cf, kp):
            wait_for(lambda gm=group_members: all(  # type: ignore[misc]
                max((m.acked.get(p, 0) for m in gm), default=0) >= end for p, end in ends.items()),
                "commits reached the end of every partition", 60, members)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)

    for group, before in ((cf_group, acked_before[:2]), (kp_group, acked_before[2:])):
        _node, committed = cluster.committed_via_coordinator(group, accept=lambda n: n != coordinator)
        for p, end in ends.items():
            # The group's committed offset is the end: every acknowledged commit (before and after the kill)
            # is at or below it, and nothing past what was produced was committed.
            assert committed.get((TOPIC, p)) == end, (group, p, committed, end)
            assert all(b.get(p, 0) <= end for b in before)
