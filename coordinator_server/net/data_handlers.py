"""Data-plane and topic-admin handlers: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
InitProducerId, CreateTopics, DeleteTopics, CreatePartitions.

They translate kafka-python's decoded messages into calls on the synchronous topic store and back;
authorization (TOPIC_AUTHORIZATION_FAILED per topic, before existence, as Kafka's API layer orders
it) is asked of the connection's `Access`; leadership (who may serve a partition, its high watermark, when
acks=all is satisfied) of `topics.leadership`, which on one node is this node and in a cluster the replica
managers; topic admin in a cluster goes through ZooKeeper (`ClusterTopicAdmin`). The only asyncio here is
waiting: for the group-commit fsync (and in a cluster the ISR) before acknowledging a produce, and for a
DelayedFetch in the "Fetch" purgatory on the runtime's shared timer before answering a long poll.
"""
from __future__ import annotations

import asyncio
import functools
import shutil
import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

import structlog
from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

from coordinator_server.net.offsets_topic import OffsetsTopic, produce_refusal
from coordinator_server.purgatory import DelayedOperationPurgatory, Timer
from coordinator_server.security.authorizer import Access
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.group_commit import Appended, GroupCommitWriter
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.leadership import Leadership
from coordinator_server.topics.partition import AppendResult, Partition
from coordinator_server.topics.registry import OFFSETS_TOPIC, Topic
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors, KafkaError
from protocol.message_format import MessageFormatError, down_convert, fetch_magic, up_convert

log = structlog.get_logger("coordinator_server.net")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
CONSUMER_REPLICA_ID = -1

_PTopic = ProduceResponse.TopicProduceResponse
_PPart = _PTopic.PartitionProduceResponse
_FTopic = FetchResponse.FetchableTopicResponse
_FPart = _FTopic.PartitionData
_LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_LPart = _LTopic.ListOffsetsPartitionResponse
_ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EPart = _ETopic.EpochEndOffset


class TimerHost(Protocol):
    """The slice of the runtime a purgatory needs: the shared timing wheel and its loop timer."""

    @property
    def timer(self) -> Timer: ...
    def now_ms(self) -> int: ...
    def rearm_timer(self) -> None: ...


class ClusterTopicAdmin(Protocol):
    """Topic admin in a cluster (cluster.topic_admin): through ZooKeeper, as Kafka's brokers in ZooKeeper
    mode; each raises KafkaError with Kafka's code."""

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           validate_only: bool) -> tuple[Topic, int]: ...
    async def delete_topic(self, name: str) -> None: ...
    async def create_partitions(self, name: str, count: int, validate_only: bool) -> None: ...
    async def next_producer_id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class _FetchTarget:
    topic: str | None  # None: a topic id (Fetch v13+) that names no topic here
    index: int
    offset: int
    max_bytes: int
    current_leader_epoch: int
    topic_id: uuid.UUID | None = None  # Fetch v13+ names topics by id


class DataHandlers:
    def __init__(self, store: TopicStore, writer: GroupCommitWriter, runtime: TimerHost, node_id: int,
                 fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], offsets_topic: OffsetsTopic,
                 leadership: Leadership, admin: ClusterTopicAdmin | None) -> None:
        self.store = store
        self.writer = writer
        self.runtime = runtime
        self.node_id = node_id
        self.fetch_purgatory = fetch_purgatory
        self.leadership = leadership  # this node (SoleLeader), or in a cluster the replica managers
        self.admin = admin  # None on one node
        self.offsets_topic = offsets_topic  # `__consumer_offsets` read as a topic (offsets_topic.py)

    def _partition(self, topic: str, index: int) -> Partition | None:
        """A partition a consumer may read: the topic store's, or a view of the coordinator's log."""
        if topic == OFFSETS_TOPIC:
            return self.offsets_topic.partition(index)
        return self.store.partition(topic, index)

    def on_offsets_append(self, partition: int) -> None:
        """The coordinator appended to `__consumer_offsets-partition`: long polls on it may complete. Runs
        on every commit: with no long poll completed the shared timer is as it was, so it is left alone."""
        if self.fetch_purgatory.check_and_complete((OFFSETS_TOPIC, partition)):
            self.runtime.rearm_timer()

    # ----------------------------------------------------------------------------------- Produce

    async def handle_produce(self, req: ApiMessage, version: int, access: Access) -> ApiMessage | None:
        acks = req.acks
        results: list[tuple[str, list[tuple[int, Errors, int, int, str | None]]]] = []
        durable: list[tuple[tuple[str, int], asyncio.Future[Appended]]] = []
        replicated: list[tuple[tuple[str, int], Partition, int]] = []  # acks=all: (key, partition, required)
        for t in req.topic_data:
            out: list[tuple[int, Errors, int, int, str | None]] = []
            writable = access.topic("WRITE", t.name)
            for pd in t.partition_data:
                part = self.store.partition(t.name, pd.index)
                if not writable:
                    out.append((pd.index, Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, None))
                elif (refusal := produce_refusal(t.name)) is not None:
                    out.append((pd.index, refusal[0], -1, -1, refusal[1]))
                elif acks not in (0, 1, -1):
                    out.append((pd.index, Errors.INVALID_REQUIRED_ACKS, -1, -1, None))
                elif part is None:
                    out.append((pd.index, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None))
                else:
                    r = self._append(part, _produced_records(pd.records, version), durable, acks)
                    if r.error == Errors.NONE and acks == -1:
                        replicated.append(((t.name, pd.index), part, part.log_end_offset))
                    if r.error != Errors.NONE:
                        log.info("produce_rejected", topic=t.name, partition=pd.index, error=r.error.name,
                                 reason=r.message)
                    out.append((pd.index, r.error, r.base_offset, r.log_start_offset, r.message))
            results.append((t.name, out))
        touched = dict.fromkeys(key for key, _ in durable)
        for key in touched:
            self.fetch_purgatory.check_and_complete(key)
        if touched:
            self.runtime.rearm_timer()
        if acks == 0:
            return None  # Kafka sends no response at all for acks=0; the client expects none
        failed = await self._durable(durable)
        failed.update(await self._replicated([r for r in replicated if r[0] not in failed], req.timeout_ms))
        return ProduceResponse[version](
            throttle_time_ms=0,
            responses=[
                _PTopic(name=name, partition_responses=[
                    _PPart(index=idx, error_code=int(failed.get((name, idx), err)),
                           base_offset=base if (name, idx) not in failed else -1,
                           log_append_time_ms=-1, log_start_offset=start, record_errors=[],
                           error_message=msg if (name, idx) not in failed else _failure_message(failed[(name, idx)]))
                    for idx, err, base, start, msg in parts])
                for name, parts in results
            ],
        )

    def _append(self, part: Partition, records: bytes | MessageFormatError | None,
                durable: list[tuple[tuple[str, int], asyncio.Future[Appended]]], acks: int) -> AppendResult:
        """Check one produce partition and hand its batch to the writer, which writes it at once; the
        future it completes once the batch is durable joins `durable`."""
        refusal, leader_epoch = self.leadership.append_check(part, acks)
        if refusal != Errors.NONE:
            return AppendResult(refusal, message=refusal.message)
        if isinstance(records, MessageFormatError):
            return AppendResult(Errors.CORRUPT_MESSAGE, message=str(records))
        prepared = part.prepare(records, self.store.config.max_message_bytes)
        if isinstance(prepared, AppendResult):
            return prepared
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()

        def done(appended: Appended) -> None:
            if not future.done():  # else the request was cancelled; the batch was written all the same
                future.set_result(appended)

        try:
            base, _ = self.writer.submit(part.target, functools.partial(part.write, prepared, leader_epoch), done)
        except StorageError as e:
            return AppendResult(Errors.KAFKA_STORAGE_ERROR, message=str(e))
        self.leadership.appended(part)
        durable.append(((part.topic, part.index), future))
        return AppendResult(base_offset=base, log_start_offset=part.log_start_offset)

    async def _replicated(self, waits: list[tuple[tuple[str, int], Partition, int]], timeout_ms: int
                          ) -> dict[tuple[str, int], Errors]:
        """acks=all: each partition's DelayedProduce (in the replica manager's "Produce" purgatory) until the
        high watermark covers the append; a duplicate (an idempotent retry) waits for the log end, which
        holds the original. On one node this returns at once."""
        if not waits:
            return {}
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Errors]] = []
        for _key, part, required in waits:
            future: asyncio.Future[Errors] = loop.create_future()
            self.leadership.await_replicated(
                part, required, max(0, timeout_ms),
                lambda error, f=future: f.done() or f.set_result(error))  # type: ignore[misc]
            futures.append(future)
        errors = await asyncio.gather(*futures)
        return {key: error for (key, _p, _r), error in zip(waits, errors, strict=True) if error != Errors.NONE}

    @staticmethod
    async def _durable(durable: list[tuple[tuple[str, int], asyncio.Future[Appended]]]
                       ) -> dict[tuple[str, int], Errors]:
        appended = await asyncio.gather(*(f for _, f in durable))
        return {key: Errors.KAFKA_STORAGE_ERROR for (key, _), a in zip(durable, appended, strict=True)
                if a.error is not None}

    # ------------------------------------------------------------------------------------- Fetch

    async def handle_fetch(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        if version >= 7 and (req.session_id != 0 or req.session_epoch > 0):
            # We never create fetch sessions (we answer session id 0), so any id is unknown; the
            # client falls back to full, session-less fetches.
            return FetchResponse[version](throttle_time_ms=0, error_code=int(Errors.FETCH_SESSION_ID_NOT_FOUND),
                                          session_id=0, responses=[])
        targets = [
            _FetchTarget(self._fetched_topic(t, version), p.partition, p.fetch_offset, p.partition_max_bytes,
                         p.current_leader_epoch if version >= 9 else -1, t.topic_id if version >= 13 else None)
            for t in req.topics for p in t.partitions
        ]
        max_bytes = max(0, req.max_bytes) if version >= 3 else 1 << 31
        denied = {t.topic for t in targets if t.topic is not None and not access.topic("READ", t.topic)}
        response, total, errors = self._read(targets, max_bytes, version, denied)
        if req.max_wait_ms > 0 and total < req.min_bytes and not errors and targets:
            await self._wait_for_data(targets, req.max_wait_ms, req.min_bytes)
            response, _, _ = self._read(targets, max_bytes, version, denied)
        return response

    def _fetched_topic(self, t: ApiMessage, version: int) -> str | None:
        """The name of a fetched topic: v13+ names it by id (KIP-516), which may name no topic here."""
        if version < 13:
            return str(t.topic)
        topic = self.store.get_by_id(t.topic_id)
        return topic.name if topic is not None else None

    async def _wait_for_data(self, targets: list[_FetchTarget], max_wait_ms: int, min_bytes: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def available() -> int | None:
            total = 0
            for t in targets:
                part = self._partition(t.topic, t.index) if t.topic is not None else None
                if part is None or t.offset < part.log_start_offset:
                    return None  # deleted or truncated meanwhile: answer now, with the error
                error, hw, _epoch = self.leadership.read_view(part, t.current_leader_epoch)
                if error != Errors.NONE:
                    return None  # no longer the leader: answer now, with the error
                visible = part.log.bytes_from(t.offset) - part.log.bytes_from(hw) if t.offset < hw else 0
                total += min(visible, max(0, t.max_bytes))
            return total

        op = DelayedFetch(max_wait_ms, min_bytes, available, future)
        keys: list[Hashable] = [(t.topic, t.index) for t in targets]
        self.fetch_purgatory.try_complete_else_watch(op, keys, self.runtime.now_ms())
        self.runtime.rearm_timer()
        try:
            await future
        finally:
            if not op.is_completed:  # the client went away: stop watching for it
                op.force_complete()

    def _read(self, targets: list[_FetchTarget], max_bytes: int, version: int,
              denied: set[str]) -> tuple[ApiMessage, int, bool]:
        remaining = max_bytes
        total = 0
        errors = False
        by_topic: dict[tuple[str | None, uuid.UUID | None], list[object]] = {}
        for t in targets:
            part = self._partition(t.topic, t.index) if t.topic is not None and t.topic not in denied else None
            error, records, hw = Errors.NONE, b"", -1
            if t.topic is None:
                error = Errors.UNKNOWN_TOPIC_ID
            elif t.topic in denied:
                error = Errors.TOPIC_AUTHORIZATION_FAILED
            elif part is None:
                error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif (leader := self.leadership.read_view(part, t.current_leader_epoch))[0] != Errors.NONE:
                error = leader[0]
            elif t.max_bytes < 0:
                error = Errors.INVALID_FETCH_SIZE
            elif not part.log_start_offset <= t.offset <= part.log_end_offset:
                error = Errors.OFFSET_OUT_OF_RANGE
            else:
                # KIP-74: the first partition with data returns at least one whole batch, even past the
                # limits, so a batch larger than the limits can never wedge a consumer. A consumer sees
                # only what is committed: nothing at or past the high watermark.
                hw = leader[1]
                records = part.read(t.offset, min(t.max_bytes, remaining), min_one=total == 0, max_offset=hw)
                records = down_convert(records, fetch_magic(version))  # Fetch v0-3: message format 0 or 1
                remaining -= len(records)
                total += len(records)
            errors = errors or error != Errors.NONE
            by_topic.setdefault((t.topic, t.topic_id), []).append(_FPart(
                partition_index=t.index, error_code=int(error), high_watermark=hw, last_stable_offset=hw,
                log_start_offset=part.log_start_offset if part is not None else -1,
                aborted_transactions=None if version >= 4 else [], preferred_read_replica=-1,
                records=records))
        response = FetchResponse[version](
            throttle_time_ms=0, error_code=0, session_id=0,
            responses=[_FTopic(topic=name, topic_id=topic_id, partitions=parts)
                       for (name, topic_id), parts in by_topic.items()],
        )
        return response, total, errors

    # ------------------------------------------------------------------------------- ListOffsets

    async def handle_list_offsets(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        topics = []
        for t in req.topics:
            parts = []
            describable = access.topic("DESCRIBE", t.name)
            for p in t.partitions:
                current = p.current_leader_epoch if version >= 4 else -1
                error, offset, timestamp, epoch = (
                    self._list_offset(t.name, p.partition_index, p.timestamp, current, req.replica_id)
                    if describable else (Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1))
                parts.append(_LPart(partition_index=p.partition_index, error_code=int(error), timestamp=timestamp,
                                    offset=offset, leader_epoch=epoch,
                                    old_style_offsets=_old_style_offsets(version, p, error, offset)))
            topics.append(_LTopic(name=t.name, partitions=parts))
        return ListOffsetsResponse[version](throttle_time_ms=0, topics=topics)

    def _list_offset(self, topic: str, index: int, timestamp: int, current_leader_epoch: int,
                     replica_id: int) -> tuple[Errors, int, int, int]:
        """(error, offset, timestamp, leader epoch). A consumer's LATEST is the high watermark (no
        transactions here, so the last stable offset is the same); a broker or tool (replica id >= 0 or
        -2) gets the log end, as Kafka's Partition.fetchOffsetForTimestamp answers."""
        part = self._partition(topic, index)
        if part is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
        error, hw, epoch = self.leadership.read_view(part, current_leader_epoch)
        if error != Errors.NONE:
            return error, -1, -1, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return Errors.NONE, part.log_start_offset, -1, epoch
        if timestamp == LATEST_TIMESTAMP:
            return Errors.NONE, hw if replica_id == CONSUMER_REPLICA_ID else part.log_end_offset, -1, epoch
        found = part.offset_for_max_timestamp() if timestamp == MAX_TIMESTAMP else part.offset_for_timestamp(timestamp)
        if found is None or (replica_id == CONSUMER_REPLICA_ID and found[0] >= hw):
            return Errors.NONE, -1, -1, epoch  # no (committed) record at or after that time (Kafka's answer)
        return Errors.NONE, found[0], found[1], epoch

    # ---------------------------------------------------------------------- OffsetForLeaderEpoch

    async def handle_offset_for_leader_epoch(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        topics = []
        for t in req.topics:
            parts = []
            describable = access.topic("DESCRIBE", t.topic)
            for p in t.partitions:
                part = self._partition(t.topic, p.partition)
                if not describable:
                    parts.append(_EPart(error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED), partition=p.partition,
                                        leader_epoch=-1, end_offset=-1))
                elif part is None:
                    parts.append(_EPart(error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION), partition=p.partition,
                                        leader_epoch=-1, end_offset=-1))
                else:
                    error, epoch, end = self.leadership.epoch_end_offset(
                        part, p.current_leader_epoch if version >= 2 else -1, p.leader_epoch)
                    parts.append(_EPart(error_code=int(error), partition=p.partition, leader_epoch=epoch,
                                        end_offset=end))
            topics.append(_ETopic(topic=t.topic, partitions=parts))
        return OffsetForLeaderEpochResponse[version](throttle_time_ms=0, topics=topics)

    # ---------------------------------------------------------------------------- InitProducerId

    async def handle_init_producer_id(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        # Not authorized here (Kafka wants IDEMPOTENT_WRITE on the cluster or WRITE on some topic): an id
        # alone grants nothing, every Produce is still checked for WRITE. See docs/security.md.
        if req.transactional_id is not None:
            # No transaction coordinator here (FindCoordinator(TRANSACTION) says the same): retriable, so
            # kafka-python's init_transactions() keeps retrying until its max_block_ms and then raises.
            return InitProducerIdResponse[version](throttle_time_ms=0, error_code=int(Errors.COORDINATOR_NOT_AVAILABLE),
                                                   producer_id=-1, producer_epoch=-1)
        # Idempotent producers always get a fresh id with epoch 0 (Kafka does the same when the
        # transactional id is null, also for a KIP-360 epoch-bump request).
        if self.admin is not None:
            try:
                # Unique across the cluster: blocks come from ZooKeeper, as Kafka's brokers take them.
                producer_id = await self.admin.next_producer_id()
            except KafkaError as e:
                return InitProducerIdResponse[version](throttle_time_ms=0, error_code=int(e.code),
                                                       producer_id=-1, producer_epoch=-1)
        else:
            producer_id = self.store.next_producer_id()
        return InitProducerIdResponse[version](throttle_time_ms=0, error_code=0, producer_id=producer_id,
                                               producer_epoch=0)

    # ------------------------------------------------------------------------------ topic admin

    async def handle_create_topics(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        counts: dict[str, int] = {}
        for t in req.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results = []
        for t in req.topics:
            topic_id, error, message, partitions = None, Errors.NONE, None, -1
            try:
                if counts[t.name] > 1:
                    raise KafkaError(Errors.INVALID_REQUEST, f"topic '{t.name}' appears more than once")
                if not (access.cluster("CREATE") or access.topic("CREATE", t.name)):
                    raise KafkaError(Errors.TOPIC_AUTHORIZATION_FAILED)
                num_partitions = self._assigned_partitions(t)
                if t.configs:
                    raise KafkaError(Errors.INVALID_CONFIG, "per-topic configs are not supported; "
                                          "the broker-wide flags apply to every topic")
                validate_only = version >= 1 and req.validate_only
                if self.admin is not None:
                    topic, replication_factor = await self.admin.create_topic(
                        t.name, num_partitions, t.replication_factor, validate_only)
                else:
                    topic = self.store.create_topic(t.name, num_partitions, t.replication_factor,
                                                    validate_only=validate_only)
                    replication_factor = 1
                topic_id, partitions = topic.topic_id, topic.partitions
            except KafkaError as e:
                error, message = e.code, e.message
            results.append(CreateTopicsResponse.CreatableTopicResult(
                name=t.name, topic_id=topic_id, error_code=int(error), error_message=message,
                num_partitions=partitions, replication_factor=replication_factor if error == Errors.NONE else -1,
                configs=[] if error == Errors.NONE else None))
        return CreateTopicsResponse[version](throttle_time_ms=0, topics=results)

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


def _old_style_offsets(version: int, p: ApiMessage, error: Errors, offset: int) -> list[int]:
    """ListOffsets v0 answers a list of up to max_num_offsets offsets (Kafka's legacy fetchOffsetsBefore; Burrow
    1.2's cluster module still asks v0): here the one offset v1+ would answer, never a list of segment bases."""
    if version > 0 or error != Errors.NONE or offset < 0 or p.max_num_offsets < 1:
        return []
    return [offset]


def _produced_records(records: bytes | None, version: int) -> bytes | MessageFormatError | None:
    """Produce v0-2 carries a message set of magic 0 or 1: the v2 batch it becomes (or why it cannot)."""
    if version >= 3 or records is None:
        return records
    try:
        return up_convert(records)
    except MessageFormatError as e:
        return e


def _failure_message(error: Errors) -> str:
    if error == Errors.KAFKA_STORAGE_ERROR:
        return "fsync failed"
    return error.message or error.name


def _remove_dirs(dirs: list[object]) -> None:
    for d in dirs:
        shutil.rmtree(str(d), ignore_errors=True)
