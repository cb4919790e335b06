"""The tools operators point at a broker, against the real server: Burrow (Debian's, LinkedIn's lag
monitor, on Debian's ZooKeeper) and kcat reading `__consumer_offsets`.

Burrow reads the coordinator's records as a topic (coordinator_server/net/offsets_topic.py) and the topic's
head offsets with ListOffsets v0, and judges each partition over its last `intervals` commits (its
evaluator's rules, core/internal/evaluator/caching.go): a lag of zero anywhere in the window is OK; commits
stopped for longer than the window spans with lag is STOP; the same offset committed again and again with
lag is STALL; offsets that move while the lag never shrinks is WARN. Group status: the worst partition's,
STOP and STALL both ERR.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from coordinator_server.group.partitioner import partition_for
from coordinator_server.group.records import OffsetCommitRecord
from coordinator_server.storage.codec import decode
from coordinator_server.tools.local_zookeeper import LocalZooKeeper, ZooKeeperNotInstalled, free_port
from tests.integration.conftest import ServerFactory, ServerProcess, server_factory  # noqa: F401

pytestmark = pytest.mark.interop

BURROW = "/usr/bin/Burrow"
TICK_S = 2.0  # > Burrow's min-distance (1 s) between stored commits, and > its head-offset refresh (1 s)
WINDOW = 3  # Burrow's storage `intervals`: the commits each partition is judged over


@dataclass
class Burrow:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v3/kafka/local/{path}", timeout=5) as r:
            return dict(json.loads(r.read()))

    def lag(self, group: str) -> dict[str, Any] | None:
        try:
            status = dict(self.get(f"consumer/{group}/lag")["status"])
        except OSError:
            return None
        return status if status.get("status") != "NOTFOUND" else None

    def log_tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join([line[:300] for line in lines if '"level":"debug"' not in line][-30:])


@pytest.fixture
def zookeeper_server(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    try:
        zk = LocalZooKeeper.start(tmp_path / "zookeeper")
    except ZooKeeperNotInstalled as e:
        pytest.fail(f"{e}: run `make cluster-deps`")
    try:
        yield zk
    finally:
        zk.stop()


def start_burrow(tmp_path: Path, zk: LocalZooKeeper, srv: ServerProcess) -> Burrow:
    if shutil.which(BURROW) is None:
        pytest.fail("Burrow is not installed: run `make interop-deps`")
    conf = tmp_path / "burrow"
    conf.mkdir()
    port = free_port()
    (conf / "burrow.toml").write_text(f"""
[general]
pidfile="{conf}/burrow.pid"
[logging]
level="debug"
[zookeeper]
servers=["{zk.connect_string}"]
timeout=6
root-path="/burrow"
[client-profile.local]
client-id="burrow"
kafka-version="2.0.0"
[cluster.local]
class-name="kafka"
servers=["{srv.address}"]
client-profile="local"
topic-refresh=1
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{srv.address}"]
client-profile="local"
[httpserver.default]
address="127.0.0.1:{port}"
[storage.default]
class-name="inmemory"
workers=2
intervals={WINDOW}
expire-group=604800
min-distance=1
""")
    log = conf / "burrow.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([BURROW, "-config-dir", str(conf)], cwd=conf, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return Burrow(proc, port, log)


@dataclass
class Timeline:
    """Every tick: 10 more records, then (once Burrow has the new head) each group's commit. The truth
    (head and committed offsets) is kept here, under a lock, for the checks to compare with."""

    srv: ServerProcess
    head: int = 0
    heads: list[int] = field(default_factory=list)  # every head reached, for a Burrow a refresh behind
    committed: dict[str, int] = field(default_factory=dict)
    ticks: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def truth(self) -> tuple[int, dict[str, int]]:
        with self.lock:
            return self.head, dict(self.committed)

    def recent_heads(self) -> set[int]:
        with self.lock:
            return set(self.heads[-3:])

    def run(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            producer = KafkaProducer(bootstrap_servers=self.srv.address, linger_ms=0)
            committers = {g: KafkaConsumer(bootstrap_servers=self.srv.address, group_id=g, enable_auto_commit=False)
                          for g in ("burrow-ok", "burrow-warn", "burrow-stall", "burrow-stop")}
        try:
            while not self.stop.is_set():
                for i in range(10):
                    producer.send("lag", value=b"r%d" % i, partition=0)
                producer.flush()
                with self.lock:
                    self.head += 10
                    self.heads.append(self.head)
                    plan = {"burrow-ok": self.head,  # keeps up: lag 0
                            "burrow-warn": self.committed.get("burrow-warn", 0) + 2,  # moves, falls behind
                            "burrow-stall": 1}  # commits, never moves
                    if self.ticks == 0:
                        plan["burrow-stop"] = 1  # commits once, then stops
                if self.stop.wait(TICK_S * 0.75):
                    break
                for g, offset in plan.items():
                    committers[g].commit({TopicPartition("lag", 0): OffsetAndMetadata(offset, "", -1)})
                    with self.lock:
                        self.committed[g] = offset
                with self.lock:
                    self.ticks += 1
                self.stop.wait(TICK_S * 0.25)
        finally:
            producer.close()
            for c in committers.values():
                c.close()


EXPECTED = {"burrow-ok": ("OK", "OK"), "burrow-warn": ("WARN", "WARN"), "burrow-stall": ("ERR", "STALL"),
            "burrow-stop": ("ERR", "STOP")}


def test_burrow_reports_each_groups_lag_and_status(server_factory: ServerFactory,  # noqa: F811
                                                   zookeeper_server: LocalZooKeeper, tmp_path: Path) -> None:
    srv = server_factory(topic=["lag:1"])
    burrow = start_burrow(tmp_path, zookeeper_server, srv)
    timeline = Timeline(srv)
    runner = threading.Thread(target=timeline.run, daemon=True)
    runner.start()
    seen: dict[str, dict[str, Any]] = {}
    try:
        deadline = time.monotonic() + 60
        while len(seen) < len(EXPECTED) and time.monotonic() < deadline:
            assert burrow.proc.poll() is None, "Burrow exited\n" + burrow.log_tail()
            for group, (group_status, partition_status) in EXPECTED.items():
                _, committed = timeline.truth()
                status = burrow.lag(group)
                if group in seen or status is None or timeline.ticks < WINDOW + 1 or len(status["partitions"]) != 1:
                    continue
                [part] = status["partitions"]
                # Burrow's current lag is the head offset it last fetched minus the group's last commit: a head
                # the topic really had, the latest or (on a loaded machine, Burrow a refresh behind) one of the
                # two before; never below the commit.
                lag = part["current_lag"]
                if ((status["status"], part["status"], status["totallag"]) == (group_status, partition_status, lag)
                        and (committed[group] + lag in timeline.recent_heads() or (lag == 0 and group == "burrow-ok"))):
                    seen[group] = status
            time.sleep(0.3)
        missing = {g: burrow.lag(g) for g in EXPECTED if g not in seen}
        assert not missing, (f"Burrow never reported {sorted(missing)} as expected (head, commits "
                             f"{timeline.truth()}):\n{json.dumps(missing, indent=1)[:3000]}\n{burrow.log_tail()}")
    finally:
        timeline.stop.set()
        runner.join(20)
        burrow.proc.terminate()
        try:
            burrow.proc.wait(10)
        except subprocess.TimeoutExpired:
            burrow.proc.kill()


# ------------------------------------------------------------------------------------------------ kcat


def test_kcat_lists_and_reads_consumer_offsets(server_factory: ServerFactory) -> None:  # noqa: F811
    """`kcat -L` shows `__consumer_offsets` with its 50 partitions, and `kcat -C -t __consumer_offsets`
    prints the coordinator's records, which decode (storage/codec.py, as dump-log does) to the commits."""
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: run `make interop-deps`")
    srv = server_factory(topic=["t:2"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = KafkaConsumer(bootstrap_servers=srv.address, group_id="kcat-read", enable_auto_commit=False)
    try:
        c.commit({TopicPartition("t", 0): OffsetAndMetadata(7, "m", -1),
                  TopicPartition("t", 1): OffsetAndMetadata(9, "", -1)})
    finally:
        c.close()
    listing = subprocess.run(["kcat", "-b", srv.address, "-L", "-J"], capture_output=True, text=True, timeout=30,
                             check=True)
    topics = {t["topic"]: t for t in json.loads(listing.stdout)["topics"]}
    assert len(topics["__consumer_offsets"]["partitions"]) == 50 and len(topics["t"]["partitions"]) == 2
    p = partition_for("kcat-read", 50)
    # Each record as a header line with the key's and value's lengths, then their bytes as they are.
    out = subprocess.run(["kcat", "-b", srv.address, "-C", "-t", "__consumer_offsets", "-p", str(p), "-o",
                          "beginning", "-e", "-q", "-f", "%o %K %S\n%k%s", "-X", "fetch.wait.max.ms=100"],
                         capture_output=True, timeout=30, check=True).stdout
    commits, pos = [], 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        offset, key_len, value_len = (int(x) for x in out[pos:end].split())
        key = out[end + 1:end + 1 + key_len]
        value = out[end + 1 + key_len:end + 1 + key_len + max(0, value_len)] if value_len >= 0 else None
        pos = end + 1 + key_len + max(0, value_len)
        rec = decode(key, value)
        if isinstance(rec, OffsetCommitRecord) and rec.value is not None:
            commits.append((offset, rec.group_id, rec.topic, rec.partition, rec.value.offset, rec.value.metadata))
    assert [c[1:] for c in commits] == [("kcat-read", "t", 0, 7, "m"), ("kcat-read", "t", 1, 9, "")], out
