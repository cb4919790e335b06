"""Apache Kafka as the performance peer: the scenarios that have a Kafka equivalent, run against a real broker
(tests/kafka/broker.py, the jars `make kafka-deps` installs) in the same run, with the same load generator and
the same member driver as the server's rows, so the table can say "x Kafka".

- heartbeats: groups of 100 members enrolled over the wire (the server's are preloaded from a log; Kafka has
  no such log, so `members enroll` joins them, with the same 30-minute sessions), then the same 32
  connections cycling through the same sample of members.
- rebalance: `members rebalance` against Kafka, one group of N members joining at once, as for the server.
- offset commits: one group per committer, standalone commits of one partition, as for the server, with the
  broker at Kafka's defaults (no flush: the page cache holds an acknowledged commit) and with a flush per
  write (`log.flush.interval.messages=1`: every append is flushed before the answer), the durability the
  server gives at its own defaults.
- coordinator load after a restart: the recovery scenario's commits produced into Kafka's
  `__consumer_offsets`, then Kafka restarted on them (benchmarks/kafka_recovery.py).

The broker is the single KRaft node of the differential tests, sized for 2 cores (tests/kafka/broker.py). The
JVM compiles its hot paths while it runs, so each load starts after a longer warm-up than the server's (it
is not measured either way).
"""
from __future__ import annotations

import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tests.kafka.broker import LIB_DIR, KafkaBroker

from . import kafka_recovery, scenarios, wire
from .procs import run_json

KAFKA_WARMUP_S = 5.0
# Kafka's settings for the commit rows: at its defaults, and with each append flushed before it is answered.
FLUSH_EACH_WRITE = {"log.flush.interval.messages": "1"}
RECOVERY_REPEATS = 3  # start-ups, empty and loaded: the median of each


def available() -> bool:
    return any(LIB_DIR.glob("kafka_2.13-*.jar"))


def version() -> str:
    jar = next(LIB_DIR.glob("kafka_2.13-*.jar"))
    return jar.stem.removeprefix("kafka_2.13-")


class _Started(Protocol):
    work_dir: Path

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Started)


@contextmanager
def owned(started: S) -> Iterator[S]:
    """A started broker or cluster, stopped and its directory removed however the block ends."""
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(started.work_dir, ignore_errors=True)


def broker(work: Path, name: str, settings: dict[str, str] | None = None) -> AbstractContextManager[KafkaBroker]:
    return owned(KafkaBroker(scenarios._tmpdir(work, name), settings=settings).start())


def _pid(kafka: KafkaBroker) -> int:
    assert kafka.proc is not None
    return kafka.proc.pid


def heartbeats(scale: scenarios.Scale, kafka: KafkaBroker, members: int) -> dict[str, Any]:
    groups = members // scenarios.MEMBERS_PER_GROUP
    enrolled = run_json("benchmarks.members", "enroll", kafka.host, str(kafka.port), str(groups),
                        str(scenarios.MEMBERS_PER_GROUP), timeout_s=1800)
    everyone = [(g, v["generation"], m) for g, v in enrolled["groups"].items() for m in v["members"]]
    sample = random.Random(members).sample(everyone, min(scale.hb_sample, len(everyone)))
    result = scenarios._measured(_pid(kafka), kafka.host, kafka.port,
                                 scenarios.heartbeat_frames(sample, scale.hb_connections),
                                 connections=scale.hb_connections, warmup_s=max(scale.hb_warmup_s, KAFKA_WARMUP_S),
                                 duration_s=scale.hb_duration_s, error_offset=wire.heartbeat_error_offset())
    return result | {"members": members, "enroll_s": enrolled["seconds"]}


def rebalance(scale: scenarios.Scale, kafka: KafkaBroker, sizes: list[int]) -> list[dict[str, Any]]:
    return scenarios.rebalance_runs(_pid(kafka), kafka.host, kafka.port, sizes, scale.rebalance_repeats)


def create_commit_topic(bootstrap: str, replication_factor: int) -> None:
    """The commit scenarios' topic of one partition; Kafka serves it a moment later (callers retry)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench")
    try:
        admin.create_topics([NewTopic(scenarios.COMMIT_TOPIC, 1, replication_factor)])
    finally:
        admin.close()


def commits(scale: scenarios.Scale, kafka: KafkaBroker, flush: str) -> list[dict[str, Any]]:
    create_commit_topic(kafka.address, 1)
    # Until the new partition is served, a commit answers UNKNOWN_TOPIC_OR_PARTITION: short unmeasured loads
    # first, until every answer is a success.
    deadline = time.monotonic() + 30
    while True:
        probe = scenarios._drive_committers(scale, _pid(kafka), kafka.port, 1, warmup_s=0.1, duration_s=0.3)
        if probe["errors"] == 0 and probe["requests"] > 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka did not serve {scenarios.COMMIT_TOPIC} in 30 s: {probe}")
    warmup_s = max(scale.commit_warmup_s, KAFKA_WARMUP_S)
    return [scenarios._drive_committers(scale, _pid(kafka), kafka.port, n, warmup_s=warmup_s) | {"flush": flush}
            for n in scale.committers]


def run(scale: scenarios.Scale, work: Path) -> dict[str, Any]:
    """Every Kafka row of the table. Two brokers in turn: one at Kafka's defaults (heartbeats, rebalances,
    commits), then one that flushes each write (commits)."""
    res: dict[str, Any] = {"version": version(), "commits": [], "rebalance": [], "heartbeat": [], "errors": [],
                           "recovery": None}

    def part(name: str, fn: Callable[[], Any]) -> Any:
        # A JVM and thousands of members: when one part fails, the run keeps every other figure, and the
        # results say what failed.
        try:
            return fn()
        except Exception as e:
            print(f"[bench] kafka {name} failed: {e!r}"[:2000], file=sys.stderr, flush=True)
            res["errors"].append({"part": name, "error": repr(e)[-2000:]})
            return []

    with broker(work, "kafka-defaults") as kafka:
        res["start_s"] = kafka.started_s
        res["commits"] += part("commits", lambda: commits(scale, kafka, "never"))
        res["rebalance"] = part("rebalance", lambda: rebalance(scale, kafka, scale.kafka_rebalance_sizes))
        for n in scale.kafka_hb_members:
            res["heartbeat"] += part(f"heartbeat {n}", lambda n=n: [heartbeats(scale, kafka, n)])
    with broker(work, "kafka-flush", FLUSH_EACH_WRITE) as kafka:
        res["commits"] += part("commits, flush each write", lambda: commits(scale, kafka, "always"))
    with broker(work, "kafka-recovery") as kafka:
        res["recovery"] = part("recovery", lambda: kafka_recovery.run(
            kafka, scale.recovery_records, scale.recovery_keys, RECOVERY_REPEATS)) or None
    return res
