"""`coordinator-server groups ...` against the real server, with state made by real kafka-python clients:
a producer writes, a consumer group consumes and commits; the CLI lists, describes, reports lag, refuses
to reset or delete a live group, and resets and deletes it once it is Empty."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from coordinator_server.cli import main as cli_main
from tests.client_contract import kafka_python_commit, kafka_python_join

from .cli_support import run_tool, run_tool_json
from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.integration

TOPIC = "orders"
GROUP = "billing"
PER_PARTITION = {0: 5, 1: 3, 2: 2}  # records produced to each partition: log end offsets
COMMITTED = {0: 4, 1: 1, 2: 2}  # what the group commits: lag 1 + 2 + 0 = 3


def run(capsys: pytest.CaptureFixture[str], srv: ServerProcess, *args: str) -> tuple[int, str, str]:
    return run_tool(capsys, "groups", srv, *args)


def run_json(capsys: pytest.CaptureFixture[str], srv: ServerProcess, *args: str) -> Any:
    return run_tool_json(capsys, "groups", srv, *args)


def produce(srv: ServerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=srv.address, request_timeout_ms=10_000)
    try:
        for partition, n in PER_PARTITION.items():
            for i in range(n):
                producer.send(TOPIC, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
        producer.flush(10)
    finally:
        producer.close()


@pytest.fixture
def srv(server_factory: ServerFactory) -> ServerProcess:
    srv = server_factory(topic=[f"{TOPIC}:3"], initial_rebalance_delay_ms=0)
    produce(srv)
    return srv


@pytest.fixture
def consumer(srv: ServerProcess) -> Iterator[KafkaConsumer]:
    """A member of GROUP owning all three partitions, with COMMITTED committed; closed at the end."""
    c = KafkaConsumer(bootstrap_servers=srv.address, group_id=GROUP, client_id="billing-1",
                      enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=10_000)
    try:
        kafka_python_join(c, [TOPIC], 3, diagnostics=lambda: "\n".join(srv.stderr_lines()[-40:]))
        kafka_python_commit(c, {TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in COMMITTED.items()})
        yield c
    finally:
        c.close(autocommit=False)


def test_list_describe_offsets_of_a_live_group(capsys: pytest.CaptureFixture[str], srv: ServerProcess,
                                               consumer: KafkaConsumer) -> None:
    code, out, _ = run(capsys, srv, "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["GROUP", "STATE", "PROTOCOL-TYPE", "MEMBERS"]
    assert row.split() == [GROUP, "Stable", "consumer", "1"]
    assert run_json(capsys, srv, "list") == [
        {"group_id": GROUP, "state": "Stable", "protocol_type": "consumer", "members": 1}]

    described = run_json(capsys, srv, "describe", GROUP)
    assert (described["state"], described["protocol_type"], described["protocol"]) == ("Stable", "consumer", "range")
    [member] = described["members"]
    assert member["client_id"] == "billing-1" and member["member_id"].startswith("billing-1-")
    assert member["client_host"].endswith("127.0.0.1")
    assert member["assignment"] == [{"topic": TOPIC, "partition": p} for p in range(3)]
    assert member["subscribed_topics"] == [TOPIC]
    assert "generation" not in described and "leader" not in described  # DescribeGroups has neither
    # FindCoordinator's answer: on one node, that node (node id 0 by default) at its address.
    assert described["coordinator"] == {"node_id": 0, "host": "127.0.0.1", "port": srv.port}
    code, out, _ = run(capsys, srv, "describe", GROUP)
    assert code == 0 and "orders(0,1,2)" in out and "STATE          Stable" in out
    assert f"COORDINATOR    0 (127.0.0.1:{srv.port})" in out.splitlines()

    report = run_json(capsys, srv, "offsets", GROUP)
    assert [(r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"]) for r in report["partitions"]] == [
        (p, COMMITTED[p], PER_PARTITION[p], PER_PARTITION[p] - COMMITTED[p]) for p in range(3)]
    assert report["total_lag"] == 3
    assert {r["member_id"] for r in report["partitions"]} == {member["member_id"]}
    code, out, _ = run(capsys, srv, "offsets", GROUP)
    assert code == 0 and out.rstrip().endswith("TOTAL LAG 3")
    assert any(line.split()[:5] == [TOPIC, "1", "1", "3", "2"] for line in out.splitlines())


def test_live_group_cannot_be_reset_or_deleted(capsys: pytest.CaptureFixture[str], srv: ServerProcess,
                                               consumer: KafkaConsumer) -> None:
    code, out, err = run(capsys, srv, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--execute")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "is Stable with 1 member(s)" in err and "Empty" in err
    assert run_json(capsys, srv, "offsets", GROUP)["total_lag"] == 3  # nothing was committed

    code, out, err = run(capsys, srv, "delete", GROUP)
    assert code == 1
    assert "NON_EMPTY_GROUP" in out and "NON_EMPTY_GROUP" in err and err.count("\n") == 1
    code, out, _ = run(capsys, srv, "delete", GROUP, "--json")
    assert code == 1 and json.loads(out) == [{"group_id": GROUP, "error": "NON_EMPTY_GROUP"}]


def test_empty_group_is_reset_then_deleted(capsys: pytest.CaptureFixture[str], srv: ServerProcess,
                                           consumer: KafkaConsumer) -> None:
    consumer.close(autocommit=False)  # LeaveGroup: the group is Empty, its offsets stay
    assert run_json(capsys, srv, "describe", GROUP)["state"] == "Empty"

    # Dry run: the plan, nothing committed.
    code, out, err = run(capsys, srv, "reset-offsets", GROUP, "--topic", f"{TOPIC}:0,1", "--to-offset", "2")
    assert code == 0 and "Dry run" in err
    assert [line.split() for line in out.splitlines()] == [
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], [TOPIC, "0", "4", "2"], [TOPIC, "1", "1", "2"]]
    assert run_json(capsys, srv, "offsets", GROUP)["total_lag"] == 3

    plan = run_json(capsys, srv, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--execute")
    assert plan["executed"] is True
    assert [(r["partition"], r["new_offset"], r["error"]) for r in plan["partitions"]] == [
        (0, 0, None), (1, 0, None), (2, 0, None)]
    assert run_json(capsys, srv, "offsets", GROUP)["total_lag"] == sum(PER_PARTITION.values())

    plan = run_json(capsys, srv, "reset-offsets", GROUP, "--all-topics", "--to-offset", "99", "--execute")
    # Beyond the log end: moved to it, as Kafka's tool does, and said so.
    assert [(r["new_offset"], r["clamped_from"]) for r in plan["partitions"]] == [
        (PER_PARTITION[p], 99) for p in range(3)]
    report = run_json(capsys, srv, "offsets", GROUP)
    assert report["total_lag"] == 0 and report["state"] == "Empty"
    assert {r["member_id"] for r in report["partitions"]} == {None}

    code, out, _ = run(capsys, srv, "delete", GROUP)
    assert (code, out.strip()) == (0, f"Deleted group '{GROUP}'.")
    assert run_json(capsys, srv, "list") == []
    code, out, err = run(capsys, srv, "delete", GROUP)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in out and "GROUP_ID_NOT_FOUND" in err
    code, _, err = run(capsys, srv, "describe", GROUP)
    assert code == 1 and err.strip().endswith(f"group '{GROUP}' does not exist")


def test_reset_errors_name_the_problem(capsys: pytest.CaptureFixture[str], srv: ServerProcess) -> None:
    code, _, err = run(capsys, srv, "reset-offsets", "new-group", "--topic", "absent", "--to-latest")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = run(capsys, srv, "reset-offsets", "new-group", "--topic", f"{TOPIC}:7", "--to-latest")
    assert code == 1 and "has no partition 7" in err
    # A group that does not exist yet may be seeded (Kafka allows Dead as well as Empty).
    plan = run_json(capsys, srv, "reset-offsets", "new-group", "--topic", TOPIC, "--to-latest", "--execute")
    assert [r["new_offset"] for r in plan["partitions"]] == [PER_PARTITION[p] for p in range(3)]
    assert run_json(capsys, srv, "offsets", "new-group")["total_lag"] == 0


def test_cluster_status_of_one_node(capsys: pytest.CaptureFixture[str], srv: ServerProcess) -> None:
    """One node is a cluster of one: the only broker, the controller, the leader and whole ISR of every
    `__consumer_offsets` partition, whose high watermark is its log end (nothing written yet: 0)."""
    code = cli_main(["cluster", "status", "--bootstrap-server", srv.address, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    status = json.loads(out)
    assert status["controller_id"] == 0
    assert status["brokers"] == [{"node_id": 0, "host": "127.0.0.1", "port": srv.port, "controller": True}]
    offsets = status["offsets_topic"]
    assert offsets["error"] is None and offsets["partitions"]
    assert offsets["under_replicated_partitions"] == offsets["offline_partitions"] == []
    assert {(p["leader"], p["leader_epoch"], tuple(p["replicas"]), tuple(p["isr"]), p["high_watermark"], p["error"])
            for p in offsets["partitions"]} == {(0, 0, (0,), (0,), 0, None)}
    assert [p["partition"] for p in offsets["partitions"]] == list(range(len(offsets["partitions"])))
    assert {"name": TOPIC, "partitions": 3, "under_replicated_partitions": [], "offline_partitions": []} \
        in status["topics"]

    code = cli_main(["cluster", "status", "--bootstrap-server", f"127.0.0.1:1,{srv.address}"])
    out, _ = capsys.readouterr()
    lines = out.splitlines()  # the first bootstrap server is down: the next one answered
    assert code == 0 and lines[0] == f"CLUSTER-ID {status['cluster_id']}  CONTROLLER 0"
    assert [line.split() for line in lines[2:4]] == [["BROKER", "HOST:PORT", "CONTROLLER"], ["0", srv.address, "*"]]

    code = cli_main(["cluster", "status", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "1000"])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("coordinator-server cluster status: error: cannot reach a server at 127.0.0.1:1")


def test_console_script_exit_codes(srv: ServerProcess) -> None:
    env = {**os.environ, "COORDINATOR_BOOTSTRAP_SERVER": srv.address}
    ok = subprocess.run([sys.executable, "-m", "coordinator_server", "groups", "list", "--json"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert (ok.returncode, json.loads(ok.stdout), ok.stderr) == (0, [], "")
    env["COORDINATOR_BOOTSTRAP_SERVER"] = "127.0.0.1:1"
    down = subprocess.run([sys.executable, "-m", "coordinator_server", "groups", "list", "--timeout-ms", "1000"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and down.stdout == ""
    assert down.stderr.count("\n") == 1 and "cannot reach a server at 127.0.0.1:1" in down.stderr


def test_a_consumer_protocol_group_is_listed_and_described(capsys: pytest.CaptureFixture[str],
                                                           srv: ServerProcess) -> None:
    """A KIP-848 group (confluent-kafka, group.protocol=consumer): DescribeGroups sees it Dead, so the CLI
    asks ConsumerGroupDescribe of its coordinator."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    c = confluent_kafka.Consumer({"bootstrap.servers": srv.address, "group.id": "kip848", "group.protocol": "consumer",
                                  "client.id": "next-gen", "auto.offset.reset": "earliest", "log_level": 0})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 20
        while len(c.assignment()) < 3:
            assert time.monotonic() < deadline, "the consumer got no assignment"
            c.poll(0.2)
        listed = [g for g in run_json(capsys, srv, "list") if g["group_id"] == "kip848"]
        assert listed == [{"group_id": "kip848", "state": "Stable", "protocol_type": "consumer", "members": 1}]
        described = run_json(capsys, srv, "describe", "kip848")
        assert (described["type"], described["state"], described["protocol"]) == ("consumer", "Stable", "uniform")
        assert described["group_epoch"] >= 1
        [member] = described["members"]
        assert member["client_id"] == "next-gen" and member["subscribed_topics"] == [TOPIC]
        assert member["assignment"] == [{"topic": TOPIC, "partition": p} for p in range(3)]
        code, out, _ = run(capsys, srv, "describe", "kip848")
        assert code == 0 and "TYPE           consumer" in out and "orders(0,1,2)" in out
    finally:
        c.close()
