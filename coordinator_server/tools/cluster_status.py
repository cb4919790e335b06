"""`coordinator-server cluster status`: what an operator looks at during a failover.

    status    Metadata (brokers, controller, and per `__consumer_offsets` partition its leader, leader
              epoch, replicas and ISR) from any bootstrap server, then one ListOffsets (LATEST,
              READ_UNCOMMITTED, replica id -1, the leader epoch Metadata showed) to each partition's
              leader for its high watermark.

Under-replicated partitions (ISR smaller than the replicas) and offline ones (no leader) are marked; every
other topic of the cluster gets one summary line (partitions, under-replicated, offline). The
answers come from two moments (Metadata first, then each leader), so a partition whose leadership moved in
between shows the leader's refusal (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) instead of a high
watermark: run it again. Tables for people, `--json` for scripts; exit 0 when the report was made, 1 with
one line on stderr when no bootstrap server answered.
"""
from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator_server.net.data_plane.list_offsets import CONSUMER_REPLICA_ID, LATEST_TIMESTAMP
from coordinator_server.replication.broker_client import BrokerUnreachable
from coordinator_server.tools.broker_requests import call, call_any
from coordinator_server.tools.kafka_client import (
    BOOTSTRAP_ENV,
    CLIENT_ID,
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_MS,
    error_name,
)
from coordinator_server.tools.output import EXIT_OK, note, run_tool, table, write_json
from coordinator_server.topics.registry import OFFSETS_TOPIC

# As in kafka_client: kafka-python loads its schemas with importlib.resources functions deprecated in 3.11.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    import kafka.errors as kafka_errors
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

PROG = "coordinator-server cluster"
READ_UNCOMMITTED = 0


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    controller: bool


@dataclass(frozen=True)
class OffsetsPartition:
    partition: int
    leader: int  # -1: offline
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    high_watermark: int | None = None
    error: str | None = None  # Metadata's or the leader's error for this partition, or why it was not asked

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class TopicSummary:
    name: str
    partitions: int
    under_replicated: list[int]
    offline: list[int]


@dataclass(frozen=True)
class ClusterStatus:
    cluster_id: str | None
    controller_id: int
    brokers: list[Broker]
    offsets_topic_error: str | None  # e.g. LEADER_NOT_AVAILABLE before the controller created the topic
    partitions: list[OffsetsPartition]
    topics: list[TopicSummary]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]", default=None,
                        help=f"servers to ask, tried in order (env {BOOTSTRAP_ENV}, default {DEFAULT_BOOTSTRAP})")
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS,
                        help=f"connect and request timeout per broker (default {DEFAULT_TIMEOUT_MS})")
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect the cluster of running coordinator-servers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("status", parents=[common], help="brokers, the controller, and every __consumer_offsets "
                   "partition's leader, epoch, replicas, ISR and high watermark")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP

    def body() -> int:
        status = fetch_status(bootstrap, args.timeout_ms)
        if args.json:
            write_json(status_json(status))
        else:
            print(render(status), end="")
            if status.offsets_topic_error is not None:
                note(f"{OFFSETS_TOPIC}: {status.offsets_topic_error} (not created yet: the controller creates it "
                     "once --offsets-replication-factor brokers are registered)")
        return EXIT_OK

    return run_tool(f"{PROG} {args.command}", body)


# ------------------------------------------------------------------------------------------- asking


def fetch_status(bootstrap: str, timeout_ms: int) -> ClusterStatus:
    request = MetadataRequest[9](topics=None,  # every topic: __consumer_offsets in detail, the others summed up
                                 allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                 include_topic_authorized_operations=False)
    metadata = call_any(bootstrap, request, MetadataResponse, CLIENT_ID, timeout_ms)
    status = status_from_metadata(metadata)
    addresses = {b.node_id: (b.host, b.port) for b in status.brokers}
    by_leader: dict[int, list[OffsetsPartition]] = {}
    for p in status.partitions:
        if p.error is None:
            by_leader.setdefault(p.leader, []).append(p)
    answers: dict[int, tuple[int | None, str | None]] = {}
    for leader, parts in sorted(by_leader.items()):  # only live brokers lead partitions without an error
        answers.update(_high_watermarks(addresses[leader], parts, timeout_ms))
    partitions = [p if p.partition not in answers else
                  OffsetsPartition(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas,
                                   *answers[p.partition])
                  for p in status.partitions]
    return ClusterStatus(status.cluster_id, status.controller_id, status.brokers, status.offsets_topic_error,
                         partitions, status.topics)


def status_from_metadata(metadata: Any) -> ClusterStatus:
    """The Metadata response as a ClusterStatus without high watermarks; partitions that cannot be asked
    (no leader, a leader that is not a live broker, an error) carry the reason."""
    live = {b.node_id for b in metadata.brokers}
    brokers = sorted((Broker(b.node_id, b.host, b.port, b.node_id == metadata.controller_id)
                      for b in metadata.brokers), key=lambda b: b.node_id)
    topic = next((t for t in metadata.topics if t.name == OFFSETS_TOPIC), None)
    topic_error = "not in the Metadata response" if topic is None else (
        error_name(kafka_errors.for_code(topic.error_code)) if topic.error_code else None)
    partitions = []
    for p in sorted(topic.partitions if topic is not None else [], key=lambda p: p.partition_index):
        error = None
        if p.error_code:
            error = error_name(kafka_errors.for_code(p.error_code))
        elif p.leader_id < 0:
            error = "no leader"
        elif p.leader_id not in live:
            error = f"leader {p.leader_id} is not a live broker"
        partitions.append(OffsetsPartition(p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                                           list(p.isr_nodes), list(p.offline_replicas), None, error))
    topics = [TopicSummary(t.name, len(t.partitions),
                           sorted(p.partition_index for p in t.partitions if len(p.isr_nodes) < len(p.replica_nodes)),
                           sorted(p.partition_index for p in t.partitions if p.leader_id < 0))
              for t in sorted(metadata.topics, key=lambda t: t.name) if t.name != OFFSETS_TOPIC and not t.error_code]
    return ClusterStatus(metadata.cluster_id, metadata.controller_id, brokers, topic_error, partitions, topics)


def _high_watermarks(address: tuple[str, int], parts: list[OffsetsPartition],
                     timeout_ms: int) -> dict[int, tuple[int | None, str | None]]:
    """partition -> (high watermark, error), asked of their leader in one ListOffsets."""
    _Topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest[4](
        replica_id=CONSUMER_REPLICA_ID, isolation_level=READ_UNCOMMITTED,
        topics=[_Topic(name=OFFSETS_TOPIC, partitions=[
            _Topic.ListOffsetsPartition(partition_index=p.partition, current_leader_epoch=p.leader_epoch,
                                        timestamp=LATEST_TIMESTAMP) for p in parts])])
    try:
        response = call(address, request, ListOffsetsResponse, CLIENT_ID, timeout_ms)
    except BrokerUnreachable:
        return {p.partition: (None, f"leader unreachable at {address[0]}:{address[1]}") for p in parts}
    out: dict[int, tuple[int | None, str | None]] = {p.partition: (None, "no answer") for p in parts}
    for t in response.topics:
        for r in t.partitions if t.name == OFFSETS_TOPIC else []:
            out[r.partition_index] = ((r.offset, None) if r.error_code == 0 else
                                      (None, error_name(kafka_errors.for_code(r.error_code))))
    return out


# ----------------------------------------------------------------------------------------- showing


def status_json(status: ClusterStatus) -> dict[str, Any]:
    return {
        "cluster_id": status.cluster_id,
        "controller_id": status.controller_id,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "controller": b.controller}
                    for b in status.brokers],
        "offsets_topic": {
            "error": status.offsets_topic_error,
            "partitions": [{
                "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": p.replicas, "isr": p.isr, "offline_replicas": p.offline_replicas,
                "high_watermark": p.high_watermark, "under_replicated": p.under_replicated,
                "offline": p.offline, "error": p.error,
            } for p in status.partitions],
            "under_replicated_partitions": [p.partition for p in status.partitions if p.under_replicated],
            "offline_partitions": [p.partition for p in status.partitions if p.offline],
        },
        "topics": [{"name": t.name, "partitions": t.partitions, "under_replicated_partitions": t.under_replicated,
                    "offline_partitions": t.offline} for t in status.topics],
    }


def _ids(nodes: list[int]) -> str:
    return ",".join(map(str, nodes)) or "-"


def _state(p: OffsetsPartition) -> str:
    marks = ["offline"] if p.offline else []
    marks += ["under-replicated"] if p.under_replicated else []
    marks += [p.error] if p.error is not None and not p.offline else []
    return "; ".join(marks) or "ok"


def render(status: ClusterStatus) -> str:
    brokers = table(["BROKER", "HOST:PORT", "CONTROLLER"],
                    [[b.node_id, f"{b.host}:{b.port}", "*" if b.controller else ""] for b in status.brokers])
    under = sum(1 for p in status.partitions if p.under_replicated)
    offline = sum(1 for p in status.partitions if p.offline)
    lines = [f"CLUSTER-ID {status.cluster_id or '-'}  CONTROLLER {status.controller_id}\n", "\n", brokers, "\n",
             f"{OFFSETS_TOPIC}: {len(status.partitions)} partitions, {under} under-replicated, {offline} offline\n"]
    if status.partitions:
        lines += ["\n", table(["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "HIGH-WATERMARK", "STATUS"],
                              [[p.partition, None if p.offline else p.leader, p.leader_epoch, _ids(p.replicas), _ids(p.isr),
                                p.high_watermark, _state(p)] for p in status.partitions])]
    if status.topics:
        lines += ["\n", table(["TOPIC", "PARTITIONS", "UNDER-REPLICATED", "OFFLINE"],
                              [[t.name, t.partitions, len(t.under_replicated), len(t.offline)] for t in status.topics])]
    return "".join(lines)


__all__ = ["build_parser", "fetch_status", "main", "render", "status_json"]
