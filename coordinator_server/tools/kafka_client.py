"""The operator tools' view of a running server, over the Kafka protocol with kafka-python's admin client.

Everything here is plain data in, plain data out: the admin client's dicts and exceptions are turned
into small dataclasses and `ToolError`s naming Kafka's error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND), so the
commands never see kafka-python types. The admin client runs its I/O on a background thread; `AdminSession`
is a context manager so that thread is always stopped, even when a command fails half-way. FindCoordinator,
which the admin client only makes privately, goes over `broker_requests` (docs/decisions.md, "The cluster").
"""
from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from coordinator_server.tools.output import ToolError

# kafka-python loads its JSON schemas with importlib.resources functions deprecated since Python 3.11;
# the warning is about kafka-python, and `filterwarnings = error` in the tests would fail the import.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    import kafka.errors as kafka_errors
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import OffsetSpec
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
    from kafka.structs import OffsetAndMetadata

from coordinator_server.tools.broker_requests import call_any
from protocol.consumer_group_messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "COORDINATOR_BOOTSTRAP_SERVER"
DEFAULT_TIMEOUT_MS = 10_000
CLIENT_ID = "coordinator-server-cli"
CONSUMER_PROTOCOL = "consumer"

Partition = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    # Decoded from the consumer protocol; None when the group is not a consumer group or it did not decode.
    assignment: list[Partition] | None
    subscribed_topics: list[str] | None


@dataclass(frozen=True)
class GroupDescription:
    """What DescribeGroups says (it carries no generation and no leader, so neither is here), or for a
    consumer-protocol (KIP-848) group what ConsumerGroupDescribe says: then `protocol` is the server-side
    assignor and `group_epoch` is set."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member] = field(default_factory=list)
    group_type: str = "classic"
    group_epoch: int | None = None

    @property
    def exists(self) -> bool:
        # DescribeGroups answers an unknown group with state Dead and no error, as Kafka does.
        return self.state != "Dead"

    def owners(self) -> dict[Partition, Member]:
        return {tp: m for m in self.members for tp in (m.assignment or [])}


@dataclass(frozen=True)
class Coordinator:
    """The node FindCoordinator names for a group: in a cluster, the leader of its `__consumer_offsets`
    partition."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def error_name(error: type[Exception] | Exception) -> str:
    """Kafka's name for a kafka-python error class or instance (NON_EMPTY_GROUP), else the class name."""
    cls = error if isinstance(error, type) else type(error)
    name = getattr(cls, "message", None)
    return name if isinstance(name, str) and name else cls.__name__


def error_description(error: type[Exception] | Exception) -> str:
    cls = error if isinstance(error, type) else type(error)
    description = getattr(cls, "description", "")
    return description if isinstance(description, str) else ""


class AdminSession:
    """One admin client against `bootstrap` (HOST:PORT); use as a context manager."""

    def __init__(self, bootstrap: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self._admin: Any = None

    def __enter__(self) -> AdminSession:
        # kafka-python logs connection failures at ERROR on its own logger; the tool reports them itself,
        # in one line, so keep the library quiet unless something above us configured logging.
        logging.getLogger("kafka").addHandler(logging.NullHandler())
        logging.getLogger("kafka").propagate = False
        try:
            self._admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap, client_id=CLIENT_ID, request_timeout_ms=self.timeout_ms,
                bootstrap_timeout_ms=self.timeout_ms,
            )
        except kafka_errors.KafkaError as e:
            raise ToolError(f"cannot reach a server at {self.bootstrap} "
                            f"(--bootstrap-server or {BOOTSTRAP_ENV}): {e}") from e
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except kafka_errors.KafkaError as e:
            raise ToolError(f"{what} failed: {error_name(e)}: {error_description(e) or e}") from e

    # ----------------------------------------------------------------------------------- groups

    def list_groups(self) -> list[GroupListing]:
        groups = self._call("ListGroups", self._admin.list_groups)
        return sorted((GroupListing(g["group_id"], g.get("group_state") or "", g.get("protocol_type") or "")
                       for g in groups), key=lambda g: g.group_id)

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        ids = list(group_ids)
        if not ids:
            return {}
        raw = self._call("DescribeGroups", self._admin.describe_groups, ids)
        out = {}
        for group_id, g in raw.items():
            if (g.get("error") or "").split(": ")[0].endswith(_GROUP_ID_NOT_FOUND):
                # DescribeGroups v6 (Kafka 4's) answers GROUP_ID_NOT_FOUND where earlier versions answered a
                # Dead group with no error: for a group that is not there, and for one of another type.
                g = {"group_id": group_id, "group_state": "Dead"}
            if g.get("error"):
                raise ToolError(f"DescribeGroups for group {group_id!r} failed: {g['error']}")
            out[group_id] = _description(g)
            if out[group_id].state == "Dead":
                # DescribeGroups sees only classic groups: a consumer-protocol group looks Dead to it.
                out[group_id] = self._consumer_group(group_id) or out[group_id]
        return out

    def _consumer_group(self, group_id: str) -> GroupDescription | None:
        """ConsumerGroupDescribe, asked of the group's coordinator; None if it is no consumer group."""
        coordinator = self.find_coordinator(group_id)
        request = ConsumerGroupDescribeRequest[0](group_ids=[group_id], include_authorized_operations=False)
        response = call_any(coordinator.address, request, ConsumerGroupDescribeResponse, CLIENT_ID, self.timeout_ms)
        [g] = response.groups
        if g.error_code:
            return None
        members = [Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                          sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions),
                          sorted(m.subscribed_topic_names)) for m in g.members]
        return GroupDescription(group_id, g.group_state, CONSUMER_PROTOCOL, g.assignor_name,
                                sorted(members, key=lambda m: m.member_id), "consumer", g.group_epoch)

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.describe_groups([group_id])[group_id]

    def find_coordinator(self, group_id: str) -> Coordinator:
        """FindCoordinator v3, asked of the bootstrap servers (any node answers for the cluster)."""
        request = FindCoordinatorRequest[3](key=group_id, key_type=0)  # key type 0: a group
        response = call_any(self.bootstrap, request, FindCoordinatorResponse, CLIENT_ID, self.timeout_ms)
        if response.error_code:
            error = kafka_errors.for_code(response.error_code)
            raise ToolError(f"FindCoordinator for group {group_id!r} failed: {error_name(error)}: "
                            f"{error_description(error) or response.error_message}")
        return Coordinator(response.node_id, response.host, response.port)

    def committed_offsets(self, group_id: str) -> dict[Partition, int]:
        """Every committed offset of the group (OffsetFetch for all topics)."""
        raw = self._call("OffsetFetch", self._admin.list_group_offsets, group_id)
        return {(tp.topic, tp.partition): om.offset for tp, om in raw.get(group_id, {}).items()
                if om.offset >= 0}

    def delete_groups(self, group_ids: list[str]) -> dict[str, str | None]:
        """group -> None when deleted, else Kafka's error name."""
        raw = self._call("DeleteGroups", self._admin.delete_groups, group_ids)
        out: dict[str, str | None] = {}
        for group_id, result in raw.items():
            # kafka-python gives 'OK' or the error class's name (NonEmptyGroupError): map back to Kafka's.
            out[group_id] = None if result == "OK" else error_name(getattr(kafka_errors, result, Exception))
        return out

    def commit_offsets(self, group_id: str, offsets: dict[Partition, int]) -> dict[Partition, str | None]:
        """OffsetCommit with generation -1 and an empty member id (an admin commit, allowed only while the
        group has no members); partition -> None or Kafka's error name."""
        request = {TopicPartition(t, p): OffsetAndMetadata(o, "", None) for (t, p), o in offsets.items()}
        raw = self._call("OffsetCommit", self._admin.alter_group_offsets, group_id, request)
        return {(tp.topic, tp.partition): None if err is kafka_errors.NoError else error_name(err)
                for tp, err in raw.items()}

    # ----------------------------------------------------------------------------------- topics

    def topic_partitions(self, topic: str) -> list[int]:
        topics = self._call("Metadata", self._admin.describe_topics, [topic])
        for t in topics:
            if t.get("topic", t.get("name")) != topic:
                continue
            code = t.get("error_code", 0)
            if code:
                raise ToolError(f"topic {topic!r}: {error_name(kafka_errors.for_code(code))}")
            return sorted(p["partition_index"] for p in t["partitions"])
        raise ToolError(f"topic {topic!r}: not in the Metadata response")

    def log_end_offsets(self, partitions: Iterable[Partition]) -> dict[Partition, int | None]:
        return self._list_offsets(partitions, OffsetSpec.LATEST)

    def log_start_offsets(self, partitions: Iterable[Partition]) -> dict[Partition, int | None]:
        return self._list_offsets(partitions, OffsetSpec.EARLIEST)

    def _list_offsets(self, partitions: Iterable[Partition], spec: Any) -> dict[Partition, int | None]:
        """ListOffsets per topic, so one deleted topic leaves only its own partitions unknown (None)."""
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        out: dict[Partition, int | None] = {}
        for topic, parts in sorted(by_topic.items()):
            request = {TopicPartition(topic, p): spec for p in parts}
            try:
                raw = self._admin.list_partition_offsets(request, timeout_ms=min(self.timeout_ms, 5000))
            except kafka_errors.KafkaError:
                out.update({(topic, p): None for p in parts})
                continue
            out.update({(tp.topic, tp.partition): ot.offset for tp, ot in raw.items()})
        return out


_GROUP_ID_NOT_FOUND = kafka_errors.GroupIdNotFoundError.__name__


def _description(g: dict[str, Any]) -> GroupDescription:
    protocol_type = g.get("protocol_type") or ""
    members = [_member(m, protocol_type) for m in g.get("members") or []]
    return GroupDescription(g["group_id"], g.get("group_state") or "", protocol_type,
                            g.get("protocol_data") or "", sorted(members, key=lambda m: m.member_id))


def _member(m: dict[str, Any], protocol_type: str) -> Member:
    # kafka-python's admin client has already run ConsumerProtocolAssignment/Subscription.decode on the
    # bytes (leaving them as bytes when they did not decode); only a consumer group's bytes mean that.
    assignment: list[Partition] | None = None
    subscribed: list[str] | None = None
    if protocol_type == CONSUMER_PROTOCOL:
        a = m.get("member_assignment")
        if isinstance(a, dict):
            assignment = sorted((t["topic"], p) for t in a.get("assigned_partitions") or []
                                for p in t["partitions"])
        elif not a:
            assignment = []  # no assignment yet (rebalancing)
        s = m.get("member_metadata")
        if isinstance(s, dict):
            subscribed = sorted(s.get("topics") or [])
    return Member(m["member_id"], m.get("group_instance_id"), m.get("client_id") or "",
                  m.get("client_host") or "", assignment, subscribed)
