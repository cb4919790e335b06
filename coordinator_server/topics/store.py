"""The embedded topic store: topics of N partitions, each a segment log under `<data_dir>/<topic>-<p>/`.

Theory of operation
-------------------
Kafka's on-disk layout: every partition directory holds `%020d.log` segments of v2 record batches and a
`partition.metadata` file (`version: 0` / `topic_id: <base64 uuid>`), so topics, their ids and their
partition counts are rediscovered from the directory listing on start, with no catalogue file to keep
in step. A topic's configs (the ones it sets; `topics.configs`) are `topic-configs.json` in its partition 0
directory, written before that directory's `partition.metadata` when the topic is created, so a crash
leaves either the whole topic or none of it, and replaced atomically when they are altered.
`producer-ids.properties` holds the start of the next block of producer ids: a block of 1000 is reserved
(written and fsynced) before any id of it is handed out, as Kafka's controller does, so an id is never
handed out twice across restarts.

Deleting a topic renames its partition directories to `<topic>-<p>.<hex>-delete` (atomic, like Kafka)
and then removes them; leftovers of a crash between the two are removed on the next start.

Everything here is synchronous and takes time as a parameter; the asyncio parts (group-commit fsync,
long-poll fetch) live in `storage.group_commit` and the network handlers.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from coordinator_server.config import TopicSpec
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.log import FileIO
from coordinator_server.storage.segment import fsync_dir, write_atomically
from coordinator_server.topics.configs import validate as validate_configs
from coordinator_server.topics.partition import Partition
from coordinator_server.topics.registry import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    Topic,
    is_valid_topic_name,
)
from protocol.errors import Errors, KafkaError
from protocol.kafka_uuid import kafka_uuid_string, parse_kafka_uuid, random_kafka_uuid

log = structlog.get_logger(__name__)

PARTITION_METADATA = "partition.metadata"
TOPIC_CONFIG_FILE = "topic-configs.json"
PRODUCER_ID_FILE = "producer-ids.properties"
PRODUCER_ID_BLOCK = 1000
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_MAX_PARTITIONS = 100_000
# Stable across restarts (clients cache topic ids); the coordinator's log keeps no partition.metadata.
OFFSETS_TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, "coordinator-server:__consumer_offsets")  # a sanity bound on one request's partition count, not a Kafka config


@dataclass(frozen=True)
class StoreConfig:
    data_dir: Path
    default_partitions: int = 1
    segment_bytes: int = 1_073_741_824
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    max_message_bytes: int = 1_048_588
    file_io: FileIO | None = None


@dataclass
class StoredTopic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Partition] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)  # the topic's own settings, as set

    def view(self) -> Topic:
        return Topic(self.name, len(self.partitions), self.topic_id)


class TopicStore:
    def __init__(self, config: StoreConfig, offsets_partitions: int) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir)
        # Metadata lists __consumer_offsets as an internal topic (its logs belong to the coordinator).
        self._offsets_topic = Topic(OFFSETS_TOPIC, offsets_partitions, OFFSETS_TOPIC_ID, is_internal=True)
        self._topics: dict[str, StoredTopic] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0  # exclusive end of the reserved block
        # Moves whenever a topic is created or deleted or gets partitions: consumer groups (KIP-848) compare
        # it to see that their subscribed topics changed.
        self.version = 0

    # ------------------------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, config: StoreConfig, offsets_partitions: int, initial: Iterable[TopicSpec] = ()) -> TopicStore:
        """Rediscover every topic (running recovery of each partition), then create `initial` ones
        that are missing. Raises StorageError / CorruptLogError when the directory is unusable."""
        store = cls(config, offsets_partitions)
        store.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            store._load()
            for spec in initial:
                if store.get(spec.name) is None:
                    store.create_topic(spec.name, spec.partitions)
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        for t in self._topics.values():
            for p in t.partitions:
                p.close()

    def _load(self) -> None:
        found: dict[str, dict[int, Path]] = {}
        for d in sorted(self.data_dir.iterdir()):
            if not d.is_dir():
                continue
            if d.name.endswith("-delete"):
                log.info("deleted_topic_directory_removed", dir=str(d))
                shutil.rmtree(d, ignore_errors=True)
                continue
            m = _PARTITION_DIR.match(d.name)
            if m is None or not (d / PARTITION_METADATA).exists():
                continue  # __consumer_offsets-N (no partition.metadata) and foreign directories
            found.setdefault(m.group(1), {})[int(m.group(2))] = d
        for name, dirs in sorted(found.items()):
            if sorted(dirs) != list(range(len(dirs))):
                raise StorageError(f"topic {name} has partition directories {sorted(dirs)} in {self.data_dir}; "
                                   f"expected 0-{len(dirs) - 1} with no gap")
            ids = {p: _read_partition_metadata(d) for p, d in dirs.items()}
            if len(set(ids.values())) != 1:
                raise StorageError(f"partitions of topic {name} disagree on the topic id: {ids}")
            topic = StoredTopic(name, ids[0], configs=_read_topic_configs(dirs[0]))
            for p in range(len(dirs)):
                topic.partitions.append(Partition.open(name, p, dirs[p], self.config.segment_bytes,
                                                       self.config.file_io))
            self._topics[name] = topic
            log.info("topic_loaded", topic=name, partitions=len(dirs),
                     log_end_offsets=[p.log_end_offset for p in topic.partitions])
        self._load_producer_ids()

    # ---------------------------------------------------------------------------------- lookups

    def get(self, name: str) -> Topic | None:
        if name == OFFSETS_TOPIC:
            return self._offsets_topic
        t = self._topics.get(name)
        return t.view() if t is not None else None

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        if topic_id == self._offsets_topic.topic_id:
            return self._offsets_topic
        for t in self._topics.values():
            if t.topic_id == topic_id:
                return t.view()
        return None

    def topic_names(self) -> list[str]:
        """The topics clients can consume (not __consumer_offsets)."""
        return list(self._topics)

    def all(self) -> list[Topic]:
        return [self._offsets_topic, *(t.view() for t in self._topics.values())]

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self._topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    def partitions(self) -> list[Partition]:
        return [p for t in self._topics.values() for p in t.partitions]

    # ---------------------------------------------------------------------------- admin changes

    def get_or_create(self, name: str) -> Topic:
        """Metadata auto-creation with num.partitions; the caller has checked the name."""
        existing = self.get(name)
        return existing if existing is not None else self.create_topic(name, self.config.default_partitions)

    def ensure_topic(self, name: str, topic_id: uuid.UUID, partitions: int) -> list[Path]:
        """A cluster's topic here (docs/cluster.md): created with the cluster's topic id, grown to its
        partition count; a local copy with another id (deleted and created again while this node was away)
        is replaced. Returns directories renamed away, for the caller to remove off the loop."""
        doomed: list[Path] = []
        existing = self._topics.get(name)
        if existing is not None and existing.topic_id != topic_id:
            _, doomed = self.delete_topic(name)
            existing = None
        if existing is None:
            topic = StoredTopic(name, topic_id)
            self._topics[name] = topic
            self._add_partitions(topic, partitions)
            log.info("topic_created", topic=name, partitions=partitions, topic_id=kafka_uuid_string(topic_id))
        elif len(existing.partitions) < partitions:
            was = len(existing.partitions)
            self._add_partitions(existing, partitions)
            log.info("partitions_created", topic=name, partitions=partitions, was=was)
        return doomed

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     validate_only: bool = False, configs: Mapping[str, str | None] | None = None) -> Topic:
        """`configs` are the topic's own settings, checked (`topics.configs.validate`) after the name, the
        partition count and the replication factor, in Kafka's order."""
        if not is_valid_topic_name(name):
            raise KafkaError(Errors.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is not valid")
        if self.get(name) is not None:
            raise KafkaError(Errors.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        if name == TRANSACTION_STATE_TOPIC:
            # Its partition directories are the transaction coordinator's log (txn_runtime), not a topic's.
            raise KafkaError(Errors.INVALID_REQUEST, f"topic '{name}' is the transaction coordinator's log")
        count = self.config.default_partitions if num_partitions == -1 else num_partitions
        if not 1 <= count <= _MAX_PARTITIONS:
            raise KafkaError(Errors.INVALID_PARTITIONS, f"number of partitions {num_partitions} "
                                  "must be at least 1")
        if replication_factor not in (-1, 1):
            raise KafkaError(Errors.INVALID_REPLICATION_FACTOR, f"replication factor "
                                  f"{replication_factor} is larger than the 1 available broker")
        topic = StoredTopic(name, random_kafka_uuid(), configs=validate_configs(configs or {}))
        if validate_only:
            return Topic(name, count, topic.topic_id)
        self._topics[name] = topic
        self._add_partitions(topic, count)
        log.info("topic_created", topic=name, partitions=count, topic_id=kafka_uuid_string(topic.topic_id))
        return topic.view()

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self._topics.get(name)
        if topic is None:
            code = Errors.INVALID_REQUEST if name == OFFSETS_TOPIC else Errors.UNKNOWN_TOPIC_OR_PARTITION
            raise KafkaError(code, f"topic '{name}' does not exist" if name != OFFSETS_TOPIC else
                                  "the partition count of __consumer_offsets is fixed")
        current = len(topic.partitions)
        if count <= current or count > _MAX_PARTITIONS:
            raise KafkaError(Errors.INVALID_PARTITIONS, f"topic currently has {current} partitions, "
                                  f"{count} would not be an increase")
        if not validate_only:
            self._add_partitions(topic, count)
            log.info("partitions_created", topic=name, partitions=count, was=current)

    def delete_topic(self, name: str) -> tuple[list[Partition], list[Path]]:
        """Forget the topic and rename its directories away; returns its (closed) partitions and the
        renamed directories, for the caller to remove off the event loop."""
        topic = self._topics.pop(name, None)
        if topic is None:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        self.version += 1
        doomed = []
        for p in topic.partitions:
            p.close()
            target = self.data_dir / f"{p.log.directory.name}.{uuid.uuid4().hex}-delete"
            os.rename(p.log.directory, target)
            doomed.append(target)
        fsync_dir(self.data_dir)
        log.info("topic_deleted", topic=name, partitions=len(topic.partitions))
        return topic.partitions, doomed

    def topic_configs(self, name: str) -> dict[str, str] | None:
        """The configs the topic sets (None: no such topic; `__consumer_offsets` sets none here)."""
        if name == OFFSETS_TOPIC:
            return {}
        t = self._topics.get(name)
        return dict(t.configs) if t is not None else None

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's configs (checked already), durably before returning."""
        t = self._topics.get(name)
        if t is None:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        _write_topic_configs(t.partitions[0].log.directory, configs)
        t.configs = dict(configs)
        log.info("topic_configs_altered", topic=name, configs=configs)

    def _add_partitions(self, topic: StoredTopic, count: int) -> None:
        self.version += 1
        for p in range(len(topic.partitions), count):
            pdir = self.data_dir / f"{topic.name}-{p}"
            pdir.mkdir(exist_ok=True)
            if p == 0 and topic.configs:
                _write_topic_configs(pdir, topic.configs)
            elif p == 0:  # a file left by a topic of this name whose creation a crash cut short
                (pdir / TOPIC_CONFIG_FILE).unlink(missing_ok=True)
            write_atomically(pdir / PARTITION_METADATA,
                              f"version: 0\ntopic_id: {kafka_uuid_string(topic.topic_id)}\n")
            part = Partition.open(topic.name, p, pdir, self.config.segment_bytes, self.config.file_io)
            part.log.sync()  # the new segment file and the directory entries
            topic.partitions.append(part)
        fsync_dir(self.data_dir)

    # ----------------------------------------------------------------------------- producer ids

    def next_producer_id(self) -> int:
        """A producer id never handed out before, by this or an earlier run of this data directory."""
        if self._next_producer_id >= self._producer_id_limit:
            start = self._producer_id_limit
            write_atomically(self.data_dir / PRODUCER_ID_FILE,
                              f"# next block of producer ids starts here\nnext_block_start={start + PRODUCER_ID_BLOCK}\n")
            self._next_producer_id, self._producer_id_limit = start, start + PRODUCER_ID_BLOCK
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    def _load_producer_ids(self) -> None:
        path = self.data_dir / PRODUCER_ID_FILE
        start = 0
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() == "next_block_start":
                    start = int(value.strip())
        # Ids seen in the logs count too, in case the file was lost: never reuse one.
        seen = max((pid for p in self.partitions() for pid in p.producers.producer_ids()), default=-1)
        start = max(start, seen + 1)
        self._next_producer_id = self._producer_id_limit = start

    # -------------------------------------------------------------------------------- retention

    def apply_retention(self, now_wall_ms: int) -> int:
        """Delete whole segments older than retention.ms or beyond retention.bytes (never the active
        one), oldest first; returns how many were deleted."""
        total = 0
        for part in self.partitions():
            if part.failed is not None:
                continue
            stats = part.log.segment_stats()[:-1]  # the active segment is never deleted
            n = 0
            if self.config.retention_ms >= 0:
                while n < len(stats) and now_wall_ms - stats[n][2] > self.config.retention_ms:
                    n += 1
            if self.config.retention_bytes >= 0:
                diff = part.log.size_bytes - self.config.retention_bytes
                m = 0
                while m < len(stats) and diff - stats[m][1] >= 0:
                    diff -= stats[m][1]
                    m += 1
                n = max(n, m)
            if n:
                deleted = part.log.delete_oldest_segments(n)
                total += deleted
                log.info("retention_deleted_segments", topic=part.topic, partition=part.index, segments=deleted,
                         log_start_offset=part.log_start_offset)
        return total


def _write_topic_configs(pdir: Path, configs: dict[str, str]) -> None:
    # The shape of Kafka's /config/topics/<name> znode, so one node and a cluster keep the same document.
    write_atomically(pdir / TOPIC_CONFIG_FILE, json.dumps({"version": 1, "config": configs}, sort_keys=True) + "\n")


def _read_topic_configs(pdir: Path) -> dict[str, str]:
    path = pdir / TOPIC_CONFIG_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (ValueError, UnicodeDecodeError) as e:
        raise StorageError(f"{path} is not a topic config document: {e}") from e
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        raise StorageError(f"{path} is not a topic config document (version 1, a config of strings)")
    return dict(config)


def _read_partition_metadata(pdir: Path) -> uuid.UUID:
    path = pdir / PARTITION_METADATA
    fields = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise StorageError(f"{path} is not a version 0 partition.metadata file with a topic_id")
    try:
        return parse_kafka_uuid(fields["topic_id"])
    except ValueError as e:
        raise StorageError(f"{path}: topic_id {fields['topic_id']!r} is not a Kafka uuid") from e
