"""Crash consistency under load: "acknowledged means durable" across many SIGKILLs (issue 5).

One server (`--fsync always`) on one data directory is killed with SIGKILL at a random moment of heavy
load, SOAK_KILLS times (30 in `make test`), and restarted on the same directory each time. The load:
- committers, one thread per group, each sending raw OffsetCommits of a strictly increasing sequence to a
  random subset of a topic's partitions (so a committed value names the request that sent it);
- churners, one thread per group, whose raw-protocol members join, sync and leave in a loop
  (`tests/integration/test_durability.py::Churn`), recording every SyncGroup answered with error 0.

After every kill, on a *copy* of the data directory (recovery may truncate a torn tail; never on the live
files): the repair-log verifier finds no bad batch except a torn tail, the log opens (recovery) and
replays without error, and then
- every acknowledged commit is there: the partition's value is the last acknowledged one, or the value of
  the one request that was in flight (sent, not answered) — and that request is all there or not at all;
- no value appears that was never sent;
- each churned group's last record is its last acknowledged generation with the same assignment, or the
  one newer generation whose leader SyncGroup was in flight;
and after the restart OffsetFetch serves exactly what the log holds.

Replay a failure with SOAK_SEED=<seed printed at the start> (the kill moments are timing, so a replay
reproduces the schedule, not the exact interleaving).
"""
from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from coordinator_server.config import FsyncPolicy
from coordinator_server.group.records import GroupMetadataRecord, GroupMetadataValue, OffsetCommitRecord
from coordinator_server.storage import CoordinatorLog
from coordinator_server.tools.repair_log import repair_log
from tests.integration.group_client import NONE, Connection
from tests.integration.test_durability import Churn, assert_disk_matches_acknowledged

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.durability

OFFSETS_PARTITIONS = 4
TOPIC = "crash"
TOPIC_PARTITIONS = 4
KILLS = int(os.environ.get("SOAK_KILLS", "40"))
COMMITTERS = int(os.environ.get("SOAK_COMMITTERS", "4"))
CHURNERS = int(os.environ.get("SOAK_CHURNERS", "2"))

TP = tuple[str, int]


# ------------------------------------------------------------------------------------- committers


@dataclass
class CommitHistory:
    """What one committer group sent and what the server acknowledged, across all kills."""

    group_id: str
    next_value: int = 1
    sent: dict[int, set[int]] = field(default_factory=dict)  # partition -> every value sent
    acked: dict[int, int] = field(default_factory=dict)  # partition -> last acknowledged value
    in_flight: tuple[int, tuple[int, ...]] | None = None  # (value, partitions) sent, not answered
    acks: int = 0

    def request(self, rng: random.Random) -> tuple[int, tuple[int, ...], Any]:
        value = self.next_value
        self.next_value += 1
        parts = tuple(sorted(rng.sample(range(TOPIC_PARTITIONS), rng.randint(1, TOPIC_PARTITIONS))))
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        req = OffsetCommitRequest[rng.choice([2, 5, 8, 9])](
            group_id=self.group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            retention_time_ms=-1, topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=value, committed_leader_epoch=-1, commit_timestamp=-1,
                committed_metadata=f"v{value}") for p in parts])])
        return value, parts, req


def run_committer(srv: ServerProcess, history: CommitHistory, rng: random.Random, stop: threading.Event,
                  errors: list[BaseException]) -> None:
    try:
        conn = Connection((srv.host, srv.port), history.group_id)
    except OSError:
        return
    try:
        while not stop.is_set():
            value, parts, req = history.request(rng)
            for p in parts:
                history.sent.setdefault(p, set()).add(value)
            history.in_flight = (value, parts)
            resp = conn.call(req, OffsetCommitResponse, timeout_s=10)
            codes = {p.error_code for t in resp.topics for p in t.partitions}
            if codes != {NONE}:
                if stop.is_set():
                    return
                raise AssertionError(f"{history.group_id}: commit of {value} answered {codes}")
            for p in parts:
                history.acked[p] = value
            history.in_flight = None
            history.acks += 1
    except OSError:
        pass  # the server was killed: this request stays in flight
    except BaseException as e:
        errors.append(e)
    finally:
        conn.close()


# ------------------------------------------------------------------------------------- the log


@dataclass
class DiskState:
    offsets: dict[tuple[str, str, int], int]  # (group, topic, partition) -> last committed offset
    groups: dict[str, GroupMetadataValue | None]  # group -> last group record
    torn_tails: int


def read_disk(data_dir: Path) -> DiskState:
    """Verify and replay a copy of the data directory."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "data"
        shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns(".lock"))
        torn = 0
        for pdir in sorted(copy.glob("__consumer_offsets-*")):
            report = repair_log(pdir)
            if report.bad is not None:
                assert report.bad.torn_tail, "\n".join(report.lines())
                torn += 1
        log = CoordinatorLog.open(copy, OFFSETS_PARTITIONS, FsyncPolicy("always"))  # recovery
        offsets: dict[tuple[str, str, int], int] = {}
        groups: dict[str, GroupMetadataValue | None] = {}
        try:
            for p in range(log.partitions):
                for rec in log.replay(p):
                    if isinstance(rec, OffsetCommitRecord):
                        key = (rec.group_id, rec.topic, rec.partition)
                        if rec.value is None:
                            offsets.pop(key, None)
                        else:
                            offsets[key] = rec.value.offset
                    elif isinstance(rec, GroupMetadataRecord):
                        groups[rec.group_id] = rec.value
        finally:
            asyncio.run(log.close())
        return DiskState(offsets, groups, torn)


def check_commits(history: CommitHistory, disk: DiskState) -> None:
    in_value, in_parts = history.in_flight or (None, ())
    on_disk = {p: disk.offsets.get((history.group_id, TOPIC, p)) for p in range(TOPIC_PARTITIONS)}
    for p, value in on_disk.items():
        if value is not None:
            assert value in history.sent.get(p, ()), f"{history.group_id}/{p}: {value} was never sent"
        if p in history.acked:
            allowed = {history.acked[p]} | ({in_value} if p in in_parts else set())
            assert value in allowed, (f"{history.group_id}/{p}: acknowledged {history.acked[p]} but the log "
                                      f"has {value} (in flight: {history.in_flight})")
        elif p not in in_parts:
            assert value is None, f"{history.group_id}/{p}: {value} on disk, nothing acknowledged"
    if in_value is not None:
        landed = [on_disk[p] == in_value for p in in_parts]
        assert all(landed) or not any(landed), (
            f"{history.group_id}: commit {in_value} of {in_parts} is on disk only partly: {on_disk}")
        if all(landed):  # durable now, and what readers will see: it counts as acknowledged from here
            for p in in_parts:
                history.acked[p] = in_value
    history.in_flight = None


def check_churn(churn: Churn, disk: DiskState) -> None:
    value = disk.groups.get(churn.group_id)
    if churn.acked:
        assert value is not None, f"{churn.group_id}: acknowledged SyncGroups but no group record"
        assert_disk_matches_acknowledged(churn, value)
    elif value is not None and value.generation > 0:
        assert value.generation in churn.sent, f"{churn.group_id}: generation {value.generation} never sent"


def fetch_served(srv: ServerProcess, group_id: str) -> dict[int, int]:
    conn = Connection((srv.host, srv.port), "verifier")
    try:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        req = OffsetFetchRequest[8](groups=[G(group_id=group_id, member_id=None, member_epoch=-1, topics=[
            G.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=list(range(TOPIC_PARTITIONS)))])],
            require_stable=True)
        resp = conn.call(req, OffsetFetchResponse)
        group = resp.groups[0]
        assert group.error_code == NONE, group
        return {p.partition_index: p.committed_offset for t in group.topics for p in t.partitions
                if p.committed_offset >= 0}
    finally:
        conn.close()


# ------------------------------------------------------------------------------------- the test


def test_acknowledged_survives_kill9_under_load(server_factory: ServerFactory) -> None:
    seed = int(os.environ.get("SOAK_SEED") or random.randrange(2**32))
    print(f"crash consistency: SOAK_SEED={seed} SOAK_KILLS={KILLS}")
    rng = random.Random(seed)
    srv = server_factory(initial_rebalance_delay_ms=0, min_session_timeout_ms=100,
                         offsets_partitions=OFFSETS_PARTITIONS, fsync="always",
                         topic=[f"{TOPIC}:{TOPIC_PARTITIONS}"])
    histories = [CommitHistory(f"commit-{i}") for i in range(COMMITTERS)]
    started = time.monotonic()
    totals = {"commits": 0, "syncs": 0, "torn_tails": 0}
    for kill in range(KILLS):
        stop = threading.Event()
        errors: list[BaseException] = []
        churns = [Churn(srv, f"churn-{kill}-{k}", random.Random(rng.random()), stop) for k in range(CHURNERS)]
        acks_before = sum(h.acks for h in histories)
        threads = [threading.Thread(target=run_committer, args=(srv, h, random.Random(rng.random()), stop, errors))
                   for h in histories]
        threads += [threading.Thread(target=run_churn, args=(c, stop, errors)) for c in churns]
        for t in threads:
            t.start()
        # Kill at a random moment, once the load is under way (something acknowledged).
        deadline = time.monotonic() + 10
        while sum(h.acks for h in histories) == acks_before and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.25))
        assert srv.kill9() == -9
        stop.set()
        for t in threads:
            t.join(15)
            assert not t.is_alive(), "a load thread hung after the kill"
        for c in churns:
            c.close()
        assert not errors, errors
        disk = read_disk(srv.data_dir)
        totals["torn_tails"] += disk.torn_tails
        for h in histories:
            check_commits(h, disk)
        for c in churns:
            check_churn(c, disk)
            totals["syncs"] += len(c.acked)
        print(f"kill {kill + 1}/{KILLS} at {time.monotonic() - started:.1f}s: "
              f"{sum(h.acks for h in histories) - acks_before} commits, {sum(len(c.acked) for c in churns)} syncs "
              f"acknowledged; torn tails {disk.torn_tails}")
        srv.start()
        for h in histories:
            served = fetch_served(srv, h.group_id)
            assert served == dict(h.acked), f"{h.group_id}: served {served}, log/acknowledged {h.acked}"
    totals["commits"] = sum(h.acks for h in histories)
    elapsed = time.monotonic() - started
    print(f"{KILLS} kill points in {elapsed:.1f}s: {totals}")
    assert len(srv.events("listening")) == KILLS + 1
    assert not [e for e in srv.events() if e.get("event") in ("handler_failed", "connection_failed")]
    assert srv.terminate() == 0


def run_churn(churn: Churn, stop: threading.Event, errors: list[BaseException]) -> None:
    try:
        churn.run(stop.is_set)
    except BaseException as e:
        errors.append(e)
