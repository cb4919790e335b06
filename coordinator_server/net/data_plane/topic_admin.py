"""CreateTopics, DeleteTopics and CreatePartitions: on one node the topic store's own, in a cluster through
ZooKeeper (`ClusterTopicAdmin`), as Kafka's brokers in ZooKeeper mode do. A deleted topic's long polls are
answered at once, and its directories removed off the loop. A new topic's configs are checked as Kafka checks
them (`topics.configs`, validate_only too) and kept with the topic; from v5 the answer lists every config of
the topic as DescribeConfigs would."""
from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping
from typing import Any, Protocol

from kafka.protocol.admin import CreatePartitionsResponse, CreateTopicsResponse, DeleteTopicsResponse
from kafka.protocol.api_message import ApiMessage

from coordinator_server.net.data_plane.partitions import TimerHost
from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.security.authorizer import Access
from coordinator_server.topics import configs as tc
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.registry import Topic
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors, KafkaError


class ClusterTopicAdmin(Protocol):
    """Topic admin in a cluster (cluster.topic_admin): through ZooKeeper, as Kafka's brokers in ZooKeeper
    mode; each raises KafkaError with Kafka's code."""

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           validate_only: bool, configs: Mapping[str, str | None] | None = None) -> tuple[Topic, int]: ...
    async def delete_topic(self, name: str) -> None: ...
    async def topic_configs(self, name: str) -> dict[str, str] | None: ...
    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    async def create_partitions(self, name: str, count: int, validate_only: bool) -> None: ...
    async def next_producer_id(self) -> int: ...


class TopicAdminHandlers:
    def __init__(self, store: TopicStore, admin: ClusterTopicAdmin | None, node_id: int,
                 fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], runtime: TimerHost,
                 broker: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.broker = dict(broker or {})  # the broker settings behind a topic's defaults
        self.admin = admin  # None on one node
        self.node_id = node_id
        self.fetch_purgatory = fetch_purgatory
        self.runtime = runtime

    async def handle_create_topics(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        counts: dict[str, int] = {}
        for t in req.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results = []
        for t in req.topics:
            topic_id, error, message, partitions = None, Errors.NONE, None, -1
            configs: dict[str, str] = {}
            try:
                if counts[t.name] > 1:
                    raise KafkaError(Errors.INVALID_REQUEST, f"topic '{t.name}' appears more than once")
                if not (access.cluster("CREATE") or access.topic("CREATE", t.name)):
                    raise KafkaError(Errors.TOPIC_AUTHORIZATION_FAILED)
                num_partitions = self._assigned_partitions(t)
                if len({c.name for c in t.configs}) != len(t.configs):
                    raise KafkaError(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
                sent = {c.name: c.value for c in t.configs}
                validate_only = version >= 1 and req.validate_only
                if self.admin is not None:
                    topic, replication_factor = await self.admin.create_topic(
                        t.name, num_partitions, t.replication_factor, validate_only, sent)
                else:
                    topic = self.store.create_topic(t.name, num_partitions, t.replication_factor,
                                                    validate_only=validate_only, configs=sent)
                    replication_factor = 1
                topic_id, partitions = topic.topic_id, topic.partitions
                configs = tc.validate(sent)
            except KafkaError as e:
                error, message = e.code, e.message
            results.append(CreateTopicsResponse.CreatableTopicResult(
                name=t.name, topic_id=topic_id, error_code=int(error), error_message=message,
                num_partitions=partitions, replication_factor=replication_factor if error == Errors.NONE else -1,
                **self._configs_of(t.name, configs, error, access)))
        return CreateTopicsResponse[version](throttle_time_ms=0, topics=results)

    def _configs_of(self, name: str, configs: dict[str, str], error: Errors, access: Access) -> dict[str, Any]:
        """A created topic's configs in the answer, as Kafka gives them: all of them, or none (an empty list,
        not null) when it was refused, and none with TOPIC_AUTHORIZATION_FAILED beside when the caller may
        not describe the topic's configs."""
        if error != Errors.NONE:
            return {"configs": []}
        if not access.topic("DESCRIBE_CONFIGS", name):
            return {"configs": [], "topic_config_error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED)}
        return {"configs": [CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs(
            name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source), is_sensitive=e.sensitive)
            for e in tc.describe_topic(configs, self.broker)]}

    def _assigned_partitions(self, t: ApiMessage) -> int:
        if not t.assignments:
            return int(t.num_partitions)
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise KafkaError(Errors.INVALID_REQUEST, "both a replica assignment and a partition "
                                  "count or replication factor were given")
        if self.admin is not None:
            raise KafkaError(Errors.INVALID_REPLICA_ASSIGNMENT, "a manual replica assignment is not supported in "
                             "a cluster: give a partition count and a replication factor (docs/cluster.md)")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaError(Errors.INVALID_REPLICA_ASSIGNMENT, "partitions must be 0..n-1")
        if any(list(a.broker_ids) != [self.node_id] for a in t.assignments):
            raise KafkaError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                  f"the only broker is {self.node_id}")
        return len(indexes)

    async def handle_delete_topics(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(name, None) for name in req.topic_names]
        results = []
        doomed: list[object] = []
        for name, topic_id in wanted:
            if name is None and topic_id is not None:
                found = self.store.get_by_id(topic_id)
                name = found.name if found is not None else None
            error, message = Errors.NONE, None
            current = self.store.get(name) if name is not None else None
            try:
                if name is not None and not access.topic("DELETE", name):
                    raise KafkaError(Errors.TOPIC_AUTHORIZATION_FAILED)
                if current is None:
                    code = Errors.UNKNOWN_TOPIC_ID if name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
                    raise KafkaError(code)
                if current.is_internal:
                    raise KafkaError(Errors.INVALID_REQUEST, "internal topics cannot be deleted")
                topic_id = current.topic_id
                if self.admin is not None:
                    # The controller deletes it; every broker (this one too) drops its replicas then.
                    await self.admin.delete_topic(name)  # type: ignore[arg-type]
                else:
                    parts, dirs = self.store.delete_topic(name)  # type: ignore[arg-type]
                    doomed += dirs
                    for p in parts:
                        self.fetch_purgatory.check_and_complete((p.topic, p.index))
            except KafkaError as e:
                error, message = e.code, e.message
            results.append(DeleteTopicsResponse.DeletableTopicResult(
                name=name, topic_id=topic_id, error_code=int(error), error_message=message))
        self.runtime.rearm_timer()
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, _remove_dirs, doomed)
        return DeleteTopicsResponse[version](throttle_time_ms=0, responses=results)

    async def handle_create_partitions(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        results = []
        for t in req.topics:
            error, message = Errors.NONE, None
            try:
                if not access.topic("ALTER", t.name):
                    raise KafkaError(Errors.TOPIC_AUTHORIZATION_FAILED)
                if self.admin is not None:
                    if t.assignments is not None:
                        raise KafkaError(Errors.INVALID_REPLICA_ASSIGNMENT, "a manual replica assignment is not "
                                         "supported in a cluster (docs/cluster.md)")
                    await self.admin.create_partitions(t.name, t.count, req.validate_only)
                else:
                    if t.assignments is not None and any(list(a.broker_ids) != [self.node_id]
                                                         for a in t.assignments):
                        raise KafkaError(Errors.INVALID_REPLICA_ASSIGNMENT, f"the only broker is {self.node_id}")
                    self.store.create_partitions(t.name, t.count, validate_only=req.validate_only)
            except KafkaError as e:
                error, message = e.code, e.message
            results.append(CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name, error_code=int(error), error_message=message))
        return CreatePartitionsResponse[version](throttle_time_ms=0, results=results)


def _remove_dirs(dirs: list[object]) -> None:
    for d in dirs:
        shutil.rmtree(str(d), ignore_errors=True)
