"""Committed-offset rules over real sockets:
OffsetCommit v1-9 / OffsetFetch v1-9 / OffsetDelete v0 built with kafka-python's message classes, the
member/generation/state rules against groups formed by the raw group client, durability across
`kill -9`, and the admin clients of kafka-python and confluent-kafka (librdkafka).
"""
from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import GroupSubscribedToTopicError, NoError
from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.structs import OffsetAndMetadata

from tests.client_contract import confluent_commit, kafka_python_commit, kafka_python_join

from .conftest import ServerFactory, ServerProcess
from .group_client import (
    ILLEGAL_GENERATION,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    Connection,
    GroupMember,
    ServerClosed,
    close_all,
    wait_until,
)

pytestmark = pytest.mark.integration

UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
INVALID_GROUP_ID = 24
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86

TOPICS = ["a:3", "b:2"]
NO_OFFSET = (-1, -1, "")  # (offset, leader epoch, metadata) of a partition with nothing committed

TP = tuple[str, int]


# ------------------------------------------------------------------------------------- raw helpers


def commit(conn: Connection, group: str, offsets: dict[TP, int | tuple[int, str | None]], *, version: int = 8,
           generation: int = -1, member_id: str = "", instance_id: str | None = None,
           leader_epoch: int = -1) -> dict[TP, int]:
    """OffsetCommit; `offsets` maps (topic, partition) to an offset or (offset, metadata). Returns the
    per-partition error codes."""
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), value in offsets.items():
        offset, metadata = value if isinstance(value, tuple) else (value, "")
        by_topic.setdefault(topic, []).append(T.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=offset, committed_leader_epoch=leader_epoch, commit_timestamp=-1,
            committed_metadata=metadata))
    req = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=instance_id, retention_time_ms=-1,
        topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])
    resp = conn.call(req, OffsetCommitResponse)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def member_commit(m: GroupMember, offsets: dict[TP, int], **kw: Any) -> set[int]:
    """A member's commit (its id and generation unless overridden); the set of error codes returned."""
    kw.setdefault("generation", m.generation_id)
    kw.setdefault("member_id", m.member_id)
    return set(commit(m.hb_conn, m.group_id, offsets, **kw).values())


def fetch(conn: Connection, group: str, topics: dict[str, list[int]] | None, *, version: int = 8,
          require_stable: bool = False) -> tuple[int | None, dict[TP, tuple[int, int, str | None, int]]]:
    """OffsetFetch of one group: (group-level error or None for v1, {(topic, p): (offset, leader epoch,
    metadata, error)}). Leader epochs are -1 below v5, which has no such field."""
    if version >= 8:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        req = OffsetFetchRequest[version](groups=[G(
            group_id=group, member_id=None, member_epoch=-1,
            topics=None if topics is None else [G.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                                for t, ps in topics.items()])], require_stable=require_stable)
        resp = conn.call(req, OffsetFetchResponse)
        assert [g.group_id for g in resp.groups] == [group]
        top, resp_topics = resp.groups[0].error_code, resp.groups[0].topics
    else:
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        req = OffsetFetchRequest[version](
            group_id=group, require_stable=require_stable,
            topics=None if topics is None else [T(name=t, partition_indexes=ps) for t, ps in topics.items()])
        resp = conn.call(req, OffsetFetchResponse)
        top, resp_topics = (resp.error_code if version >= 2 else None), resp.topics
    out = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch if version >= 5 else -1,
                                         p.metadata, p.error_code)
           for t in resp_topics for p in t.partitions}
    return top, out


def committed(conn: Connection, group: str, topics: dict[str, list[int]] | None = None) -> dict[TP, tuple[int, int, str]]:
    """(offset, leader epoch, metadata) per partition, via OffsetFetch v8, asserting no errors."""
    top, parts = fetch(conn, group, topics)
    assert top == NONE, top
    assert all(err == NONE for *_, err in parts.values()), parts
    return {tp: (o, e, str(m)) for tp, (o, e, m, _) in parts.items()}


def offset_delete(conn: Connection, group: str, partitions: dict[str, list[int]]) -> tuple[int, dict[TP, int]]:
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    req = OffsetDeleteRequest[0](group_id=group, topics=[
        T(name=t, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
        for t, ps in partitions.items()])
    resp = conn.call(req, OffsetDeleteResponse)
    return resp.error_code, {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def delete_groups(conn: Connection, groups: list[str], version: int = 2) -> dict[str, int]:
    resp = conn.call(DeleteGroupsRequest[version](groups_names=groups), DeleteGroupsResponse)
    return {r.group_id: r.error_code for r in resp.results}


@pytest.fixture
def srv(server_factory: ServerFactory) -> ServerProcess:
    server: ServerProcess = server_factory(topic=TOPICS, initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
    return server


@pytest.fixture
def conn(srv: ServerProcess) -> Iterator[Connection]:
    c = Connection((srv.host, srv.port), "offsets-test")
    yield c
    c.close()


@contextlib.contextmanager
def members(srv: ServerProcess, group: str, *names: str, **kw: Any) -> Iterator[list[GroupMember]]:
    ms = [GroupMember(srv, group, n, **kw) for n in names]
    try:
        yield ms
    finally:
        close_all(ms)


# ------------------------------------------------------------------------------ round trips per version


@pytest.mark.parametrize("commit_version", range(2, 10))
def test_commit_then_fetch_every_version(conn: Connection, commit_version: int) -> None:
    group = f"rt-{commit_version}"
    epoch = 7 if commit_version >= 6 else -1  # CommittedLeaderEpoch exists from v6; -1 by default
    errors = commit(conn, group, {("a", 0): (10, "meta-a0"), ("a", 2): (20, None), ("b", 1): (5, "")},
                    version=commit_version, leader_epoch=7)
    assert errors == {("a", 0): NONE, ("a", 2): NONE, ("b", 1): NONE}
    expected = {("a", 0): (10, epoch, "meta-a0"), ("a", 1): NO_OFFSET, ("a", 2): (20, epoch, ""),  # null -> ""
                ("b", 1): (5, epoch, ""), ("ghost", 0): NO_OFFSET}  # no topic-existence check on fetch
    for fetch_version in range(1, 10):
        top, parts = fetch(conn, group, {"a": [0, 1, 2], "b": [1], "ghost": [0]}, version=fetch_version)
        assert top == (None if fetch_version == 1 else NONE)
        want = {tp: (o, e if fetch_version >= 5 else -1, m, NONE) for tp, (o, e, m) in expected.items()}
        assert parts == want, f"OffsetCommit v{commit_version} -> OffsetFetch v{fetch_version}"
        if fetch_version >= 2:  # null topics: every committed partition of the group
            top, parts = fetch(conn, group, None, version=fetch_version)
            assert top == NONE
            assert parts == {tp: v for tp, v in want.items() if v[0] != -1}, f"fetch-all v{fetch_version}"
    # A later commit replaces the earlier one; others stay.
    assert commit(conn, group, {("a", 0): (11, "again")}, version=commit_version) == {("a", 0): NONE}
    assert committed(conn, group)[("a", 0)] == (11, -1, "again")
    assert committed(conn, group)[("b", 1)] == (5, epoch, "")


def test_fetch_of_unknown_group_every_version(conn: Connection) -> None:
    for version in range(1, 10):
        top, parts = fetch(conn, "never-seen", {"a": [0, 1]}, version=version)
        assert top == (None if version == 1 else NONE)
        assert parts == {("a", 0): (*NO_OFFSET, NONE), ("a", 1): (*NO_OFFSET, NONE)}
        if version >= 2:
            assert fetch(conn, "never-seen", None, version=version) == (NONE, {})


def test_offset_fetch_v8_several_groups_in_one_request(conn: Connection) -> None:
    assert set(commit(conn, "g1", {("a", 0): 1, ("a", 1): 2}).values()) == {NONE}
    assert set(commit(conn, "g2", {("b", 0): (3, "x")}, version=9).values()) == {NONE}
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    for version in (8, 9):
        req = OffsetFetchRequest[version](require_stable=False, groups=[
            G(group_id="g1", member_id=None, member_epoch=-1,
              topics=[G.OffsetFetchRequestTopics(name="a", partition_indexes=[1, 2])]),
            G(group_id="g2", member_id=None, member_epoch=-1, topics=None),
            G(group_id="g3", member_id=None, member_epoch=-1, topics=None),
            G(group_id="g3", member_id=None, member_epoch=-1,
              topics=[G.OffsetFetchRequestTopics(name="b", partition_indexes=[0])]),
        ])
        resp = conn.call(req, OffsetFetchResponse)
        got = [(g.group_id, g.error_code, sorted((t.name, p.partition_index, p.committed_offset, p.metadata, p.error_code)
                                                 for t in g.topics for p in t.partitions)) for g in resp.groups]
        assert got == [
            ("g1", NONE, [("a", 1, 2, "", NONE), ("a", 2, -1, "", NONE)]),
            ("g2", NONE, [("b", 0, 3, "x", NONE)]),
            ("g3", NONE, []),
            ("g3", NONE, [("b", 0, -1, "", NONE)]),
        ]


# ------------------------------------------------------------------------------ per-partition errors


def test_commit_to_unknown_topic_or_partition(conn: Connection) -> None:
    errors = commit(conn, "unk", {("a", 0): 4, ("ghost", 0): 1, ("ghost", 1): 1, ("a", 3): 1, ("b", 1): 2})
    assert errors == {("a", 0): NONE, ("ghost", 0): UNKNOWN_TOPIC_OR_PARTITION, ("ghost", 1): UNKNOWN_TOPIC_OR_PARTITION,
                      ("a", 3): UNKNOWN_TOPIC_OR_PARTITION, ("b", 1): NONE}
    assert committed(conn, "unk") == {("a", 0): (4, -1, ""), ("b", 1): (2, -1, "")}
    # Nothing but unknown partitions: answered by the API layer, no group validation at all, so a
    # made-up generation of a group that does not exist still gets 3, not ILLEGAL_GENERATION.
    assert commit(conn, "nobody", {("ghost", 0): 1}, generation=5, member_id="m") == {("ghost", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert fetch(conn, "nobody", None) == (NONE, {})


def test_metadata_longer_than_4096_is_refused_per_partition(conn: Connection) -> None:
    errors = commit(conn, "meta", {("a", 0): (1, "x" * 4097), ("a", 1): (2, "y" * 4096), ("a", 2): (3, "ok")})
    assert errors == {("a", 0): OFFSET_METADATA_TOO_LARGE, ("a", 1): NONE, ("a", 2): NONE}
    assert committed(conn, "meta", {"a": [0, 1, 2]}) == {("a", 0): NO_OFFSET, ("a", 1): (2, -1, "y" * 4096),
                                                          ("a", 2): (3, -1, "ok")}
    # String length is what counts: 4096 two-byte characters are allowed.
    assert commit(conn, "meta", {("a", 0): (5, "é" * 4096)}) == {("a", 0): NONE}
    assert committed(conn, "meta", {"a": [0]})[("a", 0)] == (5, -1, "é" * 4096)


# ------------------------------------------------------------------------------ member rules


def test_member_generation_and_state_rules(srv: ServerProcess, conn: Connection) -> None:
    tp = {("a", 0): 1}
    with members(srv, "rules", "m1", "m2") as (m1, m2):
        join = m1.join()
        assert join.error_code == NONE and join.generation_id == 1
        # CompletingRebalance: the join is done, the SyncGroup not yet.
        assert member_commit(m1, tp) == {REBALANCE_IN_PROGRESS}
        assert m1.sync({m1.member_id: b""}).error_code == NONE
        # Stable.
        assert member_commit(m1, {("a", 0): 10}) == {NONE}
        assert commit(conn, "rules", tp) == {("a", 0): UNKNOWN_MEMBER_ID}  # simple consumer into a live group
        assert member_commit(m1, tp, member_id="someone-else") == {UNKNOWN_MEMBER_ID}
        assert member_commit(m1, tp, generation=2) == {ILLEGAL_GENERATION}
        assert member_commit(m1, tp, generation=0) == {ILLEGAL_GENERATION}
        # A newcomer moves the group to PreparingRebalance: generation 1 is still current, commits count.
        parked = m2.send_join()
        wait_until(lambda: m1.heartbeat() == REBALANCE_IN_PROGRESS, what="PreparingRebalance")
        assert member_commit(m1, {("a", 0): 11}) == {NONE}
        assert commit(conn, "rules", tp) == {("a", 0): UNKNOWN_MEMBER_ID}
        assert m1.join().error_code == NONE
        assert parked.result().error_code == NONE
        assert m1.generation_id == m2.generation_id == 2
        # CompletingRebalance of generation 2; generation 1 is now stale.
        assert member_commit(m2, tp) == {REBALANCE_IN_PROGRESS}
        assert member_commit(m1, tp, generation=1) == {ILLEGAL_GENERATION}
        leader, follower = (m1, m2) if m1.is_leader else (m2, m1)
        pending = follower.send_sync()
        assert leader.sync({m1.member_id: b"", m2.member_id: b""}).error_code == NONE
        assert pending.result().error_code == NONE
        assert member_commit(m1, tp, generation=1) == {ILLEGAL_GENERATION}
        assert member_commit(m2, {("a", 1): 21}) == {NONE}
        assert committed(conn, "rules") == {("a", 0): (11, -1, ""), ("a", 1): (21, -1, "")}
        # Both leave: Empty again, and a simple consumer may commit.
        m1.leave()
        m2.leave()
    assert commit(conn, "rules", {("a", 0): 12}) == {("a", 0): NONE}
    # Generation -1 on an Empty group skips member checks even with a member id.
    assert commit(conn, "rules", {("a", 0): 13}, member_id="gone") == {("a", 0): NONE}
    assert commit(conn, "rules", {("a", 0): 14}, generation=3, member_id="gone") == {("a", 0): UNKNOWN_MEMBER_ID}
    assert committed(conn, "rules", {"a": [0]}) == {("a", 0): (13, -1, "")}


# ------------------------------------------------------------------------------ OffsetDelete


def subscribed_consumer(srv: ServerProcess, group: str, topic: str) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=srv.address, group_id=group, enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    kafka_python_join(consumer, [topic], bool)
    return consumer


def test_offset_delete(srv: ServerProcess, conn: Connection) -> None:
    # Empty (simple) group: every requested partition is deleted, with or without an offset.
    assert set(commit(conn, "od", {("a", 0): 1, ("a", 1): 2, ("b", 0): 3}).values()) == {NONE}
    assert offset_delete(conn, "od", {"a": [0, 2]}) == (NONE, {("a", 0): NONE, ("a", 2): NONE})
    assert committed(conn, "od") == {("a", 1): (2, -1, ""), ("b", 0): (3, -1, "")}
    assert offset_delete(conn, "od", {"ghost": [0], "b": [7]}) == (
        NONE, {("ghost", 0): UNKNOWN_TOPIC_OR_PARTITION, ("b", 7): UNKNOWN_TOPIC_OR_PARTITION})
    assert offset_delete(conn, "nope", {"a": [0]})[0] == GROUP_ID_NOT_FOUND
    assert offset_delete(conn, "", {"a": [0]})[0] == INVALID_GROUP_ID

    # A live consumer group subscribed to "a": its partitions are protected, "b" is not.
    assert set(commit(conn, "od-live", {("a", 0): 5, ("b", 0): 6}).values()) == {NONE}
    consumer = subscribed_consumer(srv, "od-live", "a")
    try:
        assert offset_delete(conn, "od-live", {"a": [0], "b": [0]}) == (
            NONE, {("a", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("b", 0): NONE})
        assert committed(conn, "od-live") == {("a", 0): (5, -1, "")}
    finally:
        consumer.close(autocommit=False)
    # Once it left, the group is Empty and the offset can go.
    assert offset_delete(conn, "od-live", {"a": [0]}) == (NONE, {("a", 0): NONE})
    assert committed(conn, "od-live") == {}

    # A non-empty group of another protocol type: NON_EMPTY_GROUP at the top, no partitions.
    with members(srv, "od-connect", "w1", protocol_type="connect") as (w1,):
        assert w1.join().error_code == NONE
        assert w1.sync({w1.member_id: b""}).error_code == NONE
        assert member_commit(w1, {("a", 0): 1}) == {NONE}
        top, parts = offset_delete(conn, "od-connect", {"a": [0]})
        assert (top, parts) == (NON_EMPTY_GROUP, {})
        assert committed(conn, "od-connect") == {("a", 0): (1, -1, "")}


# ------------------------------------------------------------------------------ durability


def test_acknowledged_commits_survive_kill9(srv: ServerProcess) -> None:
    c = Connection((srv.host, srv.port), "durable")
    with members(srv, "dur-member", "m1") as (m1,):
        assert m1.join().error_code == NONE
        assert m1.sync({m1.member_id: b""}).error_code == NONE
        for version in range(1, 10):
            assert set(commit(c, f"dur-v{version}", {("a", 0): (version, f"v{version}"), ("b", 1): 100 + version},
                              version=version, leader_epoch=3).values()) == {NONE}
        assert set(commit(c, "dur-v9", {("a", 0): (99, "last")}).values()) == {NONE}  # overwritten
        assert set(commit(c, "dur-del", {("a", 1): 1, ("a", 2): 2}).values()) == {NONE}
        assert offset_delete(c, "dur-del", {"a": [1]}) == (NONE, {("a", 1): NONE})
        assert set(commit(c, "dur-gone", {("a", 1): 1}).values()) == {NONE}
        assert delete_groups(c, ["dur-gone"]) == {"dur-gone": NONE}
        assert member_commit(m1, {("b", 0): 77}) == {NONE}
        c.close()
        srv.kill9()
    srv.restart()
    c = Connection((srv.host, srv.port), "durable")
    try:
        for version in range(1, 9):
            assert committed(c, f"dur-v{version}") == {("a", 0): (version, 3 if version >= 6 else -1, f"v{version}"),
                                                       ("b", 1): (100 + version, 3 if version >= 6 else -1, "")}
        assert committed(c, "dur-v9") == {("a", 0): (99, -1, "last"), ("b", 1): (109, 3, "")}
        assert committed(c, "dur-del") == {("a", 2): (2, -1, "")}
        assert committed(c, "dur-gone") == {}
        assert committed(c, "dur-member") == {("b", 0): (77, -1, "")}
        assert delete_groups(c, ["dur-gone"]) == {"dur-gone": GROUP_ID_NOT_FOUND}
    finally:
        c.close()


def test_commit_stream_killed_at_a_random_point(srv: ServerProcess) -> None:
    """Commits of increasing offsets, one after the other, and a SIGKILL at a random moment: after the
    restart the offset is the last acknowledged one, or the one in flight when the server died."""
    c = Connection((srv.host, srv.port), "stream")
    state = {"acked": 0, "sent": 0}

    def loop() -> None:
        try:
            for i in range(1, 1_000_000):
                state["sent"] = i
                assert commit(c, "stream", {("a", 0): i, ("b", 1): 2 * i}) == {("a", 0): NONE, ("b", 1): NONE}
                state["acked"] = i
        except (ServerClosed, OSError):
            pass

    t = threading.Thread(target=loop)
    t.start()
    wait_until(lambda: state["acked"] >= 20, what="some acknowledged commits")
    time.sleep(random.uniform(0, 0.3))
    srv.kill9()
    t.join(10)
    c.close()
    acked, sent = state["acked"], state["sent"]
    srv.restart()
    c = Connection((srv.host, srv.port), "stream")
    try:
        got = committed(c, "stream")
        assert got[("a", 0)][0] in (acked, sent), (got, acked, sent)
        assert got[("b", 1)][0] == 2 * got[("a", 0)][0], got  # one commit request is written atomically
    finally:
        c.close()


# ------------------------------------------------------------------------------ admin clients


def test_kafka_python_admin_client(srv: ServerProcess, conn: Connection) -> None:
    """kafka-python 3.0.12 names them list_groups / describe_groups / list_group_offsets / delete_groups /
    delete_group_offsets / alter_group_offsets (there are no *_consumer_group* methods)."""
    assert set(commit(conn, "adm-empty", {("b", 1): (9, "x")}).values()) == {NONE}
    consumer = subscribed_consumer(srv, "adm-live", "a")
    admin = KafkaAdminClient(bootstrap_servers=srv.address, client_id="offsets-admin", request_timeout_ms=10_000)
    try:
        kafka_python_commit(consumer, {TopicPartition("a", 0): OffsetAndMetadata(3, "md", -1)})
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups["adm-empty"] == {"group_id": "adm-empty", "protocol_type": "", "group_state": "Empty",
                                       "group_type": "classic"}
        assert groups["adm-live"] == {"group_id": "adm-live", "protocol_type": "consumer", "group_state": "Stable",
                                      "group_type": "classic"}
        assert [g["group_id"] for g in admin.list_groups(states_filter=["stable"])] == ["adm-live"]

        described = admin.describe_groups(["adm-live", "adm-empty", "nope"])
        live = described["adm-live"]
        assert (live["group_state"], live["protocol_type"], live["protocol_data"], live["error"]) == \
            ("Stable", "consumer", "range", None)
        [member] = live["members"]
        assert member["client_host"] == "/127.0.0.1"
        assert member["member_metadata"]["topics"] == ["a"]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "a", "partitions": [0, 1, 2]}]
        assert (described["adm-empty"]["group_state"], described["adm-empty"]["members"]) == ("Empty", [])
        # DescribeGroups v6 (Kafka 4's, which kafka-python negotiates) names the missing group's error.
        assert (described["nope"]["group_state"], described["nope"]["error"]) == \
            ("Dead", "[Error 69] GroupIdNotFoundError: Group nope not found.")

        offsets = admin.list_group_offsets({"adm-live": None,
                                            "adm-empty": [TopicPartition("b", 0), TopicPartition("b", 1)]})
        assert offsets == {
            "adm-live": {TopicPartition("a", 0): OffsetAndMetadata(3, "md", -1)},
            "adm-empty": {TopicPartition("b", 0): OffsetAndMetadata(-1, "", -1),
                          TopicPartition("b", 1): OffsetAndMetadata(9, "x", -1)},
        }
        assert admin.alter_group_offsets("adm-empty", {TopicPartition("b", 0): OffsetAndMetadata(4, "", -1)}) == \
            {TopicPartition("b", 0): NoError}
        assert admin.delete_group_offsets("adm-live", [TopicPartition("a", 0), TopicPartition("b", 0)]) == \
            {TopicPartition("a", 0): GroupSubscribedToTopicError, TopicPartition("b", 0): NoError}
        assert admin.delete_groups(["adm-empty", "adm-live", "nope"]) == \
            {"adm-empty": "OK", "adm-live": "NonEmptyGroupError", "nope": "GroupIdNotFoundError"}
        assert admin.describe_groups(["adm-empty"])["adm-empty"]["group_state"] == "Dead"
        assert admin.list_group_offsets("adm-empty") == {"adm-empty": {}}
        consumer.close(autocommit=False)
        assert admin.delete_groups(["adm-live"]) == {"adm-live": "OK"}
        assert not {g["group_id"] for g in admin.list_groups()} & {"adm-live", "adm-empty"}
    finally:
        consumer.close(autocommit=False)
        admin.close()


def test_confluent_kafka_admin_client(srv: ServerProcess, conn: Connection) -> None:
    """librdkafka's admin API. confluent-kafka has no delete_consumer_group_offsets (librdkafka's
    DeleteConsumerGroupOffsets is not bound in Python); alter_consumer_group_offsets is OffsetCommit."""
    from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient

    assert set(commit(conn, "cf-empty", {("b", 1): (9, "x")}).values()) == {NONE}
    consumer = Consumer({"bootstrap.servers": srv.address, "group.id": "cf-live", "enable.auto.commit": False,
                         "session.timeout.ms": 6000})
    consumer.subscribe(["a"])
    try:
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.1)
        confluent_commit(consumer, offsets=[CTP("a", 0, 3)])
        admin = AdminClient({"bootstrap.servers": srv.address})

        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert listed.errors == []
        states = {g.group_id: (g.is_simple_consumer_group, g.state) for g in listed.valid}
        assert states["cf-live"] == (False, ConsumerGroupState.STABLE)
        assert states["cf-empty"] == (True, ConsumerGroupState.EMPTY)

        described = {k: f.result() for k, f in admin.describe_consumer_groups(["cf-live", "cf-empty"],
                                                                              request_timeout=10).items()}
        live = described["cf-live"]
        assert (live.is_simple_consumer_group, live.state, live.partition_assignor) == (False, ConsumerGroupState.STABLE, "range")
        assert (live.coordinator.host, live.coordinator.port) == (srv.host, srv.port)
        [member] = live.members
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [("a", 0), ("a", 1), ("a", 2)]
        assert (described["cf-empty"].state, described["cf-empty"].members) == (ConsumerGroupState.EMPTY, [])

        def offsets_of(request: Any) -> list[tuple[str, int, int, Any]]:
            # Not tp.metadata: confluent-kafka 2.16.1 returns it with bytes past its end (librdkafka copies
            # metadata_size bytes without the NUL, the binding reads it as a C string): "hello" comes back
            # as "hello\x7f" or a UnicodeDecodeError. The server's bytes are right (raw OffsetFetch above).
            [(group, fut)] = admin.list_consumer_group_offsets([request]).items()
            res = fut.result()
            assert res.group_id == group
            return sorted((tp.topic, tp.partition, tp.offset, tp.error) for tp in res.topic_partitions)

        assert offsets_of(ConsumerGroupTopicPartitions("cf-live")) == [("a", 0, 3, None)]
        assert offsets_of(ConsumerGroupTopicPartitions("cf-empty", [CTP("b", 1), CTP("b", 0)])) == [
            ("b", 0, -1001, None), ("b", 1, 9, None)]  # -1001: librdkafka's OFFSET_INVALID

        [(_, fut)] = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("cf-empty", [CTP("b", 0, 4)])]).items()
        assert [(tp.partition, tp.offset, tp.error) for tp in fut.result().topic_partitions] == [(0, 4, None)]
        assert committed(conn, "cf-empty") == {("b", 0): (4, -1, ""), ("b", 1): (9, -1, "x")}

        deleted = admin.delete_consumer_groups(["cf-empty", "cf-live", "nope"], request_timeout=10)
        assert deleted["cf-empty"].result() is None
        for group, code in (("cf-live", NON_EMPTY_GROUP), ("nope", GROUP_ID_NOT_FOUND)):
            with pytest.raises(KafkaException) as err:
                deleted[group].result()
            assert err.value.args[0].code() == code
        assert committed(conn, "cf-empty") == {}
        assert committed(conn, "cf-live") == {("a", 0): (3, -1, "")}
    finally:
        consumer.close()
