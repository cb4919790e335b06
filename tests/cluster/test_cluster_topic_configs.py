"""Topic configs in a cluster: kept in ZooKeeper's /config/topics/<name> as Kafka's ZooKeeper mode kept them,
so any node describes what another node was told at CreateTopics or IncrementalAlterConfigs, each change
leaves its /config/changes notification, and deleting the topic removes its configs."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kazoo.client import KazooClient

from tests.cluster.cluster_support import Cluster

pytestmark = pytest.mark.integration

TOPIC = "connect-offsets"


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(zk_connect, tmp_path, topic=[]).start_all()
    yield c
    c.stop_all()


def describe(cluster: Cluster, node: int, keys: list[str]) -> dict[str, tuple[str | None, int]]:
    r = DescribeConfigsRequest.DescribeConfigsResource
    resp = cluster.ask(DescribeConfigsRequest[4](resources=[r(resource_type=2, resource_name=TOPIC,
                                                               configuration_keys=keys)],
                                                 include_synonyms=False, include_documentation=False),
                       DescribeConfigsResponse, [cluster.nodes[node]])
    [result] = resp.results
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_configs_live_in_zookeeper(cluster: Cluster, zk_connect: str) -> None:
    t = CreateTopicsRequest.CreatableTopic
    created = cluster.ask(CreateTopicsRequest[7](topics=[t(
        name=TOPIC, num_partitions=2, replication_factor=3, assignments=[],
        configs=[t.CreatableTopicConfig(name="cleanup.policy", value="compact")])],
        timeout_ms=10_000, validate_only=False), CreateTopicsResponse, [cluster.nodes[0]])
    assert created.topics[0].error_code == 0, created
    assert {c.name: c.value for c in created.topics[0].configs}["cleanup.policy"] == "compact"
    bad = cluster.ask(CreateTopicsRequest[7](topics=[t(
        name="refused", num_partitions=1, replication_factor=3, assignments=[],
        configs=[t.CreatableTopicConfig(name="retention.ms", value="soon")])],
        timeout_ms=10_000, validate_only=False), CreateTopicsResponse, [cluster.nodes[0]])
    assert bad.topics[0].error_code == 40

    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"/config/topics/{TOPIC}")
        assert json.loads(data) == {"version": 1, "config": {"cleanup.policy": "compact"}}
        assert zk.exists("/config/topics/refused") is None and zk.exists("/brokers/topics/refused") is None

        deadline = time.monotonic() + 15
        while True:  # another node answers once its view has the topic
            r = DescribeConfigsRequest.DescribeConfigsResource
            resp = cluster.ask(DescribeConfigsRequest[4](resources=[r(resource_type=2, resource_name=TOPIC,
                                                                       configuration_keys=["cleanup.policy"])],
                                                         include_synonyms=False, include_documentation=False),
                               DescribeConfigsResponse, [cluster.nodes[2]])
            if resp.results[0].error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert describe(cluster, 2, ["cleanup.policy"]) == {"cleanup.policy": ("compact", 1)}

        res = IncrementalAlterConfigsRequest.AlterConfigsResource
        altered = cluster.ask(IncrementalAlterConfigsRequest[1](resources=[res(
            resource_type=2, resource_name=TOPIC, configs=[res.AlterableConfig(
                name="retention.ms", config_operation=0, value="-1")])], validate_only=False),
            IncrementalAlterConfigsResponse, [cluster.nodes[1]])
        assert altered.responses[0].error_code == 0, altered
        assert describe(cluster, 0, ["cleanup.policy", "retention.ms"]) == {
            "cleanup.policy": ("compact", 1), "retention.ms": ("-1", 1)}
        changes = zk.get_children("/config/changes")
        assert [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes] == [
            {"version": 2, "entity_path": f"topics/{TOPIC}"}]

        deleted = cluster.ask(DeleteTopicsRequest[6](topics=[DeleteTopicsRequest.DeleteTopicState(
            name=TOPIC, topic_id=None)], timeout_ms=10_000), DeleteTopicsResponse, [cluster.nodes[0]])
        assert deleted.responses[0].error_code == 0, deleted
        deadline = time.monotonic() + 15
        while zk.exists(f"/config/topics/{TOPIC}") is not None:
            assert time.monotonic() < deadline, "the controller left the topic's configs"
            time.sleep(0.2)
    finally:
        zk.stop()
        zk.close()
