"""Topic configs through a real admin client (confluent-kafka's AdminClient, librdkafka): a topic created
with configs as Kafka Connect creates its internal topics, described, altered incrementally and with the
legacy AlterConfigs, refused values, and the configs surviving a restart."""
from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.integration

TIMEOUT_S = 15


def admin(srv: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"{srv.host}:{srv.port}"})


def describe(client: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return client.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)


def test_created_with_configs_described_and_altered(server_factory: ServerFactory) -> None:
    srv = server_factory()
    client = admin(srv)
    # Kafka Connect's config topic: one partition, compacted.
    futures = client.create_topics([NewTopic("connect-configs", num_partitions=1, replication_factor=1,
                                             config={"cleanup.policy": "compact", "retention.ms": "-1"})],
                                   request_timeout=TIMEOUT_S)
    futures["connect-configs"].result(TIMEOUT_S)
    entries = describe(client, "connect-configs")
    assert entries["cleanup.policy"].value == "compact"
    assert entries["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["retention.ms"].value == "-1"
    assert entries["segment.bytes"].value == "1073741824"
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["segment.bytes"].is_default

    resource = ConfigResource(ResourceType.TOPIC, "connect-configs", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("max.message.bytes", "2097152", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    client.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    entries = describe(client, "connect-configs")
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["max.message.bytes"].value == "2097152"
    assert entries["retention.ms"].value == "604800000" and entries["retention.ms"].is_default

    bad = ConfigResource(ResourceType.TOPIC, "connect-configs", incremental_configs=[
        ConfigEntry("segment.bytes", "12", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        client.incremental_alter_configs([bad], request_timeout=TIMEOUT_S)[bad].result(TIMEOUT_S)
    assert "Value must be at least 1048576" in str(e.value)

    with pytest.raises(KafkaException) as e:
        client.create_topics([NewTopic("refused", 1, 1, config={"no.such.config": "1"})],
                             request_timeout=TIMEOUT_S)["refused"].result(TIMEOUT_S)
    assert "Unknown topic config name: no.such.config" in str(e.value)
    assert "refused" not in client.list_topics(timeout=TIMEOUT_S).topics

    # The legacy AlterConfigs replaces the whole set.
    whole = ConfigResource(ResourceType.TOPIC, "connect-configs", set_config={"segment.ms": "3600000"})
    with pytest.warns(DeprecationWarning):  # the client's word for the legacy API, which Kafka still serves
        altered = client.alter_configs([whole], request_timeout=TIMEOUT_S)
    altered[whole].result(TIMEOUT_S)
    entries = describe(client, "connect-configs")
    assert entries["segment.ms"].value == "3600000"
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default

    srv.kill9()
    srv.restart()
    client = admin(srv)
    entries = describe(client, "connect-configs")
    assert entries["segment.ms"].value == "3600000"
    assert entries["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_validate_only_and_the_broker_resource(server: ServerProcess) -> None:
    client = admin(server)
    client.create_topics([NewTopic("checked", 1, 1, config={"cleanup.policy": "compact"})],
                         validate_only=True, request_timeout=TIMEOUT_S)["checked"].result(TIMEOUT_S)
    assert "checked" not in client.list_topics(timeout=TIMEOUT_S).topics
    broker = ConfigResource(ResourceType.BROKER, "0")
    entries = client.describe_configs([broker], request_timeout=TIMEOUT_S)[broker].result(TIMEOUT_S)
    assert entries["node.id"].value == "0" and entries["node.id"].is_read_only
    assert entries["log.retention.hours"].value == "168"
