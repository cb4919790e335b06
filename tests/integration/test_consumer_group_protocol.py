"""KIP-848 with a real client: confluent-kafka (librdkafka 2.16) consumers with `group.protocol=consumer`
against the real server, the coordinator computing every assignment.

- scaling 1 → 3 → 5 → 3 → 1 members while a keyed stream is produced: nothing skipped, no partition held
  by two members at once (the clients' own assign/revoke callbacks, timed in this one process), and no
  stop-the-world: a member never has a partition revoked that it holds before and after a change;
- a static member restarts (group.instance.id) and gets its partitions back without the others moving;
- a member killed with SIGKILL is fenced at its session timeout and its partitions move;
- the server killed with SIGKILL and restarted on the same port: the group resumes at its epochs;
- the admin client sees the group as a consumer group (ListGroups type, ConsumerGroupDescribe).
"""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest

from tests.integration.conftest import ServerFactory, ServerProcess
from tests.integration.e2e_support import free_port

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.integration.consumer_protocol_support import (  # noqa: E402 (after the importorskip)
    PARTITIONS,
    TOPIC,
    KeyedStream,
    Member,
    Timeline,
    settled,
    wait_until,
)

pytestmark = pytest.mark.integration
# Fast reconciliation: members heartbeat every 250 ms; a silent member goes after 6 s.
FLAGS: dict[str, Any] = dict(
    topic=[f"{TOPIC}:{PARTITIONS}"], group_consumer_min_heartbeat_interval_ms=100,
    group_consumer_heartbeat_interval_ms=250, group_consumer_min_session_timeout_ms=3000,
    group_consumer_session_timeout_ms=6000,
)


@pytest.fixture
def srv(server_factory: ServerFactory) -> Iterator[ServerProcess]:
    yield server_factory(**FLAGS)


def test_scale_1_3_5_3_1_while_consuming_a_keyed_stream(srv: ServerProcess) -> None:
    timeline = Timeline()
    stream = KeyedStream(srv.address)
    members: list[Member] = []
    phases: list[tuple[float, float, dict[str, set[int]], dict[str, set[int]]]] = []  # start, end, held before, after

    def change_to(count: int) -> None:
        before = {m.name: m.assignment() for m in members}
        start = time.monotonic()
        while len(members) < count:
            members.append(Member(srv.address, f"c{len(members)}", timeline, "scaling"))
        while len(members) > count:
            members.pop().close()
        wait_until(settled(members), 30, f"{count} members to share the partitions")
        phases.append((start, time.monotonic(), before, {m.name: m.assignment() for m in members}))

    for count in (1, 3, 5, 3, 1):
        change_to(count)
        time.sleep(1.0)  # consume a while at this size
    sent = stream.stop()
    wait_until(lambda: {(p, o) for _t, _m, p, o, _k in timeline.messages} >= set(sent), 30, "every record consumed")
    for m in members:
        m.close()

    # Nothing skipped, and each record as it was produced.
    consumed = {(p, o): k for _t, _m, p, o, k in timeline.messages}
    assert set(sent) <= set(consumed) and all(consumed[po] == key for po, key in sent.items())
    # No partition held by two members at once, and records consumed only while held.
    spans = timeline.intervals()
    for partition, held in spans.items():
        held.sort()
        for (_s1, e1, m1), (s2, _e2, m2) in pairwise(held):
            assert e1 <= s2, f"partition {partition} held by {m1} until {e1} and by {m2} from {s2}"
    for t, member, partition, offset, _key in timeline.messages:
        assert any(s <= t <= e and m == member for s, e, m in spans[partition]), (member, partition, offset)
    # No stop-the-world: what a member holds before and after a change is never revoked in between.
    for start, end, before, after in phases:
        for name, held in before.items():
            kept = held & after.get(name, set())
            revoked = {p for t, member, kind, p in timeline.events
                       if member == name and kind == "revoke" and start <= t <= end}
            assert not kept & revoked, f"{name} had {sorted(kept & revoked)} revoked although it kept them"
            if kept:  # and it went on consuming them, during the change and the second after it
                assert any(m == name and p in kept and start <= t <= end + 1.0
                           for t, m, p, _o, _k in timeline.messages), f"{name} stopped consuming {sorted(kept)}"
    assert not [e for m in members for e in m.errors if "ERR__PARTITION_EOF" not in e]
    assert srv.events("consumer_group_epoch_bumped")


def test_static_member_restarts_without_reassignment(srv: ServerProcess) -> None:
    timeline = Timeline()
    a = Member(srv.address, "a1", timeline, "static", instance_id="a")
    b = Member(srv.address, "b1", timeline, "static", instance_id="b")
    wait_until(settled([a, b]), 30, "two static members to share the partitions")
    a_before, b_before = a.assignment(), b.assignment()
    epochs_before = len(srv.events("consumer_group_epoch_bumped"))
    left_at = time.monotonic()
    a.close()  # a static member leaves with epoch -2: its partitions wait for it
    srv.wait_for_event("static_member_left_temporarily", group_instance_id="a")
    a2 = Member(srv.address, "a2", timeline, "static", instance_id="a")
    wait_until(lambda: a2.assignment() == a_before, 20, "the restarted member to get its partitions back")
    time.sleep(1.0)
    assert b.assignment() == b_before
    assert not [e for e in timeline.events if e[1] == "b1" and e[2] == "revoke" and e[0] > left_at]
    assert len(srv.events("consumer_group_epoch_bumped")) == epochs_before  # no rebalance at all
    srv.wait_for_event("static_member_replaced", group_instance_id="a")
    for m in (a2, b):
        m.close()


_KILLABLE = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "killed", "group.protocol": "consumer",
              "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[2]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_a_killed_member_is_fenced_and_its_partitions_move(srv: ServerProcess) -> None:
    timeline = Timeline()
    survivor = Member(srv.address, "survivor", timeline, "killed")
    wait_until(lambda: survivor.assignment() == set(range(PARTITIONS)), 20, "the first member's assignment")
    victim = subprocess.Popen([sys.executable, "-c", _KILLABLE, srv.address, TOPIC], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "assigned"
        wait_until(lambda: len(survivor.assignment()) == PARTITIONS // 2, 20, "the partitions to be shared")
        victim.kill()
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
    killed_at = time.monotonic()
    srv.wait_for_event("consumer_member_removed", timeout_s=20, reason="the member session expired")
    wait_until(lambda: survivor.assignment() == set(range(PARTITIONS)), 20, "the survivor to take everything")
    assert time.monotonic() - killed_at >= 5.0  # not before the 6 s session timeout
    survivor.close()


def test_server_kill9_and_restart_resumes_the_group_at_its_epochs(server_factory: ServerFactory) -> None:
    srv = server_factory(port=free_port(), **FLAGS)
    timeline = Timeline()
    members = [Member(srv.address, f"r{i}", timeline, "restart") for i in range(2)]
    wait_until(settled(members), 30, "two members to share the partitions")
    before = [m.assignment() for m in members]
    epoch_before = srv.events("consumer_group_target_assigned")[-1]["assignment_epoch"]
    killed_at = time.monotonic()
    joined = len(srv.events("consumer_member_joining"))
    srv.kill9()
    srv.start()
    time.sleep(4.0)  # the members find the coordinator again and heartbeat at their epochs
    assert [m.assignment() for m in members] == before
    assert not [e for e in timeline.events if e[2] == "revoke" and e[0] > killed_at]
    loaded = srv.events("coordinator_loaded")[-1]
    assert loaded["groups"] >= 1
    assert not [e for e in srv.events("consumer_group_target_assigned") if e["assignment_epoch"] > epoch_before]
    assert len(srv.events("consumer_member_joining")) == joined  # heartbeats at their epochs were accepted
    for m in members:
        m.close()


def test_admin_client_sees_a_consumer_group(srv: ServerProcess) -> None:
    from confluent_kafka.admin import AdminClient
    timeline = Timeline()
    member = Member(srv.address, "described", timeline, "described-group")
    wait_until(lambda: member.assignment() == set(range(PARTITIONS)), 20, "the assignment")
    admin = AdminClient({"bootstrap.servers": srv.address, "log_level": 0})
    listed = admin.list_consumer_groups().result(10)
    [group] = [g for g in listed.valid if g.group_id == "described-group"]
    assert group.type == confluent_kafka.ConsumerGroupType.CONSUMER
    described = admin.describe_consumer_groups(["described-group"])["described-group"].result(10)
    assert described.type == confluent_kafka.ConsumerGroupType.CONSUMER
    [m] = described.members
    assert m.client_id == "described"
    assert {tp.partition for tp in m.assignment.topic_partitions} == set(range(PARTITIONS))
    member.close()
