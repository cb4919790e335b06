"""Per-topic configs: Kafka's checks and messages, the incremental operations, what DescribeConfigs reports
(sources, synonyms, the broker's flags), the store keeping them across a restart, and the three APIs and
CreateTopics answered by their handlers."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from coordinator_server.cluster import zk_layout as zl
from coordinator_server.config import Config
from coordinator_server.net.data_plane.alter_configs import AlterConfigsHandler
from coordinator_server.net.data_plane.describe_configs import DescribeConfigsHandler
from coordinator_server.net.data_plane.topic_admin import TopicAdminHandlers
from coordinator_server.net.data_plane.topic_configs import TopicConfigs
from coordinator_server.security.authorizer import ALLOW_ALL
from coordinator_server.topics import configs as tc
from coordinator_server.topics.store import TOPIC_CONFIG_FILE, StoreConfig, TopicStore
from protocol.apis import API_TABLE
from protocol.errors import Errors, KafkaError

S = tc.ConfigSource


def refusal(configs: dict[str, str | None]) -> tuple[Errors, str]:
    with pytest.raises(KafkaError) as e:
        tc.validate(configs)
    return e.value.code, str(e.value.message)


@pytest.mark.parametrize(("configs", "message"), [
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ({"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ({"segment.bytes": "1000"}, "Invalid value 1000 for configuration segment.bytes: Value must be at least 1048576"),
    ({"segment.bytes": "3000000000"},
     "Invalid value 3000000000 for configuration segment.bytes: Not a number of type INT"),
    ({"retention.ms": "1_000"}, "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG"),
    ({"cleanup.policy": "compact,forever"},
     "Invalid value forever for configuration cleanup.policy: String must be one of: compact, delete"),
    ({"message.timestamp.type": "Now"},
     "Invalid value Now for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"remote.storage.enable": "true"},
     "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
    ({"compression.gzip.level": "12"},
     "Invalid value 12 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
    ({"compression.zstd.level": "99"},
     "Invalid value 99 for configuration compression.zstd.level: Value must be no more than 22"),
    ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type: String must be one "
                                     "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"leader.replication.throttled.replicas": "x"},
     "Invalid value [x] for configuration leader.replication.throttled.replicas: leader.replication.throttled."
     "replicas must be the literal '*' or a list of replicas in the following format: "
     "[partitionId]:[brokerId],[partitionId]:[brokerId],..."),
])
def test_refused_as_kafka_refuses(configs: dict[str, str | None], message: str) -> None:
    assert refusal(configs) == (Errors.INVALID_CONFIG, message)


def test_accepted_values_are_kept_as_sent() -> None:
    sent = {"cleanup.policy": "compact,delete", "retention.ms": " 1000 ", "min.cleanable.dirty.ratio": "0.1",
            "unclean.leader.election.enable": "TRUE", "leader.replication.throttled.replicas": "0:1,1:2",
            "follower.replication.throttled.replicas": "*", "compression.gzip.level": "-1"}
    assert tc.validate(sent) == sent


def test_the_names_are_kafka_4_4s() -> None:
    assert len(tc.TOPIC_CONFIGS) == 37
    assert {"errors.deadletterqueue.group.enable", "max.decompressed.message.bytes", "remote.copy.lag.ms",
            "segment.ms", "cleanup.policy"} <= set(tc.TOPIC_CONFIGS)


def test_every_config_default_passes_its_own_check() -> None:
    for d in tc.TOPIC_CONFIGS.values():
        assert d.default is not None
        assert tc.validate({d.name: d.default}) == {d.name: d.default}


def test_incremental_operations() -> None:
    ops = [("retention.ms", tc.AlterOp.SET, "5000"), ("segment.ms", tc.AlterOp.DELETE, None),
           ("cleanup.policy", tc.AlterOp.APPEND, "compact")]
    assert tc.incremental({"segment.ms": "10"}, ops) == {"retention.ms": "5000", "cleanup.policy": "delete,compact"}
    assert tc.incremental({"cleanup.policy": "delete,compact"},
                          [("cleanup.policy", tc.AlterOp.SUBTRACT, "delete")]) == {"cleanup.policy": "compact"}
    assert tc.incremental({}, [("cleanup.policy", tc.AlterOp.APPEND, "delete")]) == {"cleanup.policy": "delete"}
    with pytest.raises(KafkaError) as e:
        tc.incremental({}, [("retention.ms", tc.AlterOp.APPEND, "5")])
    assert (e.value.code, e.value.message) == (Errors.INVALID_CONFIG,
                                               "Can't APPEND to key retention.ms because its type is not LIST.")
    with pytest.raises(KafkaError) as e:
        tc.incremental({}, [("bogus", tc.AlterOp.SUBTRACT, "x")])
    assert e.value.message == "Can't SUBTRACT to key bogus because its type is not LIST."
    with pytest.raises(KafkaError) as e:
        tc.incremental({}, [("retention.ms", tc.AlterOp.SET, None)])
    assert (e.value.code, e.value.message) == (Errors.INVALID_REQUEST, "Null value not supported for : retention.ms")
    assert tc.incremental({"a": "b"}, [("bogus", tc.AlterOp.DELETE, None)]) == {"a": "b"}  # as Kafka: no error


def test_describe_reports_each_source_and_the_synonyms_in_kafka_order() -> None:
    entries = {e.name: e for e in tc.describe_topic({"retention.ms": "5"}, {"log.segment.bytes": "2097152"},
                                                    synonyms=True)}
    assert sorted(entries) == sorted(tc.TOPIC_CONFIGS)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("5", S.DYNAMIC_TOPIC_CONFIG)
    # Kafka lists no default synonym for the configs kept in hours or minutes at the broker level.
    assert [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms] == [
        ("retention.ms", "5", S.DYNAMIC_TOPIC_CONFIG)]
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("2097152", S.STATIC_BROKER_CONFIG)
    assert [(s.name, s.source) for s in entries["segment.bytes"].synonyms] == [
        ("log.segment.bytes", S.STATIC_BROKER_CONFIG), ("log.segment.bytes", S.DEFAULT_CONFIG)]
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == ("delete", S.DEFAULT_CONFIG)
    assert entries["cleanup.policy"].type == tc.ConfigType.LIST
    assert not any(e.read_only or e.sensitive for e in entries.values())
    assert [e.name for e in tc.describe_topic({}, {}, ["segment.ms", "nope", "cleanup.policy"])] == [
        "segment.ms", "cleanup.policy"]
    assert all(e.synonyms == () for e in tc.describe_topic({}, {}))


def test_broker_settings_are_the_flags_set_away_from_kafka_defaults() -> None:
    assert tc.broker_settings(Config(node_id=3)) == {"node.id": "3"}
    assert tc.broker_settings(Config(retention_ms=1000, min_insync_replicas=2, auto_create_topics=False)) == {
        "node.id": "0", "log.retention.ms": "1000", "min.insync.replicas": "2", "auto.create.topics.enable": "false"}
    broker = {e.name: e for e in tc.describe_broker(tc.broker_settings(Config(retention_ms=1000)), synonyms=True)}
    assert (broker["log.retention.ms"].value, broker["log.retention.ms"].source) == ("1000", S.STATIC_BROKER_CONFIG)
    assert (broker["log.retention.hours"].value, broker["log.retention.hours"].source) == ("168", S.DEFAULT_CONFIG)
    assert (broker["node.id"].value, broker["node.id"].source) == ("0", S.STATIC_BROKER_CONFIG)
    assert all(e.read_only for e in broker.values())


def test_zookeeper_documents_are_kafkas() -> None:
    assert json.loads(zl.encode_topic_config({"retention.ms": "5", "cleanup.policy": "compact"})) == {
        "version": 1, "config": {"cleanup.policy": "compact", "retention.ms": "5"}}
    assert zl.decode_topic_config(b'{"version":1,"config":{"a":"b"}}') == {"a": "b"}
    assert json.loads(zl.encode_config_change("t")) == {"version": 2, "entity_path": "topics/t"}
    assert zl.topic_config_path("t") == "/config/topics/t"


# ------------------------------------------------------------------------------------------------ the store


def open_store(tmp_path: Path) -> TopicStore:
    return TopicStore.open(StoreConfig(data_dir=tmp_path), 50)


def test_store_keeps_configs_across_a_restart_and_alters_them(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 2, configs={"cleanup.policy": "compact"})
    store.create_topic("plain", 1)
    assert (tmp_path / "t-0" / TOPIC_CONFIG_FILE).exists() and not (tmp_path / "t-1" / TOPIC_CONFIG_FILE).exists()
    assert not (tmp_path / "plain-0" / TOPIC_CONFIG_FILE).exists()
    store.close()
    store = open_store(tmp_path)
    assert store.topic_configs("t") == {"cleanup.policy": "compact"}
    assert store.topic_configs("plain") == {}
    assert store.topic_configs("missing") is None
    store.set_topic_configs("plain", {"retention.ms": "100"})
    store.set_topic_configs("t", {})
    store.close()
    store = open_store(tmp_path)
    assert store.topic_configs("plain") == {"retention.ms": "100"} and store.topic_configs("t") == {}
    store.close()


def test_store_refuses_bad_configs_and_validate_only_writes_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with pytest.raises(KafkaError) as e:
        store.create_topic("t", 1, configs={"retention.ms": "x"})
    assert e.value.code == Errors.INVALID_CONFIG
    store.create_topic("t", 1, validate_only=True, configs={"retention.ms": "5"})
    assert store.get("t") is None and not list(tmp_path.glob("t-*"))
    store.create_topic("t", 1)
    with pytest.raises(KafkaError) as e:  # the topic's existence is checked before its configs, as Kafka does
        store.create_topic("t", 1, configs={"retention.ms": "x"})
    assert e.value.code == Errors.TOPIC_ALREADY_EXISTS
    store.close()


# --------------------------------------------------------------------------------------------- the handlers


class Handlers:
    def __init__(self, tmp_path: Path, broker: dict[str, str] | None = None) -> None:
        self.store = open_store(tmp_path)
        configs = TopicConfigs(self.store, None, broker or {"node.id": "0"})
        self.describe = DescribeConfigsHandler(configs, 0)
        self.alter = AlterConfigsHandler(configs, 0)
        self.admin = TopicAdminHandlers(self.store, None, 0, None, None, configs.broker)  # type: ignore[arg-type]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def roundtrip(response: Any, version: int) -> Any:
    """Encoded and decoded as a client reads it, so every field fits the version's schema."""
    cls = API_TABLE[response.API_KEY].response
    return cls.decode(bytes(response.encode(version=version)), version=version)


def create(h: Handlers, name: str, configs: dict[str, str | None], version: int = 7,
           validate_only: bool = False) -> Any:
    req = CreateTopicsRequest[version](topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[],
        configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in configs.items()])], timeout_ms=5000, validate_only=validate_only)
    return roundtrip(run(h.admin.handle_create_topics(req, version, ALLOW_ALL)), version).topics[0]


def describe(h: Handlers, resources: list[tuple[int, str, list[str] | None]], version: int = 4,
             synonyms: bool = False, docs: bool = False) -> list[Any]:
    fields: dict[str, Any] = {"include_synonyms": synonyms}
    if version >= 3:
        fields["include_documentation"] = docs
    req = DescribeConfigsRequest[version](resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources], **fields)
    return list(roundtrip(run(h.describe.handle_describe_configs(req, version, ALLOW_ALL)), version).results)


def test_create_topics_accepts_configs_and_answers_them_from_v5(tmp_path: Path) -> None:
    h = Handlers(tmp_path)
    got = create(h, "t", {"cleanup.policy": "compact", "retention.ms": "1000"})
    assert got.error_code == 0
    entries = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in got.configs}
    assert sorted(entries) == sorted(tc.TOPIC_CONFIGS)
    assert entries["cleanup.policy"] == ("compact", S.DYNAMIC_TOPIC_CONFIG, False, False)
    assert entries["segment.ms"] == ("604800000", S.DEFAULT_CONFIG, False, False)
    assert h.store.topic_configs("t") == {"cleanup.policy": "compact", "retention.ms": "1000"}
    bad = create(h, "u", {"retention.ms": "x"}, version=4)
    assert (bad.error_code, bad.error_message) == (
        Errors.INVALID_CONFIG, "Invalid value x for configuration retention.ms: Not a number of type LONG")
    assert h.store.get("u") is None
    checked = create(h, "v", {"cleanup.policy": "compact"}, validate_only=True)
    assert checked.error_code == 0 and h.store.get("v") is None
    assert {c.name: c.value for c in checked.configs}["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_at_every_served_version(tmp_path: Path, version: int) -> None:
    h = Handlers(tmp_path)
    h.store.create_topic("t", 1, configs={"cleanup.policy": "compact"})
    topic, missing, broker = describe(h, [(2, "t", ["cleanup.policy", "retention.ms"]), (2, "nope", None),
                                          (4, "0", ["node.id"])], version, synonyms=True, docs=True)
    assert (topic.error_code, topic.resource_name) == (0, "t")
    assert [(c.name, c.value, c.config_source) for c in topic.configs] == [
        ("cleanup.policy", "compact", S.DYNAMIC_TOPIC_CONFIG), ("retention.ms", "604800000", S.DEFAULT_CONFIG)]
    assert [(s.name, s.value, s.source) for s in topic.configs[0].synonyms] == [
        ("cleanup.policy", "compact", S.DYNAMIC_TOPIC_CONFIG), ("log.cleanup.policy", "delete", S.DEFAULT_CONFIG)]
    if version >= 3:
        assert topic.configs[0].config_type == tc.ConfigType.LIST and topic.configs[0].documentation
    assert (missing.error_code, missing.error_message) == (Errors.UNKNOWN_TOPIC_OR_PARTITION, "")
    assert topic.error_message == ""
    assert [(c.name, c.value, c.read_only, c.config_source) for c in broker.configs] == [
        ("node.id", "0", True, S.STATIC_BROKER_CONFIG)]


def test_describe_configs_of_other_resources(tmp_path: Path) -> None:
    h = Handlers(tmp_path)
    other, default, group = describe(h, [(4, "7", None), (4, "", None), (32, "g", None)])
    assert other.error_code == Errors.INVALID_REQUEST and "expected 0 or empty string" in other.error_message
    assert (default.error_code, default.configs) == (0, [])
    assert group.error_code == Errors.INVALID_REQUEST
    offsets, = describe(h, [(2, "__consumer_offsets", ["cleanup.policy"])])
    assert [(c.value, c.config_source) for c in offsets.configs] == [("compact", S.DYNAMIC_TOPIC_CONFIG)]


def incremental(h: Handlers, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False,
                version: int = 1) -> Any:
    Res = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest[version](resources=[Res(resource_type=2, resource_name=name, configs=[
        Res.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])], validate_only=validate_only)
    resp = run(h.alter.handle_incremental_alter_configs(req, version, ALLOW_ALL))
    assert isinstance(resp, IncrementalAlterConfigsResponse)
    return roundtrip(resp, version).responses[0]


def test_incremental_alter_configs(tmp_path: Path) -> None:
    h = Handlers(tmp_path)
    h.store.create_topic("t", 1, configs={"retention.ms": "1000"})
    ok = incremental(h, "t", [("cleanup.policy", tc.AlterOp.APPEND, "compact"), ("retention.ms", tc.AlterOp.DELETE, None)])
    assert (ok.error_code, ok.error_message) == (0, None)
    assert h.store.topic_configs("t") == {"cleanup.policy": "delete,compact"}
    dry = incremental(h, "t", [("segment.ms", tc.AlterOp.SET, "100")], validate_only=True, version=0)
    assert dry.error_code == 0 and h.store.topic_configs("t") == {"cleanup.policy": "delete,compact"}
    bad = incremental(h, "t", [("segment.ms", tc.AlterOp.SET, "0")])
    assert (bad.error_code, bad.error_message) == (
        Errors.INVALID_CONFIG, "Invalid value 0 for configuration segment.ms: Value must be at least 1")
    twice = incremental(h, "t", [("segment.ms", tc.AlterOp.SET, "5"), ("segment.ms", tc.AlterOp.DELETE, None)])
    assert twice.error_code == Errors.INVALID_REQUEST
    assert incremental(h, "gone", [("segment.ms", tc.AlterOp.SET, "5")]).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert h.store.topic_configs("t") == {"cleanup.policy": "delete,compact"}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_replaces_the_whole_set(tmp_path: Path, version: int) -> None:
    h = Handlers(tmp_path)
    h.store.create_topic("t", 1, configs={"retention.ms": "1000"})
    Res = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest[version](resources=[
        Res(resource_type=2, resource_name="t", configs=[Res.AlterableConfig(name="segment.ms", value="100")]),
        Res(resource_type=4, resource_name="0", configs=[Res.AlterableConfig(name="log.retention.ms", value="1")])],
        validate_only=False)
    resp = run(h.alter.handle_alter_configs(req, version, ALLOW_ALL))
    assert isinstance(resp, AlterConfigsResponse)
    topic, broker = roundtrip(resp, version).responses
    assert topic.error_code == 0 and h.store.topic_configs("t") == {"segment.ms": "100"}
    assert broker.error_code == Errors.INVALID_REQUEST


def test_describe_answers_decode_with_kafka_python(tmp_path: Path) -> None:
    h = Handlers(tmp_path, {"node.id": "0", "log.retention.ms": "1000"})
    h.store.create_topic("t", 1)
    topic, = describe(h, [(2, "t", ["retention.ms"])], synonyms=True)
    assert [(s.name, s.value, s.source) for s in topic.configs[0].synonyms] == [
        ("log.retention.ms", "1000", S.STATIC_BROKER_CONFIG)]
    assert (topic.configs[0].value, topic.configs[0].config_source) == ("1000", S.STATIC_BROKER_CONFIG)
    assert isinstance(DescribeConfigsResponse[4], type)
    assert isinstance(CreateTopicsResponse[7], type)
