"""The `consumer-wire` scenario: KIP-848 consumer-protocol members over the wire (benchmarks/consumer_members.py)
in one group subscribed to a topic of 1,000 partitions, against the server and Apache Kafka in turn, size by
size, with the same driver and the same settings: the `uniform` assignor named in each join, a 1 s heartbeat
interval, Kafka's default 45 s session timeout on both.

Per size, the server is started fresh (a group that never converged would otherwise weigh on the next size)
and Kafka, one broker for the whole scenario, gets a new group. An unmeasured group of 200 members converges
first on each fresh server and once on the broker (for its JIT). A failed part is recorded in `errors`; the
others still run.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kafka.broker import KafkaBroker

from . import kafka_peer, scenarios
from .procs import Server, run_json

TOPIC = "consumer-wire"
PARTITIONS = 1_000
ASSIGNOR = "uniform"  # served by both under this name, and each one's default
HEARTBEAT_INTERVAL_MS = 1_000
SESSION_TIMEOUT_MS = 45_000  # each one's default, set anyway: the driver tells a zombie's overlap by it
SERVER_FLAGS = {"topic": f"{TOPIC}:{PARTITIONS}", "group_consumer_heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                "group_consumer_min_heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                "group_consumer_session_timeout_ms": SESSION_TIMEOUT_MS}
KAFKA_SETTINGS = {"group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
                  "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
                  "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
WARMUP_MEMBERS = 200  # as many as the first size, so the first measured group is not the one that warms Kafka's JIT
TOPIC_TIMEOUT_S = 60.0


def sizes(scale: scenarios.Scale) -> list[int]:
    return [200, 1_000] if scale.quick else [200, 1_000, 5_000]


def cutoff_s(scale: scenarios.Scale) -> float:
    return 30.0 if scale.quick else 120.0


def drive(pid: int, host: str, port: int, members: int, cutoff: float,
          steady: dict[str, Any] | None) -> dict[str, Any]:
    spec = {"host": host, "port": port, "pid": pid, "members": members, "topic": TOPIC, "partitions": PARTITIONS,
            "assignor": ASSIGNOR, "cutoff_s": cutoff, "steady": steady, "session_timeout_ms": SESSION_TIMEOUT_MS}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "spec.json")
        path.write_text(json.dumps(spec))
        # Connecting, the cut-off, the load and the members' leaving, with room to spare.
        return run_json("benchmarks.consumer_members", str(path), timeout_s=cutoff + 300)


def _steady(scale: scenarios.Scale, warmup_s: float) -> dict[str, Any]:
    return {"warmup_s": warmup_s, "duration_s": scale.hb_duration_s, "connections": scale.hb_connections}


def server_run(scale: scenarios.Scale, work: Path, n: int) -> dict[str, Any]:
    data = scenarios._tmpdir(work, f"consumer-wire-{n}")
    srv = Server(data, SERVER_FLAGS).start()
    try:
        warmup = drive(srv.pid, "127.0.0.1", srv.port, WARMUP_MEMBERS, cutoff_s(scale), None)
        return drive(srv.pid, "127.0.0.1", srv.port, n, cutoff_s(scale), _steady(scale, scale.hb_warmup_s)) | {
            "warmup": {k: warmup.get(k) for k in ("members", "converged", "seconds")}}
    finally:
        srv.stop()
        shutil.rmtree(data, ignore_errors=True)


def create_topic(kafka: KafkaBroker) -> None:
    """The topic of 1,000 partitions, waited for until every partition has a leader."""
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=kafka.address, client_id="bench")
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:
            described = admin.describe_topics([TOPIC])[0]
            led = [p for p in described.get("partitions") or [] if p.get("leader_id", -1) >= 0]
            if len(led) == PARTITIONS:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka gave {len(led)} of {PARTITIONS} partitions a leader in {TOPIC_TIMEOUT_S} s")
            time.sleep(0.5)
    finally:
        admin.close()


def run(scale: scenarios.Scale, work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"topic_partitions": PARTITIONS, "assignor": ASSIGNOR,
                           "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS, "session_timeout_ms": SESSION_TIMEOUT_MS,
                           "cutoff_s": cutoff_s(scale),
                           "sizes": sizes(scale), "server": [], "kafka": [], "errors": []}

    def part(name: str, fn: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
        # Thousands of members and a JVM: a part that fails leaves every other figure, and says what failed.
        try:
            return [fn()]
        except Exception as e:
            print(f"[bench] consumer-wire {name} failed: {e!r}"[:2000], file=sys.stderr, flush=True)
            res["errors"].append({"part": name, "error": repr(e)[-2000:]})
            return []

    kafka = _start_kafka(work, res)
    try:
        if kafka is not None:
            pid = kafka_peer._pid(kafka)
            kafka_steady = _steady(scale, max(scale.hb_warmup_s, kafka_peer.KAFKA_WARMUP_S))
            warmup = part("kafka warm-up", lambda: drive(pid, kafka.host, kafka.port, WARMUP_MEMBERS, cutoff_s(scale), None))
            res["kafka_warmup"] = {k: warmup[0].get(k) for k in ("members", "converged", "seconds")} if warmup else None
        for n in sizes(scale):  # the server, then Kafka, size by size
            res["server"] += part(f"server {n}", lambda n=n: server_run(scale, work, n))
            if kafka is not None:
                res["kafka"] += part(f"kafka {n}", lambda n=n: drive(pid, kafka.host, kafka.port, n, cutoff_s(scale),
                                                                     kafka_steady))
    finally:
        if kafka is not None:
            kafka.stop()
            shutil.rmtree(kafka.work_dir, ignore_errors=True)
    return res


def _start_kafka(work: Path, res: dict[str, Any]) -> KafkaBroker | None:
    """One broker for the scenario with the topic created, or None (and why in `errors`): the server's rows are
    measured either way."""
    if not kafka_peer.available():
        res["errors"].append({"part": "kafka", "error": "no Kafka jars in build/kafka/lib (`make kafka-deps`)"})
        return None
    res["kafka_version"] = kafka_peer.version()
    kafka = KafkaBroker(scenarios._tmpdir(work, "kafka-consumer-wire"), settings=KAFKA_SETTINGS)
    try:
        kafka.start()
        create_topic(kafka)
    except Exception as e:
        print(f"[bench] consumer-wire kafka failed to start: {e!r}"[:2000], file=sys.stderr, flush=True)
        res["errors"].append({"part": "kafka", "error": repr(e)[-2000:]})
        kafka.stop()
        return None
    return kafka
