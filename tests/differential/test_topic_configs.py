"""Topic configs, the same requests to Kafka and to the server: a topic created with configs (as Kafka Connect
and Kafka Streams create their internal topics), described with and without synonyms, altered incrementally,
and the values both refuse, with their messages.

Kafka's broker here sets two topic defaults in its server.properties (tests/kafka/broker.py), which it
then reports as static broker configs where the server reports Kafka's default: those entries are left
out of what is compared, on both sides alike."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from tests.differential.harness import Run, scenario
from tests.integration.group_client import Connection

TOPIC = 2
# The topic configs whose broker-level names tests/kafka/broker.py sets in Kafka's server.properties.
HARNESS_STATIC = {"flush.messages", "min.insync.replicas"}
CREATED = {"cleanup.policy": "compact", "retention.ms": "86400000", "min.cleanable.dirty.ratio": "0.1",
           "segment.bytes": "10485760", "message.timestamp.type": "LogAppendTime"}


def _call(run: Run, request: Any, response_cls: Any) -> Any:
    conn = Connection((run.target.host, run.target.port), "differential")
    try:
        return conn.call(request, response_cls).to_dict(json=False)
    finally:
        conn.close()


def _without_harness_static(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((e for e in entries if e["name"] not in HARNESS_STATIC), key=lambda e: e["name"])


def _create(run: Run, label: str, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
    t = CreateTopicsRequest.CreatableTopic
    answer = _call(run, CreateTopicsRequest[7](topics=[t(
        name=name, num_partitions=1, replication_factor=1, assignments=[],
        configs=[t.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
        timeout_ms=10_000, validate_only=validate_only), CreateTopicsResponse)
    for topic in answer["topics"]:
        if topic["configs"] is not None:
            topic["configs"] = _without_harness_static(topic["configs"])
    run.record(label, answer)


def _describe(run: Run, label: str, name: str, keys: list[str] | None, synonyms: bool) -> None:
    r = DescribeConfigsRequest.DescribeConfigsResource
    answer = _call(run, DescribeConfigsRequest[4](resources=[r(resource_type=TOPIC, resource_name=name,
                                                                configuration_keys=keys)],
                                                   include_synonyms=synonyms, include_documentation=False),
                   DescribeConfigsResponse)
    for result in answer["results"]:
        result["configs"] = _without_harness_static(result["configs"])
    run.record(label, answer)


def _alter(run: Run, label: str, name: str, ops: list[tuple[str, int, str | None]]) -> None:
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    run.record(label, _call(run, IncrementalAlterConfigsRequest[1](resources=[res(
        resource_type=TOPIC, resource_name=name,
        configs=[res.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])],
        validate_only=False), IncrementalAlterConfigsResponse))


@scenario("topic-configs")
def topic_configs(run: Run) -> None:
    topic = f"{run.group_prefix}-compacted"
    _create(run, "create with configs", topic, CREATED)
    _create(run, "create, validate only", f"{run.group_prefix}-checked", {"cleanup.policy": "compact,delete"},
            validate_only=True)
    for n, (key, value) in enumerate([("no.such.config", "1"), ("retention.ms", "soon"), ("segment.bytes", "1000"),
                                      ("cleanup.policy", "forever"), ("message.timestamp.type", "Now"),
                                      ("min.cleanable.dirty.ratio", "1.5"), ("preallocate", "yes")]):
        _create(run, f"create refused: {key}={value}", f"{run.group_prefix}-refused-{n}", {key: value})
    _describe(run, "describe all", topic, None, synonyms=False)
    _describe(run, "describe with synonyms", topic,
              ["cleanup.policy", "retention.ms", "segment.ms", "segment.bytes", "max.message.bytes", "no.such"],
              synonyms=True)
    _describe(run, "describe a missing topic", f"{run.group_prefix}-missing", None, synonyms=False)
    _alter(run, "alter: set, delete, append", topic, [("retention.ms", 0, "3600000"),
                                                      ("segment.bytes", 1, None), ("cleanup.policy", 2, "delete")])
    _alter(run, "alter refused: append to a long", topic, [("retention.ms", 2, "5")])
    _alter(run, "alter refused: out of range", topic, [("segment.ms", 0, "0")])
    _describe(run, "describe after altering", topic, ["cleanup.policy", "retention.ms", "segment.bytes"],
              synonyms=True)


def test_topic_configs(differential: Callable[[str], None]) -> None:
    differential("topic-configs")
