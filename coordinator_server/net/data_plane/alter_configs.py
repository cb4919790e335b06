"""AlterConfigs (v0-2) and IncrementalAlterConfigs (v0-1) of topics: the one module of the two APIs, which
differ only in how the new set of a topic's configs is made from the request.

AlterConfigs replaces the topic's whole set with the one sent; IncrementalAlterConfigs applies each
operation (SET, DELETE, and APPEND / SUBTRACT on list configs) to the current set. Either way the result is
checked whole (`topics.configs.validate`: Kafka's names, types, ranges and messages) and, unless
ValidateOnly, stored (the topic store, or ZooKeeper in a cluster) before the answer. Authorization is
ALTER_CONFIGS on the topic. The broker's settings are its flags: a broker resource is refused.
"""
from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.admin import AlterConfigsResponse, IncrementalAlterConfigsResponse
from kafka.protocol.api_message import ApiMessage

from coordinator_server.net.data_plane.describe_configs import check_broker_name, invalid_name_message
from coordinator_server.net.data_plane.topic_configs import TopicConfigs
from coordinator_server.security.authorizer import Access
from coordinator_server.topics import configs as tc
from coordinator_server.topics.registry import is_valid_topic_name
from protocol.errors import Errors, KafkaError

# The new set of a topic's configs, from its current set.
Change = Callable[[dict[str, str]], dict[str, str]]


class AlterConfigsHandler:
    def __init__(self, configs: TopicConfigs, node_id: int) -> None:
        self.configs = configs
        self.node_id = node_id

    async def handle_alter_configs(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        responses = []
        for r in req.resources:
            sent = {c.name: c.value for c in r.configs}

            def replace(current: dict[str, str], sent: dict[str, str | None] = sent) -> dict[str, str]:
                for name, value in sent.items():
                    if value is None:
                        raise KafkaError(Errors.INVALID_REQUEST, f"Null value not supported for : {name}")
                return tc.validate(sent)
            error, message = await self._alter(r.resource_type, r.resource_name, replace, bool(req.validate_only),
                                               access, duplicates=len(sent) != len(r.configs))
            responses.append(AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=int(error), error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name))
        return AlterConfigsResponse[version](throttle_time_ms=0, responses=responses)

    async def handle_incremental_alter_configs(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        responses = []
        for r in req.resources:
            ops = [(c.name, int(c.config_operation), c.value) for c in r.configs]

            def apply(current: dict[str, str], ops: list[tuple[str, int, str | None]] = ops) -> dict[str, str]:
                return tc.validate(tc.incremental(current, ops))
            error, message = await self._alter(r.resource_type, r.resource_name, apply, bool(req.validate_only),
                                               access, duplicates=len({n for n, _, _ in ops}) != len(ops))
            responses.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=int(error), error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name))
        return IncrementalAlterConfigsResponse[version](throttle_time_ms=0, responses=responses)

    async def _alter(self, rtype: int, name: str, change: Change, validate_only: bool, access: Access,
                     duplicates: bool) -> tuple[Errors, str | None]:
        try:
            if rtype == tc.ResourceType.TOPIC:
                if not access.topic("ALTER_CONFIGS", name):
                    raise KafkaError(Errors.TOPIC_AUTHORIZATION_FAILED)
                if duplicates:
                    raise KafkaError(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
                if not is_valid_topic_name(name):
                    raise KafkaError(Errors.INVALID_TOPIC_EXCEPTION, invalid_name_message(name))
                current = await self.configs.get(name)
                if current is None:
                    raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
                new = change(current)
                if not validate_only:
                    await self.configs.set(name, new)
            elif rtype == tc.ResourceType.BROKER:
                if not access.cluster("ALTER_CONFIGS"):
                    raise KafkaError(Errors.CLUSTER_AUTHORIZATION_FAILED)
                check_broker_name(name, self.node_id)
                raise KafkaError(Errors.INVALID_REQUEST, "this broker's settings are its command-line flags; "
                                                         "they cannot be altered while it runs")
            else:
                raise KafkaError(Errors.INVALID_REQUEST, f"resource type {rtype} is not served here: only "
                                                         "topics (2) have configs to alter")
        except KafkaError as e:
            return e.code, e.message
        return Errors.NONE, None
