"""KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe), the same requests to Kafka and to
the server: two members share a topic through a revocation, one leaves, and the heartbeats a member can be
refused; a consumer group's offsets (member epochs in OffsetCommit and OffsetFetch v9); a classic member
joining a consumer group."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from protocol.consumer_group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.differential.harness import Run, scenario
from tests.differential.steps import call, commit, create_topic, describe, heartbeat, join_new, leave
from tests.integration.group_client import Connection, GroupMember, wait_until
from tests.kafka.broker import OFFSETS_PARTITIONS, probe_group_for

VERSION = 1  # the client makes its member id (KIP-1082)
TopicPartitions = ConsumerGroupHeartbeatRequest.TopicPartitions


class Member:
    def __init__(self, run: Run, member_id: str, topic: str) -> None:
        self.run = run
        self.member_id = member_id
        self.topic = topic
        self.group_id = run.group()
        self.epoch = 0
        self.owned: list[Any] = []
        self.conn = Connection((run.target.host, run.target.port), f"client-{member_id[:4]}")

    def heartbeat(self, label: str, *, full: bool = False, record: bool = True, **overrides: Any) -> Any:
        """A heartbeat naming what this member owns; `full` sends every field, as on joining."""
        fields: dict[str, Any] = dict(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch, instance_id=None,
            rack_id=None, rebalance_timeout_ms=10_000 if full else -1,
            subscribed_topic_names=[self.topic] if full else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=self.owned)
        fields.update(overrides)
        resp = self.conn.call(ConsumerGroupHeartbeatRequest[VERSION](**fields), ConsumerGroupHeartbeatResponse)
        if record:
            self.run.record(label, resp)
        if resp.error_code == 0 and fields["member_epoch"] >= 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:  # null: unchanged
                self.owned = [TopicPartitions(topic_id=t.topic_id, partitions=sorted(t.partitions))
                              for t in resp.assignment.topic_partitions]
        return resp


def _await_topic_known(run: Run, topic: str, partitions: int, group: str | None = None) -> None:
    """Wait until the scenario group's coordinator assigns the new topic (not recorded). Kafka's coordinator
    learns of a topic from the cluster metadata a moment after Metadata shows it; a group that subscribed
    before that is assigned nothing and then moved to a new epoch when it learns, so a scenario that started
    at once would see either, by timing. A probe group on the same `__consumer_offsets` partition (the same
    coordinator) joins until it is assigned every partition, then leaves."""
    target = probe_group_for(run.group() if group is None else group, OFFSETS_PARTITIONS)
    probe = Member(run, "AAAAAAAAAAAAAAAAAAAA_g", topic)
    probe.group_id = target

    def assigned() -> bool:
        probe.heartbeat("probe", full=probe.epoch == 0, record=False)
        return sum(len(t.partitions) for t in probe.owned) == partitions
    try:
        wait_until(assigned, what=f"the coordinator assigning {topic}")
        probe.heartbeat("probe leave", member_epoch=-1, record=False)
    finally:
        probe.conn.close()


def _member_ids() -> tuple[str, str]:
    # Fixed ids, the same on both targets (a client makes a random one).
    return "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


@scenario("consumer-group")
def consumer_group(run: Run) -> None:
    topic = f"{run.group_prefix}-t"
    create_topic(run, topic, 4)
    _await_topic_known(run, topic, 4)
    a_id, b_id = _member_ids()
    a, b = Member(run, a_id, topic), Member(run, b_id, topic)
    try:
        a.heartbeat("a: join", full=True)
        a.heartbeat("a: heartbeat, owning all")
        b.heartbeat("b: join", full=True)
        a.heartbeat("a: heartbeat, told to revoke")
        a.heartbeat("a: heartbeat, revoked")
        b.heartbeat("b: heartbeat, gets the revoked")
        b.heartbeat("b: heartbeat, settled")
        for version in (0, 1):
            call(run, f"describe v{version}", ConsumerGroupDescribeRequest[version](
                group_ids=[run.group(), run.group("nobody")], include_authorized_operations=False),
                ConsumerGroupDescribeResponse)
        call(run, "describe v1, authorized operations", ConsumerGroupDescribeRequest[1](
            group_ids=[run.group(), run.group("nobody")], include_authorized_operations=True),
            ConsumerGroupDescribeResponse)
        b.heartbeat("b: heartbeat, stale epoch", member_epoch=b.epoch - 1)
        b.heartbeat("b: heartbeat, epoch from the future", member_epoch=b.epoch + 5)
        b.heartbeat("unknown member", member_id="AAAAAAAAAAAAAAAAAAAA_w", member_epoch=3)
        b.heartbeat("join, no subscription", full=True, topic_partitions=[], member_id="AAAAAAAAAAAAAAAAAAAAAw", member_epoch=0,
                    subscribed_topic_names=None)
        b.heartbeat("join, no rebalance timeout", full=True, topic_partitions=[], member_id="AAAAAAAAAAAAAAAAAAAABA", member_epoch=0,
                    rebalance_timeout_ms=-1)
        b.heartbeat("join, unknown assignor", full=True, topic_partitions=[], member_id="AAAAAAAAAAAAAAAAAAAABQ", member_epoch=0,
                    server_assignor="no-such-assignor")
        b.heartbeat("join, empty member id", full=True, topic_partitions=[], member_id="", member_epoch=0)
        b.heartbeat("b: leave", member_epoch=-1)
        a.heartbeat("a: heartbeat, gets everything back")
        a.heartbeat("a: heartbeat, settled alone")
        a.heartbeat("a: leave", member_epoch=-1)
        call(run, "describe, empty", ConsumerGroupDescribeRequest[1](group_ids=[run.group()],
                                                                     include_authorized_operations=False),
             ConsumerGroupDescribeResponse)
    finally:
        a.conn.close()
        b.conn.close()


def test_consumer_group(differential: Callable[[str], None]) -> None:
    differential("consumer-group")


@scenario("consumer-group-offsets")
def consumer_group_offsets(run: Run) -> None:
    """Commits of a consumer group's member name its member epoch (OffsetCommit v9, OffsetFetch v9); a stale
    or unknown one is refused. ListGroups tells the group's type."""
    topic = f"{run.group_prefix}-t"
    create_topic(run, topic, 2)
    _await_topic_known(run, topic, 2)
    a_id, _ = _member_ids()
    a = Member(run, a_id, topic)
    try:
        a.heartbeat("a: join", full=True)
        group = a.group_id
        commit(run, "commit v9, member epoch", 9, group, topic, {0: 10, 1: 11}, generation=a.epoch,
               member_id=a.member_id)
        commit(run, "commit v9, stale epoch", 9, group, topic, {0: 12}, generation=a.epoch - 1,
               member_id=a.member_id)
        commit(run, "commit v9, epoch from the future", 9, group, topic, {0: 12}, generation=a.epoch + 1,
               member_id=a.member_id)
        commit(run, "commit v9, unknown member", 9, group, topic, {0: 12}, generation=a.epoch,
               member_id="AAAAAAAAAAAAAAAAAAAA_w")
        commit(run, "commit v8, as a classic member", 8, group, topic, {0: 12}, generation=a.epoch,
               member_id=a.member_id)
        commit(run, "commit v9, standalone", 9, group, topic, {0: 13})
        g = OffsetFetchRequest.OffsetFetchRequestGroup
        for label, member_id, epoch in [("fetch v9, member epoch", a.member_id, a.epoch),
                                        ("fetch v9, stale epoch", a.member_id, a.epoch - 1),
                                        ("fetch v9, unknown member", "AAAAAAAAAAAAAAAAAAAA_w", a.epoch),
                                        ("fetch v9, no member", None, -1)]:
            call(run, label, OffsetFetchRequest[9](groups=[g(group_id=group, member_id=member_id, member_epoch=epoch,
                                                              topics=[g.OffsetFetchRequestTopics(
                                                                  name=topic, partition_indexes=[0, 1])])],
                                                    require_stable=True), OffsetFetchResponse)
        call(run, "list v5, consumer", ListGroupsRequest[5](states_filter=[], types_filter=["consumer"]),
             ListGroupsResponse)
        call(run, "list v5, classic", ListGroupsRequest[5](states_filter=[], types_filter=["classic"]),
             ListGroupsResponse)
        for version in (5, 6):
            call(run, f"describe groups (classic API) v{version}", DescribeGroupsRequest[version](
                groups=[group], include_authorized_operations=False), DescribeGroupsResponse)
        a.heartbeat("a: leave", member_epoch=-1)
    finally:
        a.conn.close()


def test_consumer_group_offsets(differential: Callable[[str], None]) -> None:
    differential("consumer-group-offsets")


def _subscription(topic: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=1, topics=[topic], user_data=None,
                                              owned_partitions=[]).encode(version=1))


@scenario("mixed-group")
def mixed_group(run: Run) -> None:
    """A classic member (JoinGroup, SyncGroup, Heartbeat) joins a consumer group that has a KIP-848 member:
    the coordinator assigns it, and moves partitions to it through the other member's revocation."""
    topic = f"{run.group_prefix}-t"
    create_topic(run, topic, 4)
    _await_topic_known(run, topic, 4)
    a_id, _ = _member_ids()
    a = Member(run, a_id, topic)
    b = GroupMember(run.target, run.group(), "client-b", session_timeout_ms=45_000, protocol_names=("range",),
                    metadata=_subscription(topic))
    try:
        a.heartbeat("a: join", full=True)
        a.heartbeat("a: heartbeat, owning all")
        join_new(run, b, "b")
        run.record("b: sync", b.sync({}, version=5))
        a.heartbeat("a: heartbeat, told to revoke")
        a.heartbeat("a: heartbeat, revoked")
        heartbeat(run, b, "b: heartbeat")
        run.record("b: rejoin", b.join(5, member_id_required=False))
        run.record("b: sync again", b.sync({}, version=5))
        heartbeat(run, b, "b: heartbeat, settled")
        call(run, "describe (consumer groups API)", ConsumerGroupDescribeRequest[1](
            group_ids=[run.group()], include_authorized_operations=False), ConsumerGroupDescribeResponse)
        describe(run, "describe (classic API)", [run.group()])
        leave(run, b, "b: leave")
        a.heartbeat("a: heartbeat, after b left")
        a.heartbeat("a: leave", member_epoch=-1)
    finally:
        a.conn.close()
        b.close()


def test_mixed_group(differential: Callable[[str], None]) -> None:
    differential("mixed-group")
