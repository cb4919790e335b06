"""DescribeConfigs (v1-4, the versions Kafka 4 serves) of topics and of this broker.

A topic's answer lists every topic config with its value and where it comes from: the topic's own setting
(DYNAMIC_TOPIC_CONFIG), a broker flag (STATIC_BROKER_CONFIG) or Kafka's default (DEFAULT_CONFIG); with
IncludeSynonyms each entry also lists the broker-level names behind it, and with IncludeDocumentation a
line on what it governs (`topics.configs`). The broker's answer is its log settings and the defaults of new
topics, read-only. Authorization is DESCRIBE_CONFIGS on the topic or the cluster, asked first, as Kafka does.
"""
from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsResponse
from kafka.protocol.api_message import ApiMessage

from coordinator_server.net.data_plane.topic_configs import TopicConfigs
from coordinator_server.security.authorizer import Access
from coordinator_server.topics import configs as tc
from coordinator_server.topics.registry import MAX_NAME_LENGTH, is_valid_topic_name
from protocol.errors import Errors, KafkaError

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult
_Synonym = _Entry.DescribeConfigsSynonym


class DescribeConfigsHandler:
    def __init__(self, configs: TopicConfigs, node_id: int) -> None:
        self.configs = configs
        self.node_id = node_id

    async def handle_describe_configs(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        results = []
        synonyms = bool(req.include_synonyms)
        docs = version >= 3 and bool(req.include_documentation)
        for r in req.resources:
            error, message, entries = Errors.NONE, None, []
            try:
                entries = await self._describe(r.resource_type, r.resource_name, r.configuration_keys, synonyms,
                                               access)
            except KafkaError as e:
                # Kafka says nothing more about a topic that is not there.
                error, message = e.code, "" if e.code == Errors.UNKNOWN_TOPIC_OR_PARTITION else e.message
            results.append(_Result(  # Kafka answers "" where there is no message, success included
                error_code=int(error), error_message=message or "", resource_type=r.resource_type,
                resource_name=r.resource_name, configs=[_entry(e, docs) for e in entries]))
        return DescribeConfigsResponse[version](throttle_time_ms=0, results=results)

    async def _describe(self, rtype: int, name: str, keys: list[str] | None, synonyms: bool,
                        access: Access) -> list[tc.ConfigEntry]:
        if rtype == tc.ResourceType.TOPIC:
            if not access.topic("DESCRIBE_CONFIGS", name):
                raise KafkaError(Errors.TOPIC_AUTHORIZATION_FAILED)
            if not is_valid_topic_name(name):
                raise KafkaError(Errors.INVALID_TOPIC_EXCEPTION, invalid_name_message(name))
            overrides = await self.configs.get(name)
            if overrides is None:
                raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            return tc.describe_topic(overrides, self.configs.broker, keys, synonyms)
        if rtype == tc.ResourceType.BROKER:
            if not access.cluster("DESCRIBE_CONFIGS"):
                raise KafkaError(Errors.CLUSTER_AUTHORIZATION_FAILED)
            check_broker_name(name, self.node_id)
            # The empty name is the cluster-wide dynamic defaults, of which there are none here.
            return tc.describe_broker(self.configs.broker, keys, synonyms) if name else []
        raise KafkaError(Errors.INVALID_REQUEST, f"resource type {rtype} is not served here: only topics (2) and "
                                                 "this broker (4) have configs")


def invalid_name_message(name: str) -> str:
    """Kafka's words for a topic name it refuses."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_NAME_LENGTH:
        return (f"Topic name is invalid: the length of '{name}' is longer than the max allowed length "
                f"{MAX_NAME_LENGTH}")
    return (f"Topic name is invalid: '{name}' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'")


def check_broker_name(name: str, node_id: int) -> None:
    """A broker resource names this broker, or is empty (the cluster-wide default), as Kafka requires."""
    if name and name != str(node_id):
        raise KafkaError(Errors.INVALID_REQUEST,
                         f"Unexpected broker id, expected {node_id} or empty string, but received {name}")


def _entry(e: tc.ConfigEntry, docs: bool) -> Any:
    return _Entry(name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                  is_sensitive=e.sensitive, config_type=int(e.type), documentation=e.doc if docs else None,
                  synonyms=[_Synonym(name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms])
