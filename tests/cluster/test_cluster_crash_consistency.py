"""Crash consistency of the cluster (issue 12): every acknowledged commit survives many kill -9 of leaders.

Three nodes (RF 3, min ISR 2, ZooKeeper session 3 s: `Cluster`'s defaults) under a steady stream of
commits from several clients:
- committers, one thread per group (the groups cover every `__consumer_offsets` partition), each sending
  raw OffsetCommits of a strictly increasing value to a random subset of topic t's partitions, to the
  coordinator FindCoordinator names, and looking again after any error, as a client does;
- a kafka-python KafkaConsumer group whose members come and go (each closes after a random while and a new
  one takes its place: rebalances), committing explicit, increasing offsets for what it is assigned with
  `commit()` and recording each commit `commit()` returned from (acknowledged).
Meanwhile the killer SIGKILLs the coordinator of a random group at a random moment and restarts it a
short random pause after its ZooKeeper session expired (before that its id is still registered),
CLUSTER_SOAK_KILLS times (20 in `make test`). Before each kill it waits until every committer has been
acknowledged again since the previous restart: each kill hits a cluster that recovered from the last one
and is busy.

What a coordinator serves must be, for every partition, the last acknowledged commit or a later one that
was sent and never answered (Kafka's semantics: an unacknowledged write may or may not survive; an
acknowledged one must, and nothing older may come back), and never a value nobody sent. Each committer
checks that on every coordinator it moves to, before it sends anything there (it is its group's only
writer, so the check is exact, and a commit lost in a failover cannot hide behind a later one); at the
end, with every node running, it is checked for every group, the kafka-python one included. A group's
values grow in the order the coordinator applies them (one thread per raw group; in the consumer group a
partition changes owner only through a new generation, which waits for the old owner's rejoin or removal,
so the old owner's commits were applied first), so "nothing older than the last acknowledged" is "at
least the largest acknowledged".

Replay with CLUSTER_SOAK_SEED=<seed printed at the start>: the seed fixes the schedule (victims, moments,
pauses, partitions committed), not the interleaving of threads and processes.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.structs import OffsetAndMetadata

from coordinator_server.group.partitioner import partition_for
from tests.client_contract import kafka_python_subscribe
from tests.cluster.cluster_support import OFFSETS_PARTITIONS, Cluster, Node
from tests.integration.group_client import Connection, ServerClosed

KILLS = int(os.environ.get("CLUSTER_SOAK_KILLS", "20"))
# About 2.5 minutes for 20 kills alone on 2 cores; room for a busier machine (make test runs it beside
# another worker) without dropping the hang guard (make soak turns timeouts off).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(max(300, 25 * KILLS))]
TOPIC = "t"
TOPIC_PARTITIONS = 4  # Cluster's default --topic t:4
COMMITTER_GROUPS = int(os.environ.get("CLUSTER_SOAK_GROUPS", "6"))  # >= 6: every offsets partition has one
CONSUMERS = 2  # members of the kafka-python group at any time
RECOVERY_S = 45.0  # how long the cluster may take to acknowledge every committer again after a restart
# What a client may be answered while leadership moves; anything else fails the test.
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@dataclass
class Ledger:
    """What one group's clients sent and what the cluster acknowledged, per partition of t."""

    group_id: str
    sent: dict[int, set[int]] = field(default_factory=dict)
    acked: dict[int, int] = field(default_factory=dict)  # partition -> largest acknowledged value
    acks: int = 0
    verified: int = 0  # times a coordinator's answer was checked against what was acknowledged
    _values: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, partitions: list[int]) -> int:
        """The next value, recorded as sent to `partitions` before it is."""
        with self._lock:
            value = next(self._values)
            for p in partitions:
                self.sent.setdefault(p, set()).add(value)
            return value

    def acknowledged(self, value: int, partitions: list[int]) -> None:
        with self._lock:
            for p in partitions:
                self.acked[p] = max(self.acked.get(p, 0), value)
            self.acks += 1

    def check(self, served: dict[tuple[str, int], int]) -> None:
        for p in range(TOPIC_PARTITIONS):
            value = served.get((TOPIC, p), -1)
            if value >= 0:
                assert value in self.sent.get(p, ()), f"{self.group_id}/{p}: serves {value}, never sent"
            if p in self.acked:
                assert value >= self.acked[p], (
                    f"{self.group_id}/{p}: acknowledged {self.acked[p]}, the coordinator serves {value}")


def groups_covering_every_partition(count: int) -> list[str]:
    """`count` committer group ids, spread over the __consumer_offsets partitions as evenly as can be."""
    by_partition: dict[int, list[str]] = {}
    for i in itertools.count():
        g = f"committer-{i}"
        by_partition.setdefault(partition_for(g, OFFSETS_PARTITIONS), []).append(g)
        if len(by_partition) == OFFSETS_PARTITIONS and sum(len(v) for v in by_partition.values()) >= count:
            break
    spread = itertools.chain.from_iterable(itertools.zip_longest(*by_partition.values()))
    return [g for g in spread if g is not None][:count]


# ------------------------------------------------------------------------------------- committers


def commit_request(group_id: str, value: int, partitions: list[int]) -> Any:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest[7](
        group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=value, committed_leader_epoch=-1, committed_metadata=f"v{value}")
            for p in partitions])])


def locate(cluster: Cluster, group_id: str) -> Node | None:
    try:
        error, node_id = cluster.find_coordinator(group_id)
    except AssertionError:  # no node answered (the one running was just killed)
        return None
    return cluster.nodes[node_id] if error == 0 else None


def verify_served(conn: Connection, ledger: Ledger) -> bool:
    """OffsetFetch from `conn`'s node and check it against `ledger`; False when that node cannot answer
    for the group now (not its coordinator, loading, or killed)."""
    try:
        resp = conn.call(OffsetFetchRequest[7](group_id=ledger.group_id, topics=None, require_stable=True),
                         OffsetFetchResponse, timeout_s=15.0)
    except (OSError, ServerClosed, TimeoutError):
        return False
    if resp.error_code in RETRIABLE:
        return False
    assert resp.error_code == 0, f"{ledger.group_id}: OffsetFetch answered {resp.error_code}"
    ledger.check({(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions})
    ledger.verified += 1
    return True


def run_committer(cluster: Cluster, ledger: Ledger, rng: random.Random, stop: threading.Event,
                  errors: list[BaseException]) -> None:
    conn: Connection | None = None
    try:
        while not stop.is_set():
            if conn is None:
                node = locate(cluster, ledger.group_id)
                try:
                    conn = Connection((node.host, node.fixed_port), ledger.group_id) if node else None
                except OSError:  # killed, and the others have not noticed yet
                    conn = None
                if conn is None:
                    stop.wait(0.1)
                    continue
                # A new coordinator (or the same one after an error): before anything new is sent, what it
                # serves must hold every commit acknowledged so far. The committer is its group's only
                # writer, so this is exact; checking only at the end would miss a commit lost in a failover
                # and overwritten since.
                if not verify_served(conn, ledger):
                    conn.close()
                    conn = None
                    stop.wait(0.05)
                    continue
            partitions = sorted(rng.sample(range(TOPIC_PARTITIONS), rng.randint(1, TOPIC_PARTITIONS)))
            value = ledger.send(partitions)
            try:
                resp = conn.call(commit_request(ledger.group_id, value, partitions), OffsetCommitResponse,
                                 timeout_s=15.0)
            except (OSError, ServerClosed, TimeoutError):  # killed with the request in flight
                conn.close()
                conn = None
                continue
            codes = {p.partition_index: p.error_code for t in resp.topics for p in t.partitions}
            assert set(codes.values()) <= {0} | RETRIABLE, f"{ledger.group_id}: commit of {value} answered {codes}"
            assert len(set(codes.values())) == 1, f"{ledger.group_id}: commit of {value} half answered: {codes}"
            if set(codes.values()) == {0}:
                ledger.acknowledged(value, partitions)
                stop.wait(rng.uniform(0.0, 0.02))  # a steady stream, not a saturated one: 2 cores for it all
            else:
                conn.close()
                conn = None
                stop.wait(0.05)
    except BaseException as e:
        errors.append(e)
    finally:
        if conn is not None:
            conn.close()


# ------------------------------------------------------------------------------- kafka-python group


@dataclass
class ConsumerStats:
    members: int = 0  # KafkaConsumers created
    generations: set[int] = field(default_factory=set)
    failed_commits: int = 0


def run_consumer_member(cluster: Cluster, ledger: Ledger, name: str, rng: random.Random, stop: threading.Event,
                        stats: ConsumerStats, errors: list[BaseException]) -> None:
    """One member slot of the group: a KafkaConsumer that commits for a while, closes (LeaveGroup), and is
    replaced by a new one, until `stop`."""
    bootstrap = [f"127.0.0.1:{n.fixed_port}" for n in cluster.nodes.values()]
    try:
        for life in itertools.count():
            if stop.is_set():
                return
            try:
                consumer = KafkaConsumer(
                    bootstrap_servers=bootstrap, group_id=ledger.group_id, client_id=f"{name}-{life}",
                    enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                    heartbeat_interval_ms=500, max_poll_interval_ms=20_000, request_timeout_ms=15_000,
                    retry_backoff_ms=100, reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000)
            except kafka_errors.KafkaError:  # no node answered its bootstrap (one is being killed)
                stop.wait(0.5)
                continue
            stats.members += 1
            try:
                kafka_python_subscribe(consumer, [TOPIC])
                live_until = time.monotonic() + rng.uniform(3.0, 10.0)
                while not stop.is_set() and time.monotonic() < live_until:
                    consumer.poll(timeout_ms=100)
                    commit_assigned(consumer, ledger, stats)
            except kafka_errors.KafkaError:
                pass  # a failover under our feet; this member just ends its life early
            finally:
                with contextlib.suppress(kafka_errors.KafkaError):
                    consumer.close(autocommit=False)
    except BaseException as e:
        errors.append(e)


def commit_assigned(consumer: KafkaConsumer, ledger: Ledger, stats: ConsumerStats) -> None:
    assigned = sorted(tp.partition for tp in consumer.assignment() if tp.topic == TOPIC)
    if not assigned:
        return
    value = ledger.send(assigned)
    try:
        consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(value, "", -1) for p in assigned},
                        timeout_ms=10_000)
    except kafka_errors.KafkaError:  # a rebalance or a failover: not acknowledged
        stats.failed_commits += 1
        return
    ledger.acknowledged(value, assigned)
    stats.generations.add(consumer._coordinator._generation.generation_id)


# ----------------------------------------------------------------------------------------- the test


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path).start_all()
    yield c
    c.stop_all()


def wait_for_progress(ledgers: list[Ledger], since: dict[str, int], timeout_s: float,
                      errors: list[BaseException]) -> None:
    deadline = time.monotonic() + timeout_s
    while (behind := [g.group_id for g in ledgers if g.acks <= since[g.group_id]]) and time.monotonic() < deadline:
        if errors:  # a client's check failed (and its thread ended): that is the news, not the stall
            raise errors[0]
        time.sleep(0.05)
    if errors:
        raise errors[0]
    assert not behind, f"not acknowledged again within {timeout_s}s of the last restart: {behind}"


def wait_deregistered(cluster: Cluster, node_id: int, timeout_s: float = 20.0) -> None:
    """Until the killed node's registration (an ephemeral znode of its old ZooKeeper session) is gone. As
    with Kafka's brokers, a node restarted before that refuses to start: its id is still registered."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if node_id not in {b.node_id for b in cluster.metadata().brokers}:
                return
        except AssertionError:
            pass  # no node answered this time
        time.sleep(0.05)
    raise AssertionError(f"node {node_id} still registered {timeout_s}s after its kill")


def snapshot(ledgers: list[Ledger]) -> dict[str, int]:
    return {g.group_id: g.acks for g in ledgers}


def test_acknowledged_commits_survive_kill9_of_leaders(cluster: Cluster) -> None:
    seed = int(os.environ.get("CLUSTER_SOAK_SEED") or random.randrange(2**32))
    print(f"cluster crash consistency: CLUSTER_SOAK_SEED={seed} CLUSTER_SOAK_KILLS={KILLS}")
    rng = random.Random(seed)
    assert COMMITTER_GROUPS >= OFFSETS_PARTITIONS, "every offsets partition needs a committer (see the end)"
    committers = [Ledger(g) for g in groups_covering_every_partition(COMMITTER_GROUPS)]
    consumers = Ledger("consumers")
    stats = ConsumerStats()
    stop = threading.Event()
    errors: list[BaseException] = []
    threads = [threading.Thread(target=run_committer, args=(cluster, g, random.Random(rng.random()), stop, errors),
                                name=g.group_id) for g in committers]
    threads += [threading.Thread(target=run_consumer_member, name=f"consumer-{i}", args=(
        cluster, consumers, f"consumer-{i}", random.Random(rng.random()), stop, stats, errors))
        for i in range(CONSUMERS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        since = snapshot(committers)
        for kill in range(KILLS):
            wait_for_progress(committers, since, RECOVERY_S, errors)
            time.sleep(rng.uniform(0.0, 0.5))
            group = rng.choice([g.group_id for g in committers] + [consumers.group_id])
            victim = cluster.wait_coordinator(group).node_id
            cluster.kill9(victim)
            wait_deregistered(cluster, victim)
            pause_s = rng.uniform(0.1, 1.0)
            time.sleep(pause_s)
            cluster.start(victim)
            since = snapshot(committers)
            print(f"kill {kill + 1}/{KILLS} at {time.monotonic() - started:.1f}s: node {victim} "
                  f"(coordinator of {group}), restarted after {pause_s:.2f}s")
        wait_for_progress(committers, since, RECOVERY_S, errors)
    finally:
        stop.set()
        for t in threads:
            t.join(40)
    assert not [t.name for t in threads if t.is_alive()], "a client thread hung"
    assert not errors, errors

    for ledger in [*committers, consumers]:
        _node, served = cluster.committed_via_coordinator(ledger.group_id)
        ledger.check(served)
    acks = {g.group_id: g.acks for g in [*committers, consumers]}
    verified = {g.group_id: g.verified for g in committers}
    print(f"{KILLS} kills in {time.monotonic() - started:.1f}s; acknowledged commits {acks}; "
          f"checks of a new coordinator {verified}; kafka-python "
          f"members {stats.members}, generations {sorted(stats.generations)}, failed commits {stats.failed_commits}")
    # Every victim led a committer group's partition (the committers cover all of them), so each kill made
    # at least one committer move and check its new coordinator, besides each one's first check.
    assert sum(verified.values()) >= COMMITTER_GROUPS + KILLS, verified
    assert consumers.acks > 0 and len(stats.generations) > 1, "the kafka-python group never committed or rebalanced"
    assert_no_server_errors(cluster.nodes.values())


def assert_no_server_errors(nodes: Iterable[Node]) -> None:
    failures = [(n.node_id, e) for n in nodes for e in n.events()
                if e.get("level") in ("error", "critical") or e.get("event") in ("handler_failed", "connection_failed")]
    assert not failures, failures[:10]
