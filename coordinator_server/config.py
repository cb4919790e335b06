"""One typed settings object. Precedence: command-line flag > COORDINATOR_* environment variable >
`--config` TOML file > default.

Defaults equal Apache Kafka's broker defaults (GroupCoordinatorConfig, SocketServerConfigs). Every setting
is declared once, in `_OPTIONS`; the flag, the environment variable and the TOML key (the attribute name,
`topic` for `--topic`) all come from that one row, so a new flag is configurable all three ways at once.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coordinator_server.group.consumer.settings import MIGRATION_POLICIES
from coordinator_server.security.listeners import parse_listeners
from coordinator_server.security.sasl import parse_mechanisms

INT32_MAX = 2_147_483_647


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int


@dataclass(frozen=True)
class FsyncPolicy:
    """`always` fsyncs before acknowledging; `interval:MS` at most every MS; `never` leaves it to the OS."""

    mode: str  # "always" | "interval" | "never"
    interval_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> FsyncPolicy:
        text = text.strip().lower()
        if text in ("always", "never"):
            return cls(text)
        if text.startswith("interval:"):
            ms = int(text.split(":", 1)[1])
            if ms <= 0:
                raise ValueError("fsync interval must be positive")
            return cls("interval", ms)
        raise ValueError(f"invalid fsync policy {text!r}: use always, interval:MS or never")

    def __str__(self) -> str:
        return f"interval:{self.interval_ms}" if self.mode == "interval" else self.mode


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    node_id: int = 0
    data_dir: str = "./data"
    offsets_partitions: int = 50
    # The transaction coordinator (one node only; docs/transactions.md).
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms (7 days)
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    group_max_size: int = INT32_MAX
    # KIP-848 consumer groups (group.consumer.*): the coordinator's own liveness settings.
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_max_size: int = INT32_MAX
    group_consumer_assignors: str = "uniform,range"
    group_consumer_migration_policy: str = "bidirectional"
    group_max_pending_members: int = 10_000  # (none in Kafka) KIP-394 pending members per group
    topics: tuple[TopicSpec, ...] = ()
    log_format: str = "console"
    log_level: str = "info"
    fsync: FsyncPolicy = field(default_factory=lambda: FsyncPolicy("always"))
    fsync_method: str = "auto"  # how a round over many partitions reaches the disk (storage/syncfs.py)
    socket_request_max_bytes: int = 104_857_600
    max_connections: int = INT32_MAX  # max.connections
    max_connections_per_ip: int = INT32_MAX  # max.connections.per.ip
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms
    max_unsent_response_bytes: int = 65_536  # (none in Kafka) net/connection_policy.py
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 10080
    metrics_port: int | None = None  # no metrics endpoint unless asked for
    delete_retention_ms: int = 86_400_000
    log_roll_ms: int = 604_800_000
    log_cleaner_enable: bool = True
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_backoff_ms: int = 15_000
    cluster_id: str = "coordinator-server-cluster"
    # The topic store (data plane); defaults are Kafka's broker defaults.
    auto_create_topics: bool = True  # auto.create.topics.enable
    default_partitions: int = 1  # num.partitions
    retention_ms: int = 604_800_000  # log.retention.ms (-1: keep forever)
    retention_bytes: int = -1  # log.retention.bytes (-1: unlimited)
    segment_bytes: int = 1_073_741_824  # log.segment.bytes
    max_message_bytes: int = 1_048_588  # message.max.bytes
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    # Security (docs/security.md). No --listeners: one PLAINTEXT listener on --host/--port.
    listeners: str | None = None  # listeners, e.g. "PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9094"
    tls_cert: str | None = None  # PEM certificate chain of the SSL / SASL_SSL listeners
    tls_key: str | None = None  # its PEM private key
    tls_ca: str | None = None  # PEM CA file: client certificates are required and verified
    sasl_users_file: str | None = None
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    connections_failed_authentication_delay_ms: int = 100  # connections.failed.authentication.delay.ms
    failed_authentication_max_delay_ms: int = 10_000  # the throttle's ceiling (security/auth_throttle.py)
    failed_authentication_max_tracked: int = 10_000  # (address, user) keys the throttle remembers
    acl_file: str | None = None  # ACLs are enforced iff this is set
    super_users: str | None = None  # super.users, "User:admin;User:ops"
    allow_everyone_if_no_acl_found: bool = False  # allow.everyone.if.no.acl.found
    # The cluster (docs/cluster.md). Without --zookeeper-connect the node is a cluster of one, as before.
    zookeeper_connect: str | None = None  # zookeeper.connect: HOST:PORT[,HOST:PORT...][/chroot]
    zookeeper_session_timeout_ms: int = 18_000  # zookeeper.session.timeout.ms
    offsets_replication_factor: int = 3  # offsets.topic.replication.factor
    default_replication_factor: int = 1  # default.replication.factor
    min_insync_replicas: int = 1  # min.insync.replicas
    replica_lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    controlled_shutdown_enable: bool = True  # controlled.shutdown.enable

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host


def parse_topic(text: str) -> TopicSpec:
    name, sep, parts = text.rpartition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--topic wants NAME:PARTITIONS, got {text!r}")
    try:
        n = int(parts)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--topic partitions must be an integer in {text!r}") from e
    if n < 1:
        raise argparse.ArgumentTypeError(f"--topic partitions must be >= 1 in {text!r}")
    return TopicSpec(name, n)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError("must be in (0, 1]")
    return value


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _minus_one_or_more(text: str) -> int:
    value = int(text)
    if value < -1:
        raise argparse.ArgumentTypeError("must be -1 (unlimited) or >= 0")
    return value


def _segment_bytes(text: str) -> int:
    value = int(text)
    if value < 14:  # Kafka's minimum: LegacyRecord.RECORD_OVERHEAD_V0
        raise argparse.ArgumentTypeError("must be >= 14")
    return value


def _fsync(text: str) -> FsyncPolicy:
    try:
        return FsyncPolicy.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


FSYNC_METHODS = ("auto", "fsync")


def _fsync_method(text: str) -> str:
    if text not in FSYNC_METHODS:
        raise argparse.ArgumentTypeError(f"invalid fsync method {text!r}: use {' or '.join(FSYNC_METHODS)}")
    return text


def _listeners(text: str) -> str:
    try:
        parse_listeners(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def _mechanisms(text: str) -> str:
    try:
        parse_mechanisms(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


# (flag, attribute, type, help). The environment variable is COORDINATOR_<ATTRIBUTE upper-cased>.
_OPTIONS: list[tuple[str, str, object, str]] = [
    ("--host", "host", str, "address to listen on"),
    ("--port", "port", _non_negative, "port to listen on (0 picks a free one)"),
    ("--advertised-host", "advertised_host", str, "host name given to clients (default: --host)"),
    ("--node-id", "node_id", _non_negative, "this broker's node id"),
    ("--data-dir", "data_dir", str, "directory holding the __consumer_offsets logs"),
    ("--offsets-partitions", "offsets_partitions", _positive, "offsets.topic.num.partitions"),
    ("--transaction-state-log-num-partitions", "transaction_state_log_num_partitions", _positive,
     "transaction.state.log.num.partitions: partitions of a new data directory's __transaction_state"),
    ("--transaction-max-timeout-ms", "transaction_max_timeout_ms", _positive,
     "transaction.max.timeout.ms: a longer transaction timeout gets INVALID_TRANSACTION_TIMEOUT"),
    ("--transaction-abort-timed-out-transaction-cleanup-interval-ms",
     "transaction_abort_timed_out_transaction_cleanup_interval_ms", _positive,
     "transaction.abort.timed.out.transaction.cleanup.interval.ms: how often transactions past their "
     "timeout are aborted"),
    ("--transaction-remove-expired-transaction-cleanup-interval-ms",
     "transaction_remove_expired_transaction_cleanup_interval_ms", _positive,
     "transaction.remove.expired.transaction.cleanup.interval.ms: how often unused transactional ids expire"),
    ("--transactional-id-expiration-ms", "transactional_id_expiration_ms", _positive,
     "transactional.id.expiration.ms: an id unused this long is removed"),
    ("--initial-rebalance-delay-ms", "initial_rebalance_delay_ms", _non_negative,
     "group.initial.rebalance.delay.ms"),
    ("--min-session-timeout-ms", "min_session_timeout_ms", _non_negative, "group.min.session.timeout.ms"),
    ("--max-session-timeout-ms", "max_session_timeout_ms", _non_negative, "group.max.session.timeout.ms"),
    ("--group-max-size", "group_max_size", _positive, "group.max.size"),
    ("--group-consumer-heartbeat-interval-ms", "group_consumer_heartbeat_interval_ms", _positive,
     "group.consumer.heartbeat.interval.ms: how often consumer-protocol members heartbeat"),
    ("--group-consumer-min-heartbeat-interval-ms", "group_consumer_min_heartbeat_interval_ms", _positive,
     "group.consumer.min.heartbeat.interval.ms"),
    ("--group-consumer-max-heartbeat-interval-ms", "group_consumer_max_heartbeat_interval_ms", _positive,
     "group.consumer.max.heartbeat.interval.ms"),
    ("--group-consumer-session-timeout-ms", "group_consumer_session_timeout_ms", _positive,
     "group.consumer.session.timeout.ms: a consumer-protocol member silent this long is removed"),
    ("--group-consumer-min-session-timeout-ms", "group_consumer_min_session_timeout_ms", _positive,
     "group.consumer.min.session.timeout.ms"),
    ("--group-consumer-max-session-timeout-ms", "group_consumer_max_session_timeout_ms", _positive,
     "group.consumer.max.session.timeout.ms"),
    ("--group-consumer-max-size", "group_consumer_max_size", _positive, "group.consumer.max.size"),
    ("--group-consumer-assignors", "group_consumer_assignors", str,
     "group.consumer.assignors: server-side assignors, the first is the default (uniform, range)"),
    ("--group-consumer-migration-policy", "group_consumer_migration_policy", str,
     "group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled"),
    ("--group-max-pending-members", "group_max_pending_members", _positive,
     "member ids a group hands out (MEMBER_ID_REQUIRED) and holds until they join; beyond it the oldest is forgotten"),
    ("--log-format", "log_format", str, "console or json"),
    ("--log-level", "log_level", str, "debug, info, warning or error"),
    ("--fsync", "fsync", _fsync, "always | interval:MS | never"),
    ("--fsync-method", "fsync_method", _fsync_method,
     "auto: one syncfs(2) makes a round over 4+ partitions of a filesystem durable (Linux 5.17+); "
     "fsync: each partition fsynced"),
    ("--socket-request-max-bytes", "socket_request_max_bytes", _positive, "socket.request.max.bytes"),
    ("--max-connections", "max_connections", _positive,
     "max.connections: connections accepted over it are closed at once"),
    ("--max-connections-per-ip", "max_connections_per_ip", _positive,
     "max.connections.per.ip: connections from one address over it are closed at once"),
    ("--connections-max-idle-ms", "connections_max_idle_ms", _positive,
     "connections.max.idle.ms: close a connection that has not sent a whole request (or read its responses) "
     "for this long"),
    ("--max-unsent-response-bytes", "max_unsent_response_bytes", _positive,
     "stop reading a client's requests while more than this many bytes of its responses are unread"),
    ("--offsets-retention-minutes", "offsets_retention_minutes", _positive, "offsets.retention.minutes"),
    ("--offset-metadata-max-bytes", "offset_metadata_max_bytes", _non_negative, "offset.metadata.max.bytes"),
    ("--metrics-port", "metrics_port", _non_negative, "port of the Prometheus /metrics endpoint (0 = a free one)"),
    ("--delete-retention-ms", "delete_retention_ms", _non_negative,
     "log.cleaner.delete.retention.ms: how long compaction keeps tombstones"),
    ("--log-roll-ms", "log_roll_ms", _positive, "log.roll.ms: roll a __consumer_offsets segment after this"),
    ("--log-cleaner-enable", "log_cleaner_enable", _bool, "log.cleaner.enable: compact __consumer_offsets"),
    ("--log-cleaner-min-cleanable-ratio", "log_cleaner_min_cleanable_ratio", _ratio,
     "log.cleaner.min.cleanable.ratio: dirty share of a log that triggers compaction"),
    ("--log-cleaner-backoff-ms", "log_cleaner_backoff_ms", _positive, "log.cleaner.backoff.ms: compaction check period"),
    ("--listeners", "listeners", _listeners,
     "NAME://HOST:PORT[,...] with NAME in PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (default PLAINTEXT on --host/--port)"),
    ("--tls-cert", "tls_cert", str, "PEM certificate (chain) of the SSL and SASL_SSL listeners"),
    ("--tls-key", "tls_key", str, "PEM private key of --tls-cert"),
    ("--tls-ca", "tls_ca", str, "PEM CA bundle: require and verify client certificates on TLS listeners"),
    ("--sasl-users-file", "sasl_users_file", str, "SCRAM credentials file (coordinator-server users)"),
    ("--sasl-enabled-mechanisms", "sasl_enabled_mechanisms", _mechanisms,
     "sasl.enabled.mechanisms: comma-separated PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ("--connections-failed-authentication-delay-ms", "connections_failed_authentication_delay_ms", _non_negative,
     "connections.failed.authentication.delay.ms: delay before a failed authentication is answered"),
    ("--failed-authentication-max-delay-ms", "failed_authentication_max_delay_ms", _non_negative,
     "the longest a failed authentication is held: the delay doubles per failure of one (address, user) "
     "from connections.failed.authentication.delay.ms up to this"),
    ("--failed-authentication-max-tracked", "failed_authentication_max_tracked", _positive,
     "(address, user) keys the failed-authentication throttle remembers; the least recently failing is forgotten"),
    ("--acl-file", "acl_file", str, "ACL file (coordinator-server acls); ACLs are enforced when set"),
    ("--super-users", "super_users", str, "super.users: semicolon-separated principals, e.g. User:admin;User:ops"),
    ("--allow-everyone-if-no-acl-found", "allow_everyone_if_no_acl_found", _bool,
     "allow.everyone.if.no.acl.found: resources without any ACL are open to all"),
    ("--zookeeper-connect", "zookeeper_connect", str,
     "zookeeper.connect: HOST:PORT[,HOST:PORT...][/chroot]; joins this node to a cluster (docs/cluster.md)"),
    ("--zookeeper-session-timeout-ms", "zookeeper_session_timeout_ms", _positive, "zookeeper.session.timeout.ms"),
    ("--offsets-replication-factor", "offsets_replication_factor", _positive,
     "offsets.topic.replication.factor: __consumer_offsets is created once this many brokers are alive"),
    ("--default-replication-factor", "default_replication_factor", _positive,
     "default.replication.factor: in a cluster, the replicas of a topic created without a replication factor"),
    ("--min-insync-replicas", "min_insync_replicas", _positive,
     "min.insync.replicas: an acknowledged write is on at least this many in-sync replicas"),
    ("--replica-lag-time-max-ms", "replica_lag_time_max_ms", _positive,
     "replica.lag.time.max.ms: a follower not caught up for this long leaves the ISR"),
    ("--unclean-leader-election-enable", "unclean_leader_election_enable", _bool,
     "unclean.leader.election.enable: elect an out-of-sync replica when no in-sync one is alive"),
    ("--controlled-shutdown-enable", "controlled_shutdown_enable", _bool,
     "controlled.shutdown.enable: on SIGTERM, move partition leadership away before stopping"),
]


# What a `--config` file value must be, per option type: TOML has real types, so `port = "9092"` is an
# error rather than silently accepted; the option's own validator then checks the range.
_INT_TYPES: frozenset[object] = frozenset({int, _positive, _non_negative, _minus_one_or_more, _segment_bytes})
_STR_TYPES: frozenset[object] = frozenset({str, _fsync, _fsync_method, _listeners, _mechanisms})
TOPIC_KEY = "topic"  # the TOML key of the repeatable --topic flag (its Config attribute is `topics`)
CONFIG_ENV = "COORDINATOR_CONFIG"


class ConfigFileError(ValueError):
    """A `--config` file that cannot be read, is not TOML, or has an unknown key or a bad value."""


@dataclass(frozen=True)
class LoadedConfig:
    """The effective settings, where each came from (TOML key -> "flag", "env NAME", "file PATH",
    "default"), whether `--print-config` was asked for, and the removed settings that were given
    (setting, where, why it is ignored) for the server to warn about."""

    config: Config
    sources: dict[str, str]
    print_config: bool = False
    config_file: str | None = None
    ignored: tuple[tuple[str, str, str], ...] = ()


# Settings an earlier release had: still accepted (flag, COORDINATOR_* variable or config-file key) so
# that an upgraded deployment starts, ignored, and named in a startup warning (config_option_ignored).
REMOVED_OPTIONS: dict[str, str] = {
    "max_failed_authentications_per_ip": (
        "an address is no longer locked out after failed authentications: failures are delayed per (address, "
        "user) instead (--connections-failed-authentication-delay-ms, --failed-authentication-max-delay-ms; "
        "docs/security.md)"),
}


def toml_kind(typ: object) -> type:
    """The TOML value type an option with this flag type takes."""
    if typ in _INT_TYPES:
        return int
    if typ in _STR_TYPES:
        return str
    if typ is _bool:
        return bool
    if typ is _ratio:
        return float
    # A new validator must say which TOML type it reads, or the file could only ever be rejected.
    raise TypeError(f"no TOML type known for option type {typ!r}: add it to _INT_TYPES or _STR_TYPES")


def config_keys() -> list[str]:
    """Every key a config file may hold, in flag order."""
    return [attr for _flag, attr, _typ, _help in _OPTIONS] + [TOPIC_KEY]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coordinator-server",
        description="A Kafka-compatible consumer-group coordinator. Every flag may also be set "
        "as a COORDINATOR_* environment variable or as a key of a --config TOML file "
        "(precedence: flag > environment variable > config file > default).",
        epilog="Operator tools: `coordinator-server groups --help` (list, describe, offsets, delete, "
        "reset-offsets against a running server) and `coordinator-server dump-log --help` (decode log "
        "segments). See docs/operations.md.",
    )
    defaults = Config()
    for flag, attr, typ, help_text in _OPTIONS:
        env = "COORDINATOR_" + attr.upper()
        # A boolean flag also works bare (`--auto-create-topics` means true).
        extra: dict[str, object] = {"nargs": "?", "const": True} if typ is _bool else {}
        parser.add_argument(flag, dest=attr, type=typ, default=None,  # type: ignore[arg-type]
                            help=f"{help_text} (env {env}, default {getattr(defaults, attr)})",
                            **extra)  # type: ignore[arg-type]
    for attr in REMOVED_OPTIONS:
        parser.add_argument("--" + attr.replace("_", "-"), dest=attr, default=None, metavar="IGNORED",
                            help="removed: accepted and ignored with a warning (docs/configuration.md)")
    parser.add_argument("--topic", dest="topics", action="append", type=parse_topic, default=None,
                        help="NAME:PARTITIONS, repeatable (env COORDINATOR_TOPIC, comma-separated)")
    parser.add_argument("--config", metavar="FILE.toml", default=None,
                        help=f"read settings from a TOML file; keys are the flag names in snake_case, e.g. "
                        f"port = 9092, topic = [\"orders:3\"] (env {CONFIG_ENV})")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration as TOML, with where each value came from, "
                        "and exit")
    return parser


def read_config_file(path: Path) -> dict[str, object]:
    """The settings of a TOML file as Config attribute -> typed value; raises ConfigFileError."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigFileError(f"cannot read config file {path}: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"config file {path} is not valid TOML: {e}") from e
    options = {attr: typ for _flag, attr, typ, _help in _OPTIONS}
    values: dict[str, object] = {}
    for key, value in data.items():
        if key == TOPIC_KEY:
            values["topics"] = _file_topics(path, value)
        elif key in options:
            values[key] = _file_value(path, key, options[key], value)
        elif key in REMOVED_OPTIONS:
            values[key] = value  # resolve_config reports it as ignored
        else:
            raise ConfigFileError(f"config file {path}: unknown key {key!r}{_did_you_mean(key)}")
    return values


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key.replace("-", "_").lower(), config_keys(), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(config_keys())}"


def _file_value(path: Path, key: str, typ: object, value: object) -> object:
    kind = toml_kind(typ)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # `ratio = 1` is as good as `ratio = 1.0`
    # bool is a subclass of int in Python, but `port = true` is a mistake, not 1.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigFileError(f"config file {path}: key {key!r} must be a TOML {_KIND_NAMES[kind]}, "
                              f"got {_toml_type_name(value)} {_short(value)}")
    if kind is bool:
        return value
    try:
        # The flag's own validator, so a file value obeys exactly the flag's rules.
        return typ(value if kind is str else str(value))  # type: ignore[operator]
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise ConfigFileError(f"config file {path}: key {key!r} = {_short(value)}: {e}") from e


def _file_topics(path: Path, value: object) -> tuple[TopicSpec, ...]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ConfigFileError(f"config file {path}: key {TOPIC_KEY!r} must be an array of "
                              f"\"NAME:PARTITIONS\" strings, e.g. topic = [\"orders:3\"], got {_short(value)}")
    try:
        return tuple(parse_topic(t) for t in value)
    except argparse.ArgumentTypeError as e:
        raise ConfigFileError(f"config file {path}: key {TOPIC_KEY!r}: {e}") from e


_KIND_NAMES = {int: "integer", float: "float", str: "string", bool: "boolean (true or false)"}


def _toml_type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        type(value), type(value).__name__)


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def resolve_config(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> LoadedConfig:
    """Flags, then COORDINATOR_* variables, then the --config file, then defaults; one rule for every key."""
    environ = dict(os.environ if environ is None else environ)
    parser = build_parser()
    args = parser.parse_args(argv)
    config_file = args.config or environ.get(CONFIG_ENV) or None
    file_values: dict[str, object] = {}
    if config_file:
        try:
            file_values = read_config_file(Path(config_file))
        except ConfigFileError as e:
            parser.error(str(e))
    values: dict[str, object] = {}
    sources: dict[str, str] = {}

    def take(attr: str, key: str, flag_value: object, env_name: str, parse_env: Callable[[str], object]) -> None:
        env_value = environ.get(env_name)
        if flag_value is not None:
            values[attr], sources[key] = flag_value, "flag"
        elif env_value is not None and env_value != "":  # an empty variable counts as unset
            try:
                values[attr] = parse_env(env_value)
            except (ValueError, argparse.ArgumentTypeError) as e:
                parser.error(f"{env_name}={env_value!r}: {e}")
            sources[key] = f"env {env_name}"
        elif attr in file_values:
            values[attr], sources[key] = file_values[attr], f"file {config_file}"
        else:
            sources[key] = "default"

    for _flag, attr, typ, _help in _OPTIONS:
        take(attr, attr, getattr(args, attr), "COORDINATOR_" + attr.upper(), typ)  # type: ignore[arg-type]
    take("topics", TOPIC_KEY, None if args.topics is None else tuple(args.topics), "COORDINATOR_TOPIC",
         lambda text: tuple(parse_topic(t) for t in text.split(",") if t))
    ignored = []
    for attr, reason in REMOVED_OPTIONS.items():
        env_name = "COORDINATOR_" + attr.upper()
        if getattr(args, attr) is not None:
            ignored.append((attr, "flag", reason))
        elif environ.get(env_name):
            ignored.append((attr, f"env {env_name}", reason))
        elif attr in file_values:
            ignored.append((attr, f"file {config_file}", reason))
        file_values.pop(attr, None)
    config = Config(**values)  # type: ignore[arg-type]
    if config.log_format not in ("console", "json"):
        parser.error("--log-format must be console or json")
    if config.min_session_timeout_ms > config.max_session_timeout_ms:
        parser.error("--min-session-timeout-ms must not exceed --max-session-timeout-ms")
    consumer_error = _consumer_group_error(config)
    if consumer_error:
        parser.error(consumer_error)
    if config.zookeeper_connect is not None and config.min_insync_replicas > config.offsets_replication_factor:
        parser.error("--min-insync-replicas must not exceed --offsets-replication-factor")
    security_error = _security_error(config)
    if security_error:
        parser.error(security_error)
    return LoadedConfig(config, sources, args.print_config, config_file, tuple(ignored))


def _consumer_group_error(config: Config) -> str | None:
    """Kafka's GroupCoordinatorConfig checks of the group.consumer.* settings."""
    c = config
    if not (c.group_consumer_min_session_timeout_ms <= c.group_consumer_session_timeout_ms
            <= c.group_consumer_max_session_timeout_ms):
        return ("--group-consumer-session-timeout-ms must lie between --group-consumer-min-session-timeout-ms "
                "and --group-consumer-max-session-timeout-ms")
    if not (c.group_consumer_min_heartbeat_interval_ms <= c.group_consumer_heartbeat_interval_ms
            <= c.group_consumer_max_heartbeat_interval_ms):
        return ("--group-consumer-heartbeat-interval-ms must lie between --group-consumer-min-heartbeat-interval-ms "
                "and --group-consumer-max-heartbeat-interval-ms")
    if c.group_consumer_heartbeat_interval_ms >= c.group_consumer_session_timeout_ms:
        return "--group-consumer-heartbeat-interval-ms must be below --group-consumer-session-timeout-ms"
    assignors = consumer_group_assignors(c)
    known = ("uniform", "range")
    if not assignors or any(a not in known for a in assignors) or len(set(assignors)) != len(assignors):
        return f"--group-consumer-assignors must list some of {', '.join(known)}, each once"
    if c.group_consumer_migration_policy not in MIGRATION_POLICIES:
        return f"--group-consumer-migration-policy must be one of {', '.join(MIGRATION_POLICIES)}"
    return None


def consumer_group_assignors(config: Config) -> tuple[str, ...]:
    return tuple(a.strip() for a in config.group_consumer_assignors.split(",") if a.strip())


def _security_error(config: Config) -> str | None:
    """Listener settings that cannot work together, caught before anything binds."""
    if config.listeners is None:
        return None
    specs = parse_listeners(config.listeners)
    if any(s.tls for s in specs) and not (config.tls_cert and config.tls_key):
        return "an SSL or SASL_SSL listener needs --tls-cert and --tls-key"
    if any(s.sasl for s in specs) and not config.sasl_users_file:
        return "a SASL_PLAINTEXT or SASL_SSL listener needs --sasl-users-file"
    return None


def load_config(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    return resolve_config(argv, environ).config


def render_toml(loaded: LoadedConfig) -> str:
    """The effective configuration as a TOML file `--config` reads back, each line saying where its value
    came from. Unset optional settings (TOML has no null) are commented out."""
    lines = ["# coordinator-server effective configuration",
             "# precedence: flag > COORDINATOR_* environment variable > config file > default"]
    for key in config_keys():
        attr = "topics" if key == TOPIC_KEY else key
        value = getattr(loaded.config, attr)
        source = loaded.sources.get(key, "default")
        if value is None:
            lines.append(f"# {key} is unset  # {source}")
            continue
        lines.append(f"{key} = {_toml_value(value)}  # {source}")
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, TopicSpec):
        return _toml_value(f"{value.name}:{value.partitions}")
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # JSON's string escapes (\" \\ \n \uXXXX) are all valid in a TOML basic string; DEL is not allowed raw.
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")
