"""Per-topic configs: which names a topic may set, how a value is checked, and what DescribeConfigs reports.

Synchronous and without I/O: the topic store keeps a topic's overrides (one node), ZooKeeper keeps them in a
cluster (`/config/topics/<name>`), and the handlers of net/data_plane/ ask this module what to answer.

The names, types, defaults and the broker-level names behind each default are Kafka 4.4's topic configs
(its LogConfig and the broker synonyms of each), so what an admin client sees when it describes a topic
here is what it sees on Kafka. A value is checked as Kafka's ConfigDef checks it (the type, then the
range or the allowed strings) and refused with Kafka's message shape ("Invalid value X for configuration
NAME: ..."). The values are stored and reported; the topic store does not act on them yet (which ones it
does not is stated in docs/architecture.md).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from coordinator_server.config import Config
from protocol.errors import Errors, KafkaError

LONG_MAX = 9_223_372_036_854_775_807
INT_MAX = 2_147_483_647


class ConfigType(IntEnum):
    """DescribeConfigs' ConfigType (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a reported value comes from (DescribeConfigs' ConfigSource)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ResourceType(IntEnum):
    """The config resources of DescribeConfigs and the AlterConfigs APIs."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterOp(IntEnum):
    """IncrementalAlterConfigs' ConfigOperation."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


Check = Callable[[str, str, object], None]  # (name, value as sent, parsed value); raises KafkaError


def _invalid(name: str, value: object, why: str) -> KafkaError:
    return KafkaError(Errors.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {why}")


def at_least(low: int | float) -> Check:
    def check(name: str, raw: str, value: object) -> None:
        if value < low:  # type: ignore[operator]
            raise _invalid(name, value, f"Value must be at least {low}")
    return check


def between(low: int | float, high: int | float) -> Check:
    def check(name: str, raw: str, value: object) -> None:
        if value < low:  # type: ignore[operator]
            raise _invalid(name, value, f"Value must be at least {low}")
        if value > high:  # type: ignore[operator]
            raise _invalid(name, value, f"Value must be no more than {high}")
    return check


def one_of(*allowed: str) -> Check:
    def check(name: str, raw: str, value: object) -> None:
        if value not in allowed:
            raise _invalid(name, value, f"String must be one of: {', '.join(allowed)}")
    return check


def list_of(*allowed: str) -> Check:
    def check(name: str, raw: str, value: object) -> None:
        for item in value:  # type: ignore[attr-defined]
            if item not in allowed:
                raise _invalid(name, item, f"String must be one of: {', '.join(allowed)}")
    return check


def level(low: int, high: int, default: int) -> Check:
    """A compression level: within the codec's range, or the codec's own default."""
    def check(name: str, raw: str, value: object) -> None:
        if value != default and not low <= value <= high:  # type: ignore[operator]
            raise _invalid(name, value, f"Value must be between {low} and {high} or equal to {default}")
    return check


_REPLICAS = re.compile(r"\s*(\*|\d+:\d+(\s*,\s*\d+:\d+)*)?\s*")


def throttled_replicas(name: str, raw: str, value: object) -> None:
    if not _REPLICAS.fullmatch(raw):
        # Kafka shows the parsed list here, as Java prints one.
        shown = "[" + ", ".join(value) + "]"  # type: ignore[arg-type]
        raise _invalid(name, shown, f"{name} must be the literal '*' or a list of replicas in the following "
                                    "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: str | None  # as DescribeConfigs renders it
    check: Check | None
    # The broker's names for the default, with the default each is listed with among the synonyms (None: not
    # listed, as Kafka lists none for the names that count hours or minutes and their millisecond twins).
    synonyms: tuple[tuple[str, str | None], ...]
    doc: str


def _d(name: str, type_: ConfigType, default: str | None, check: Check | None,
       synonyms: tuple[tuple[str, str | None], ...], doc: str) -> TopicConfigDef:
    return TopicConfigDef(name, type_, default, check, synonyms, doc)


_L, _I, _S, _B, _D, _LIST = ConfigType.LONG, ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN, \
    ConfigType.DOUBLE, ConfigType.LIST
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# Kafka 4.4's topic configs, by name (errors.deadletterqueue.group.enable is share groups', KIP-932). The docs are ours: one line on what each governs.
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    _d("cleanup.policy", _LIST, "delete", list_of("compact", "delete"), (("log.cleanup.policy", "delete"),),
       "delete: old segments go by retention; compact: the latest record of each key is kept."),
    _d("compression.gzip.level", _I, "-1", level(1, 9, -1), (("compression.gzip.level", "-1"),),
       "The gzip level when compression.type is gzip."),
    _d("compression.lz4.level", _I, "9", between(1, 17), (("compression.lz4.level", "9"),),
       "The lz4 level when compression.type is lz4."),
    _d("compression.type", _S, "producer", one_of(*_COMPRESSION), (("compression.type", "producer"),),
       "The codec batches are stored with; producer keeps the producer's."),
    _d("compression.zstd.level", _I, "3", between(-131072, 22), (("compression.zstd.level", "3"),),
       "The zstd level when compression.type is zstd."),
    _d("delete.retention.ms", _L, "86400000", at_least(0), (("log.cleaner.delete.retention.ms", "86400000"),),
       "How long compaction keeps a tombstone."),
    _d("file.delete.delay.ms", _L, "60000", at_least(0), (("log.segment.delete.delay.ms", "60000"),),
       "How long a deleted segment's file waits before it is removed."),
    _d("flush.messages", _L, str(LONG_MAX), at_least(1), (("log.flush.interval.messages", str(LONG_MAX)),),
       "Force an fsync after this many messages."),
    _d("flush.ms", _L, str(LONG_MAX), at_least(0),
       (("log.flush.interval.ms", None), ("log.flush.scheduler.interval.ms", None)),
       "Force an fsync after this long."),
    _d("errors.deadletterqueue.group.enable", _B, "false", None, (),
       "Share groups: whether a group may use this topic as its dead-letter queue."),
    _d("follower.replication.throttled.replicas", _LIST, "", throttled_replicas, (),
       "The replicas whose follower side is throttled."),
    _d("index.interval.bytes", _I, "4096", at_least(0), (("log.index.interval.bytes", "4096"),),
       "How many bytes between two offset index entries."),
    _d("leader.replication.throttled.replicas", _LIST, "", throttled_replicas, (),
       "The replicas whose leader side is throttled."),
    _d("local.retention.bytes", _L, "-2", at_least(-2), (("log.local.retention.bytes", "-2"),),
       "Tiered storage: the bytes kept locally (-2: retention.bytes)."),
    _d("local.retention.ms", _L, "-2", at_least(-2), (("log.local.retention.ms", "-2"),),
       "Tiered storage: how long data stays local (-2: retention.ms)."),
    _d("max.compaction.lag.ms", _L, str(LONG_MAX), at_least(1),
       (("log.cleaner.max.compaction.lag.ms", str(LONG_MAX)),),
       "The longest a record may stay uncompacted."),
    _d("max.decompressed.message.bytes", _I, "2147483639", at_least(0),
       (("max.decompressed.message.bytes", "2147483639"),),
       "The largest a batch may be once decompressed."),
    _d("max.message.bytes", _I, "1048588", at_least(0), (("message.max.bytes", "1048588"),),
       "The largest record batch the topic accepts."),
    _d("message.timestamp.after.max.ms", _L, "3600000", at_least(0),
       (("log.message.timestamp.after.max.ms", "3600000"),),
       "How far ahead of the broker's clock a CreateTime timestamp may be."),
    _d("message.timestamp.before.max.ms", _L, str(LONG_MAX), at_least(0),
       (("log.message.timestamp.before.max.ms", str(LONG_MAX)),),
       "How far behind the broker's clock a CreateTime timestamp may be."),
    _d("message.timestamp.type", _S, "CreateTime", one_of("CreateTime", "LogAppendTime"),
       (("log.message.timestamp.type", "CreateTime"),),
       "Whether a record keeps its producer's timestamp or gets the broker's."),
    _d("min.cleanable.dirty.ratio", _D, "0.5", between(0, 1), (("log.cleaner.min.cleanable.ratio", "0.5"),),
       "The dirty share of the log that makes it worth compacting."),
    _d("min.compaction.lag.ms", _L, "0", at_least(0), (("log.cleaner.min.compaction.lag.ms", "0"),),
       "The least time a record stays uncompacted."),
    _d("min.insync.replicas", _I, "1", at_least(1), (("min.insync.replicas", "1"),),
       "The in-sync replicas an acks=all produce needs."),
    _d("preallocate", _B, "false", None, (("log.preallocate", "false"),),
       "Whether a new segment's file is allocated in full at once."),
    _d("remote.copy.lag.bytes", _L, "-1", at_least(-1), (("log.remote.copy.lag.bytes", "-1"),),
       "Tiered storage: the bytes a segment waits behind before it is copied."),
    _d("remote.copy.lag.ms", _L, "0", at_least(-1), (("log.remote.copy.lag.ms", "0"),),
       "Tiered storage: how long a segment waits before it is copied."),
    _d("remote.log.copy.disable", _B, "false", None, (),
       "Tiered storage: stop copying segments to remote storage."),
    _d("remote.log.delete.on.disable", _B, "false", None, (),
       "Tiered storage: delete the remote data when it is turned off."),
    _d("remote.storage.enable", _B, "false", None, (),
       "Tiered storage for the topic."),
    _d("retention.bytes", _L, "-1", None, (("log.retention.bytes", "-1"),),
       "The bytes a partition keeps before old segments go (-1: no limit)."),
    _d("retention.ms", _L, "604800000", at_least(-1),
       (("log.retention.ms", None), ("log.retention.minutes", None), ("log.retention.hours", None)),
       "How long a segment is kept (-1: forever)."),
    _d("segment.bytes", _I, "1073741824", at_least(1048576), (("log.segment.bytes", "1073741824"),),
       "The size at which a segment is rolled."),
    _d("segment.index.bytes", _I, "10485760", at_least(4), (("log.index.size.max.bytes", "10485760"),),
       "The largest offset index of a segment."),
    _d("segment.jitter.ms", _L, "0", at_least(0), (("log.roll.jitter.ms", None), ("log.roll.jitter.hours", None)),
       "A random amount taken off segment.ms, so segments do not all roll at once."),
    _d("segment.ms", _L, "604800000", at_least(1), (("log.roll.ms", None), ("log.roll.hours", None)),
       "The age at which a segment is rolled."),
    _d("unclean.leader.election.enable", _B, "false", None, (("unclean.leader.election.enable", "false"),),
       "Whether a replica out of the ISR may become leader, losing data."),
)}

# What the topic store and the cluster act on now; every other config is stored and reported only.
HONOURED: frozenset[str] = frozenset()


# ------------------------------------------------------------------------------------------------ parsing

_INTEGER = re.compile(r"[+-]?\d+")
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?))[fFdD]?")


def parse(d: TopicConfigDef, raw: str) -> object:
    """The value as Kafka's ConfigDef parses it (whitespace around it ignored), or INVALID_CONFIG."""
    text = raw.strip()
    if d.type is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _invalid(d.name, text, "Expected value to be either true or false")
        return text.lower() == "true"
    if d.type in (ConfigType.INT, ConfigType.LONG):
        bound = INT_MAX if d.type is ConfigType.INT else LONG_MAX
        if not _INTEGER.fullmatch(text) or not -bound - 1 <= int(text) <= bound:
            raise _invalid(d.name, text, f"Not a number of type {d.type.name}")
        return int(text)
    if d.type is ConfigType.DOUBLE:
        if not _DOUBLE.fullmatch(text):
            raise _invalid(d.name, text, "Not a number of type DOUBLE")
        return float(text.rstrip("fFdD"))
    if d.type is ConfigType.LIST:
        return [] if not text else [item.strip() for item in text.split(",")]
    return text


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """A topic's overrides checked whole: every name known, every value valid, and the pairs that must agree
    agreeing. Returns them as stored."""
    parsed: dict[str, object] = {}
    for name, raw in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise KafkaError(Errors.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if raw is None:
            raise KafkaError(Errors.INVALID_CONFIG, f"Null value not supported for topic configs: {name}")
        value = parse(d, raw)
        if d.check is not None:
            d.check(name, raw, value)
        parsed[name] = value
    low = parsed.get("min.compaction.lag.ms", 0)
    high = parsed.get("max.compaction.lag.ms", LONG_MAX)
    if low > high:  # type: ignore[operator]
        raise KafkaError(Errors.INVALID_CONFIG, f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                                                f"max.compaction.lag.ms ({high})")
    if parsed.get("remote.storage.enable") is True:
        raise KafkaError(Errors.INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. "
                                                "Topic cannot be configured with remote log storage.")
    return {name: str(raw) for name, raw in configs.items()}


# ----------------------------------------------------------------------------------------------- altering


def incremental(current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """IncrementalAlterConfigs on a topic's overrides: each (name, operation, value) in order; the result is
    then checked whole by `validate`."""
    out = dict(current)
    for name, op, value in ops:
        d = TOPIC_CONFIGS.get(name)
        if op == AlterOp.SET:
            if value is None:
                raise KafkaError(Errors.INVALID_REQUEST, f"Null value not supported for : {name}")
            out[name] = value  # an unknown name is refused by `validate`, as Kafka refuses it
        elif op == AlterOp.DELETE:
            out.pop(name, None)  # deleting what is not set (or no config at all) changes nothing, in Kafka too
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            if d is None or d.type is not ConfigType.LIST:
                raise KafkaError(Errors.INVALID_CONFIG,
                                 f"Can't {AlterOp(op).name} to key {name} because its type is not LIST.")
            now = parse(d, out.get(name, effective_default(d, {})[0] or ""))
            given = parse(d, value or "")
            assert isinstance(now, list) and isinstance(given, list)
            if op == AlterOp.APPEND:
                items = now + [v for v in given if v not in now]
            else:
                items = [v for v in now if v not in given]
            out[name] = ",".join(items)
        else:
            raise KafkaError(Errors.INVALID_REQUEST, f"Unknown alter configs operation type {op}")
    return out


# ----------------------------------------------------------------------------------------------- describing


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    type: ConfigType
    doc: str
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[Synonym, ...] = field(default=())


def effective_default(d: TopicConfigDef, broker: Mapping[str, str]) -> tuple[str | None, ConfigSource]:
    """A topic's value when it sets none: the broker's setting of one of its names, else Kafka's default."""
    for name, _default in d.synonyms:
        if name in broker:
            return broker[name], ConfigSource.STATIC_BROKER_CONFIG
    return d.default, ConfigSource.DEFAULT_CONFIG


def _synonyms(d: TopicConfigDef, overrides: Mapping[str, str], broker: Mapping[str, str]) -> tuple[Synonym, ...]:
    out = [Synonym(d.name, overrides[d.name], ConfigSource.DYNAMIC_TOPIC_CONFIG)] if d.name in overrides else []
    for name, default in d.synonyms:
        if name in broker:
            out.append(Synonym(name, broker[name], ConfigSource.STATIC_BROKER_CONFIG))
        if default is not None:
            out.append(Synonym(name, default, ConfigSource.DEFAULT_CONFIG))
    return tuple(out)


def describe_topic(overrides: Mapping[str, str], broker: Mapping[str, str], keys: Iterable[str] | None = None,
                   synonyms: bool = False) -> list[ConfigEntry]:
    """A topic's configs as DescribeConfigs reports them, by name; `keys` None for all of them (a name that is
    no topic config is left out, as Kafka does)."""
    names = sorted(TOPIC_CONFIGS) if keys is None else [k for k in keys if k in TOPIC_CONFIGS]
    out = []
    for name in names:
        d = TOPIC_CONFIGS[name]
        value: str | None
        if name in overrides:
            value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
        else:
            value, source = effective_default(d, broker)
        out.append(ConfigEntry(name, value, source, d.type, d.doc,
                               synonyms=_synonyms(d, overrides, broker) if synonyms else ()))
    return out


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    type: ConfigType
    default: str | None
    doc: str


# The broker's own defaults of the names its topic entries list no default for.
_BROKER_DEFAULTS = {"log.retention.hours": "168", "log.roll.hours": "168", "log.roll.jitter.hours": "0",
                    "log.flush.scheduler.interval.ms": str(LONG_MAX)}


def _broker_table() -> dict[str, BrokerConfigDef]:
    """The broker-level names behind the topic defaults (an hour or minute count is an INT where the topic's
    own config is a LONG of milliseconds), and the defaults of new topics."""
    table: dict[str, BrokerConfigDef] = {}
    for d in TOPIC_CONFIGS.values():
        for name, default in d.synonyms:
            type_ = ConfigType.INT if name.endswith((".hours", ".minutes")) else d.type
            table[name] = BrokerConfigDef(name, type_, _BROKER_DEFAULTS.get(name, default),
                                          f"The broker's default of {d.name}.")
    for name, type_, default, doc in (
        ("auto.create.topics.enable", _B, "true", "Whether Metadata creates a topic it is asked for."),
        ("default.replication.factor", _I, "1", "The replication factor of a topic created without one."),
        ("num.partitions", _I, "1", "The partition count of a topic created without one."),
        ("node.id", _I, None, "This broker's id."),
    ):
        table[name] = BrokerConfigDef(name, type_, default, doc)
    return dict(sorted(table.items()))


BROKER_CONFIGS: dict[str, BrokerConfigDef] = _broker_table()


def describe_broker(broker: Mapping[str, str], keys: Iterable[str] | None = None,
                    synonyms: bool = False) -> list[ConfigEntry]:
    """This broker's settings as DescribeConfigs reports them: the ones its flags set are static broker
    configs, the others Kafka's defaults; none can be altered while it runs (read-only)."""
    names = list(BROKER_CONFIGS) if keys is None else [k for k in keys if k in BROKER_CONFIGS]
    out = []
    for name in names:
        d = BROKER_CONFIGS[name]
        syn: list[Synonym] = []
        value: str | None
        if name in broker:
            value, source = broker[name], ConfigSource.STATIC_BROKER_CONFIG
            syn.append(Synonym(name, value, source))
        else:
            value, source = d.default, ConfigSource.DEFAULT_CONFIG
        if d.default is not None:
            syn.append(Synonym(name, d.default, ConfigSource.DEFAULT_CONFIG))
        out.append(ConfigEntry(name, value, source, d.type, d.doc, read_only=True,
                               synonyms=tuple(syn) if synonyms else ()))
    return out


# How the coordinator writes `__consumer_offsets`: compacted, batches kept as written, 100 MiB segments
# (offsets.topic.segment.bytes).
OFFSETS_TOPIC_CONFIGS: dict[str, str] = {"cleanup.policy": "compact", "compression.type": "producer",
                                         "segment.bytes": "104857600"}


def broker_settings(config: Config) -> dict[str, str]:
    """The broker-level settings this node's flags set, by Kafka's names: the static broker configs of a
    DescribeConfigs answer. A flag left at Kafka's default is reported as the default, as a Kafka broker
    reports a setting its server.properties does not name."""
    values: dict[str, object] = {
        "num.partitions": config.default_partitions,
        "log.retention.ms": config.retention_ms,
        "log.retention.bytes": config.retention_bytes,
        "log.segment.bytes": config.segment_bytes,
        "message.max.bytes": config.max_message_bytes,
        "min.insync.replicas": config.min_insync_replicas,
        "default.replication.factor": config.default_replication_factor,
        "unclean.leader.election.enable": config.unclean_leader_election_enable,
        "auto.create.topics.enable": config.auto_create_topics,
        "log.cleaner.delete.retention.ms": config.delete_retention_ms,
        "log.cleaner.min.cleanable.ratio": config.log_cleaner_min_cleanable_ratio,
    }
    kafka_defaults: dict[str, object] = {
        "num.partitions": 1, "log.retention.ms": 604_800_000, "log.retention.bytes": -1,
        "log.segment.bytes": 1_073_741_824, "message.max.bytes": 1_048_588, "min.insync.replicas": 1,
        "default.replication.factor": 1, "unclean.leader.election.enable": False,
        "auto.create.topics.enable": True, "log.cleaner.delete.retention.ms": 86_400_000,
        "log.cleaner.min.cleanable.ratio": 0.5,
    }
    out = {name: _render(v) for name, v in values.items() if v != kafka_defaults[name]}
    out["node.id"] = str(config.node_id)
    return out


def _render(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
