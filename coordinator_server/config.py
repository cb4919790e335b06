"""One typed settings object. Precedence: command-line flag > COORDINATOR_* environment variable > default.

Defaults equal Apache Kafka's broker defaults (GroupCoordinatorConfig, SocketServerConfigs).
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    group_max_size: int = INT32_MAX
    topics: tuple[TopicSpec, ...] = ()
    log_format: str = "console"
    log_level: str = "info"
    fsync: FsyncPolicy = field(default_factory=lambda: FsyncPolicy("always"))
    socket_request_max_bytes: int = 104_857_600
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 10080
    metrics_port: int | None = None  # no metrics endpoint unless asked for
    cluster_id: str = "coordinator-server-cluster"
    # The topic store (data plane); defaults are Kafka's broker defaults.
    auto_create_topics: bool = True  # auto.create.topics.enable
    default_partitions: int = 1  # num.partitions
    retention_ms: int = 604_800_000  # log.retention.ms (-1: keep forever)
    retention_bytes: int = -1  # log.retention.bytes (-1: unlimited)
    segment_bytes: int = 1_073_741_824  # log.segment.bytes
    max_message_bytes: int = 1_048_588  # message.max.bytes
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms

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


# (flag, attribute, type, help). The environment variable is COORDINATOR_<ATTRIBUTE upper-cased>.
_OPTIONS: list[tuple[str, str, object, str]] = [
    ("--host", "host", str, "address to listen on"),
    ("--port", "port", _non_negative, "port to listen on (0 picks a free one)"),
    ("--advertised-host", "advertised_host", str, "host name given to clients (default: --host)"),
    ("--node-id", "node_id", _non_negative, "this broker's node id"),
    ("--data-dir", "data_dir", str, "directory holding the __consumer_offsets logs"),
    ("--offsets-partitions", "offsets_partitions", _positive, "offsets.topic.num.partitions"),
    ("--initial-rebalance-delay-ms", "initial_rebalance_delay_ms", _non_negative,
     "group.initial.rebalance.delay.ms"),
    ("--min-session-timeout-ms", "min_session_timeout_ms", _non_negative, "group.min.session.timeout.ms"),
    ("--max-session-timeout-ms", "max_session_timeout_ms", _non_negative, "group.max.session.timeout.ms"),
    ("--group-max-size", "group_max_size", _positive, "group.max.size"),
    ("--log-format", "log_format", str, "console or json"),
    ("--log-level", "log_level", str, "debug, info, warning or error"),
    ("--fsync", "fsync", _fsync, "always | interval:MS | never"),
    ("--socket-request-max-bytes", "socket_request_max_bytes", _positive, "socket.request.max.bytes"),
    ("--offsets-retention-minutes", "offsets_retention_minutes", _positive, "offsets.retention.minutes"),
    ("--offset-metadata-max-bytes", "offset_metadata_max_bytes", _non_negative, "offset.metadata.max.bytes"),
    ("--metrics-port", "metrics_port", _non_negative, "port of the Prometheus /metrics endpoint (0 = a free one)"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coordinator-server",
        description="A Kafka-compatible consumer-group coordinator. Every flag may also be set "
        "as a COORDINATOR_* environment variable (flag wins).",
    )
    defaults = Config()
    for flag, attr, typ, help_text in _OPTIONS:
        env = "COORDINATOR_" + attr.upper()
        # A boolean flag also works bare (`--auto-create-topics` means true).
        extra: dict[str, object] = {"nargs": "?", "const": True} if typ is _bool else {}
        parser.add_argument(flag, dest=attr, type=typ, default=None,  # type: ignore[arg-type]
                            help=f"{help_text} (env {env}, default {getattr(defaults, attr)})",
                            **extra)  # type: ignore[arg-type]
    parser.add_argument("--topic", dest="topics", action="append", type=parse_topic, default=None,
                        help="NAME:PARTITIONS, repeatable (env COORDINATOR_TOPIC, comma-separated)")
    return parser


def load_config(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    environ = dict(os.environ if environ is None else environ)
    parser = build_parser()
    args = parser.parse_args(argv)
    values: dict[str, object] = {}
    for _flag, attr, typ, _help in _OPTIONS:
        flag_value = getattr(args, attr)
        if flag_value is not None:
            values[attr] = flag_value
            continue
        env_value = environ.get("COORDINATOR_" + attr.upper())
        if env_value is not None and env_value != "":
            try:
                values[attr] = typ(env_value)  # type: ignore[operator]
            except (ValueError, argparse.ArgumentTypeError) as e:
                parser.error(f"COORDINATOR_{attr.upper()}={env_value!r}: {e}")
    if args.topics is not None:
        values["topics"] = tuple(args.topics)
    elif environ.get("COORDINATOR_TOPIC"):
        try:
            values["topics"] = tuple(parse_topic(t) for t in environ["COORDINATOR_TOPIC"].split(",") if t)
        except argparse.ArgumentTypeError as e:
            parser.error(f"COORDINATOR_TOPIC: {e}")
    config = Config(**values)  # type: ignore[arg-type]
    if config.log_format not in ("console", "json"):
        parser.error("--log-format must be console or json")
    if config.min_session_timeout_ms > config.max_session_timeout_ms:
        parser.error("--min-session-timeout-ms must not exceed --max-session-timeout-ms")
    return config
