"""What an operator sees of a three-node cluster (issue 12): `coordinator-server cluster status` lists the
brokers, the controller and each `__consumer_offsets` partition's leader, epoch, replicas, ISR and high
watermark (ListOffsets answered by the partition's leader); `groups describe` names the group's
coordinator, the leader of its partition; after a kill -9 the status shows the new leaders and the shrunk
ISRs, with no acknowledged commit behind the high watermarks."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from coordinator_server.cli import main as cli_main
from coordinator_server.group.partitioner import partition_for
from coordinator_server.tools.broker_requests import call
from protocol.errors import Errors
from tests.cluster.cluster_support import OFFSETS_PARTITIONS, Cluster

pytestmark = pytest.mark.integration

GROUP = "billing"
PARTITION = partition_for(GROUP, OFFSETS_PARTITIONS)


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(zk_connect, tmp_path).start_all()
    yield c
    c.stop_all()


def bootstrap(cluster: Cluster) -> str:
    # Every node, the killed ones too: the tools go on to the next address, as a client does.
    return ",".join(f"127.0.0.1:{n.fixed_port}" for n in cluster.nodes.values())


def cli_json(capsys: pytest.CaptureFixture[str], cluster: Cluster, *args: str) -> Any:
    code = cli_main([*args, "--bootstrap-server", bootstrap(cluster), "--json", "--timeout-ms", "3000"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def wait_status(capsys: pytest.CaptureFixture[str], cluster: Cluster, ready: Callable[[dict[str, Any]], bool],
                timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = cli_json(capsys, cluster, "cluster", "status")
        if ready(status):
            return status
        assert time.monotonic() < deadline, json.dumps(status, indent=1)
        time.sleep(0.2)


def healthy(status: dict[str, Any]) -> bool:
    parts = status["offsets_topic"]["partitions"]
    return len(parts) == OFFSETS_PARTITIONS and all(
        len(p["isr"]) == 3 and p["high_watermark"] is not None for p in parts)


def list_offsets(cluster: Cluster, node_id: int, leader_epoch: int, replica_id: int = -1) -> tuple[int, int]:
    """(error code, offset) of ListOffsets LATEST for the group's partition, asked of `node_id`."""
    _Topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest[4](replica_id=replica_id, isolation_level=0, topics=[_Topic(
        name="__consumer_offsets", partitions=[_Topic.ListOffsetsPartition(
            partition_index=PARTITION, current_leader_epoch=leader_epoch, timestamp=-1)])])
    response = call(("127.0.0.1", cluster.nodes[node_id].fixed_port), request, ListOffsetsResponse, "test", 10_000)
    [answer] = response.topics[0].partitions
    return answer.error_code, answer.offset


def test_status_shows_brokers_controller_leaders_isr_and_high_watermarks(
        capsys: pytest.CaptureFixture[str], cluster: Cluster) -> None:
    status = wait_status(capsys, cluster, healthy)
    assert [(b["node_id"], b["host"], b["port"]) for b in status["brokers"]] == [
        (i, "127.0.0.1", cluster.nodes[i].fixed_port) for i in range(3)]
    assert [b["node_id"] for b in status["brokers"] if b["controller"]] == [status["controller_id"]]
    offsets = status["offsets_topic"]
    assert offsets["error"] is None and offsets["under_replicated_partitions"] == offsets["offline_partitions"] == []
    for p in offsets["partitions"]:
        assert sorted(p["replicas"]) == [0, 1, 2] and p["leader"] in p["isr"] and p["offline_replicas"] == []
        assert not p["under_replicated"] and p["error"] is None
    assert len({p["leader"] for p in offsets["partitions"]}) == 3  # leadership is spread
    # Every other topic is summed up: "t" (--topic t:4 on every node) is created once, for the cluster.
    topics = wait_status(capsys, cluster, lambda s: bool(s["topics"]))["topics"]
    assert topics == [{"name": "t", "partitions": 4, "under_replicated_partitions": [], "offline_partitions": []}]

    # Each acknowledged commit is one record below the leader's high watermark.
    before = offsets["partitions"][PARTITION]["high_watermark"]
    for n in range(3):
        cluster.commit_via_coordinator(GROUP, {("t", 0): n})
    after = cli_json(capsys, cluster, "cluster", "status")["offsets_topic"]["partitions"][PARTITION]
    assert after["high_watermark"] == before + 3

    # The coordinator `groups describe` names is that partition's leader, at its address.
    described = cli_json(capsys, cluster, "groups", "describe", GROUP)
    leader = after["leader"]
    assert described["state"] == "Empty"
    assert described["coordinator"] == {"node_id": leader, "host": "127.0.0.1", "port": cluster.nodes[leader].fixed_port}
    code = cli_main(["groups", "describe", GROUP, "--bootstrap-server", bootstrap(cluster)])
    out, _ = capsys.readouterr()
    assert code == 0 and f"COORDINATOR    {leader} (127.0.0.1:{cluster.nodes[leader].fixed_port})" in out

    # ListOffsets as the server answers it: the leader gives its high watermark (a broker: its log end
    # offset, the same once the followers caught up); a follower refuses; a wrong epoch is fenced.
    epoch = after["leader_epoch"]
    assert list_offsets(cluster, leader, epoch) == (0, after["high_watermark"])
    assert list_offsets(cluster, leader, -1) == (0, after["high_watermark"])
    assert list_offsets(cluster, leader, epoch, replica_id=leader)[1] >= after["high_watermark"]
    assert list_offsets(cluster, leader, epoch + 1)[0] == Errors.UNKNOWN_LEADER_EPOCH
    for follower in (n for n in range(3) if n != leader):
        assert list_offsets(cluster, follower, epoch)[0] == Errors.NOT_LEADER_OR_FOLLOWER

    # The table for people: one line per broker and per partition, the controller marked.
    code = cli_main(["cluster", "status", "--bootstrap-server", bootstrap(cluster)])
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert code == 0 and f"__consumer_offsets: {OFFSETS_PARTITIONS} partitions, 0 under-replicated, 0 offline" in lines
    controller_line = next(line for line in lines if line.startswith(f"{status['controller_id']} "))
    assert controller_line.split() == [str(status["controller_id"]),
                                       f"127.0.0.1:{cluster.nodes[status['controller_id']].fixed_port}", "*"]
    row = next(line.split() for line in lines if line.split()[:2] == [str(PARTITION), str(leader)])
    assert row[5:] == [str(after["high_watermark"]), "ok"]


def test_status_after_kill9_shows_new_leaders_and_shrunk_isrs(capsys: pytest.CaptureFixture[str],
                                                              cluster: Cluster) -> None:
    status = wait_status(capsys, cluster, healthy)
    victim = status["offsets_topic"]["partitions"][PARTITION]["leader"]
    cluster.commit_via_coordinator(GROUP, {("t", 0): 42})
    acked = cli_json(capsys, cluster, "cluster", "status")["offsets_topic"]["partitions"]
    hw_before = {p["partition"]: p["high_watermark"] for p in acked}
    epochs_before = {p["partition"]: p["leader_epoch"] for p in acked}
    led_by_victim = {p["partition"] for p in acked if p["leader"] == victim}

    cluster.kill9(victim)

    def failed_over(s: dict[str, Any]) -> bool:
        parts = s["offsets_topic"]["partitions"]
        # A new leader starts from the high watermark its last fetch told it; its follower's next fetch
        # moves it up to what both have, which covers every acknowledged write.
        return (victim not in [b["node_id"] for b in s["brokers"]]
                and all(p["leader"] not in (victim, -1) and victim not in p["isr"]
                        and p["high_watermark"] is not None and p["high_watermark"] >= hw_before[p["partition"]]
                        for p in parts))

    after = wait_status(capsys, cluster, failed_over)
    assert [b["node_id"] for b in after["brokers"]] == sorted({0, 1, 2} - {victim})
    assert after["controller_id"] != victim
    parts = after["offsets_topic"]["partitions"]
    for p in parts:
        assert len(p["isr"]) == 2 and p["under_replicated"] and p["offline_replicas"] == [victim], p
        if p["partition"] in led_by_victim:
            assert p["leader_epoch"] > epochs_before[p["partition"]], p  # an election
    assert after["offsets_topic"]["under_replicated_partitions"] == list(range(OFFSETS_PARTITIONS))
    assert after["offsets_topic"]["offline_partitions"] == []

    described = cli_json(capsys, cluster, "groups", "describe", GROUP)
    assert described["coordinator"]["node_id"] == parts[PARTITION]["leader"] != victim

    code = cli_main(["cluster", "status", "--bootstrap-server", bootstrap(cluster)])
    out, _ = capsys.readouterr()
    assert code == 0
    assert f"__consumer_offsets: {OFFSETS_PARTITIONS} partitions, {OFFSETS_PARTITIONS} under-replicated, 0 offline" in out
    assert sum(1 for line in out.splitlines() if line.endswith("under-replicated")) == OFFSETS_PARTITIONS
