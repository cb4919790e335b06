"""Topic admin in a cluster, as Kafka's brokers do it in ZooKeeper mode: CreateTopics writes the topic's
replica assignment (the controller brings its partitions online), DeleteTopics writes a deletion request
(the controller carries it out), CreatePartitions grows the assignment; producer ids come in blocks from
/latest_producer_id_block so no two brokers hand out the same one. Each call returns once this broker's
own view shows the result (every new partition has a leader, or the topic is gone), so a client's next
Metadata request to it is already answered with it; past `PROPAGATION_TIMEOUT_S` the answer is
REQUEST_TIMED_OUT, as Kafka's DelayedCreatePartitions answers."""
from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Mapping

import structlog

from coordinator_server.cluster import election
from coordinator_server.cluster import zk_layout as zl
from coordinator_server.cluster.controller import ClusterView
from coordinator_server.cluster.zk_client import ZkClient
from coordinator_server.topics.configs import validate as validate_configs
from coordinator_server.topics.registry import OFFSETS_TOPIC, Topic, is_valid_topic_name
from protocol.errors import Errors, KafkaError
from protocol.kafka_uuid import kafka_uuid_string, parse_kafka_uuid, random_kafka_uuid

log = structlog.get_logger("coordinator_server.cluster")

PROPAGATION_TIMEOUT_S = 10.0
MAX_PARTITIONS = 100_000


class TopicAdmin:
    def __init__(self, zk: ZkClient, view: ClusterView, node_id: int, default_partitions: int,
                 default_replication_factor: int, local_has: Callable[[str, int], bool]) -> None:
        self.zk = zk
        self.view = view
        self.node_id = node_id
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self._local_has = local_has  # the topic store holds (topic, partition count)
        self._ids: tuple[int, int] = (0, -1)  # the producer id block held: next, last
        self._ids_lock = asyncio.Lock()

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           validate_only: bool, configs: Mapping[str, str | None] | None = None) -> tuple[Topic, int]:
        """`configs`, the topic's own settings, are checked after the partition count and the replication
        factor, as Kafka does, and go to /config/topics/<name>."""
        if not is_valid_topic_name(name):
            raise KafkaError(Errors.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is not valid")
        if name == OFFSETS_TOPIC or self.view.topic(name) is not None:
            raise KafkaError(Errors.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        count = self.default_partitions if num_partitions == -1 else num_partitions
        if not 1 <= count <= MAX_PARTITIONS:
            raise KafkaError(Errors.INVALID_PARTITIONS, f"number of partitions {num_partitions} must be at least 1")
        rf = self.default_replication_factor if replication_factor == -1 else replication_factor
        live = [b.node_id for b in self.view.live_brokers()]
        if rf < 1:
            raise KafkaError(Errors.INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0")
        if rf > len(live):
            raise KafkaError(Errors.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {rf} larger than available brokers: {len(live)}.")
        checked = validate_configs(configs or {})
        topic_id = random_kafka_uuid()
        topic = Topic(name, count, topic_id)
        if validate_only:
            return topic, rf
        # Kafka starts the walk at a random broker, so the leaders of many small topics spread too.
        assignment = election.assign_replicas(live, count, rf, start_index=random.randrange(len(live)),
                                              replica_shift=random.randrange(len(live)))
        if not await self.zk.create_topic_assignment(name, assignment, kafka_uuid_string(topic_id), checked):
            raise KafkaError(Errors.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        log.info("topic_creation_requested", topic=name, partitions=count, replication_factor=rf)
        await self._until(lambda: self._online(name, count), f"the partitions of {name} to get leaders")
        return topic, rf

    async def delete_topic(self, name: str) -> None:
        if self.view.topic(name) is None:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        await self.zk.request_topic_deletion(name)
        log.info("topic_deletion_requested", topic=name)
        await self._until(lambda: self.view.topic(name) is None and not self._local_has(name, 1),
                          f"the controller to delete {name}")

    async def create_partitions(self, name: str, count: int, validate_only: bool) -> None:
        topic = self.view.topic(name)
        if topic is None:
            code = Errors.INVALID_REQUEST if name == OFFSETS_TOPIC else Errors.UNKNOWN_TOPIC_OR_PARTITION
            raise KafkaError(code, f"topic '{name}' does not exist" if name != OFFSETS_TOPIC else
                             "the partition count of __consumer_offsets is fixed")
        if name == OFFSETS_TOPIC:
            raise KafkaError(Errors.INVALID_REQUEST, "the partition count of __consumer_offsets is fixed")
        current = len(topic.replicas)
        if count <= current or count > MAX_PARTITIONS:
            raise KafkaError(Errors.INVALID_PARTITIONS,
                             f"topic currently has {current} partitions, {count} would not be an increase")
        rf = len(topic.replicas[0])
        live = [b.node_id for b in self.view.live_brokers()]
        if rf > len(live):
            raise KafkaError(Errors.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {rf} larger than available brokers: {len(live)}.")
        if validate_only:
            return
        for _attempt in range(5):  # another CreatePartitions may win the conditional write: read again
            got = await self.zk.get(zl.topic_path(name))
            if got is None:
                raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            assignment = zl.decode_assignment(got[0])
            if count <= len(assignment):
                raise KafkaError(Errors.INVALID_PARTITIONS, f"topic currently has {len(assignment)} partitions, "
                                 f"{count} would not be an increase")
            added = election.assign_replicas(live, count, rf, start_index=random.randrange(len(live)))
            assignment.update({p: r for p, r in added.items() if p >= len(assignment)})
            if await self.zk.update_assignment(name, assignment, zl.decode_topic_id(got[0]), got[1]):
                break
        else:
            raise KafkaError(Errors.REQUEST_TIMED_OUT,
                             f"topic '{name}' kept changing; try again")
        log.info("partitions_creation_requested", topic=name, partitions=count, was=current)
        await self._until(lambda: self._online(name, count), f"the new partitions of {name} to get leaders")

    async def topic_configs(self, name: str) -> dict[str, str] | None:
        """The configs the topic sets, read from ZooKeeper (None: no such topic)."""
        if name != OFFSETS_TOPIC and self.view.topic(name) is None:
            return None
        return await self.zk.topic_config(name)

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's configs (checked already) in ZooKeeper."""
        if name == OFFSETS_TOPIC or self.view.topic(name) is None:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        await self.zk.set_topic_config(name, configs)
        log.info("topic_configs_altered", topic=name, configs=configs)

    async def next_producer_id(self) -> int:
        async with self._ids_lock:
            nxt, last = self._ids
            if nxt > last:
                try:
                    nxt, last = await self.zk.allocate_producer_id_block(self.node_id)
                except Exception as e:
                    log.warning("producer_id_block_failed", error=repr(e))
                    raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE, "no producer id block available") from e
                log.info("producer_id_block_allocated", block_start=nxt, block_end=last)
            self._ids = (nxt + 1, last)
            return nxt

    def _online(self, name: str, count: int) -> bool:
        topic = self.view.topic(name)
        if topic is None or len(topic.replicas) < count or not self._local_has(name, count):
            return False
        for p in range(count):
            state = self.view.partition_state(p, name)
            if state is None or state.leader < 0:
                return False
        return True

    async def _until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PROPAGATION_TIMEOUT_S
        while not done():
            if time.monotonic() > deadline:
                raise KafkaError(Errors.REQUEST_TIMED_OUT, f"timed out waiting for {what}")
            await asyncio.sleep(0.02)


def topic_uuid(topic_id: str | None, name: str) -> uuid.UUID:
    """The cluster's topic id as a uuid; a topic written without one (before KIP-516) gets a stable one."""
    return parse_kafka_uuid(topic_id) if topic_id else uuid.uuid5(uuid.NAMESPACE_URL, f"coordinator-server:{name}")
