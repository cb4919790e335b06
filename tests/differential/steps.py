"""The requests the scenarios send, each recorded under a label (tests/differential/harness.py)."""
from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.differential.harness import Run
from tests.integration.group_client import MEMBER_ID_REQUIRED, NONE, Connection, GroupMember, wait_until

# A member id no broker handed out, in the format brokers use (client id, then a UUID).
UNKNOWN_MEMBER = "client-x-00000000-0000-0000-0000-000000000000"


def member(run: Run, client_id: str, group: str = "g", **kwargs: Any) -> GroupMember:
    kwargs.setdefault("session_timeout_ms", 10_000)
    return GroupMember(run.target, run.group(group), client_id, **kwargs)


def join_without_id(run: Run, m: GroupMember, label: str, version: int = 5, **overrides: Any) -> Any:
    """A dynamic member's first JoinGroup, with no member id (v4+: answered MEMBER_ID_REQUIRED with its id)."""
    resp = run.record(label, m.conn.call(m.join_request(version, member_id="", **overrides), JoinGroupResponse))
    if resp.error_code == MEMBER_ID_REQUIRED:
        m.member_id = resp.member_id
    return resp


def join_new(run: Run, m: GroupMember, label: str, version: int = 5, **overrides: Any) -> Any:
    """A new dynamic member's join, both round trips recorded (v4+: MEMBER_ID_REQUIRED, then the join)."""
    if version >= 4 and m.group_instance_id is None:
        first = join_without_id(run, m, f"{label}: join without id", version, **overrides)
        assert first.error_code == MEMBER_ID_REQUIRED, first
    return run.record(f"{label}: join", m.join(version, member_id_required=False, **overrides))


def heartbeat(run: Run, m: GroupMember, label: str, version: int = 4, **overrides: Any) -> Any:
    fields: dict[str, Any] = dict(group_id=m.group_id, generation_id=m.generation_id, member_id=m.member_id,
                                  group_instance_id=m.group_instance_id)
    fields.update(overrides)
    return run.record(label, m.hb_conn.call(HeartbeatRequest[version](**fields), HeartbeatResponse))


def await_rebalance(run: Run, m: GroupMember, label: str, version: int = 4) -> Any:
    """Heartbeat until the group is rebalancing (another member's join has reached the coordinator); only
    the answer that says so is recorded."""
    def rebalancing() -> Any:
        resp = m.hb_conn.call(HeartbeatRequest[version](group_id=m.group_id, generation_id=m.generation_id,
                                                        member_id=m.member_id, group_instance_id=m.group_instance_id),
                              HeartbeatResponse)
        return resp if resp.error_code != NONE else None
    return run.record(label, wait_until(rebalancing, what="REBALANCE_IN_PROGRESS"))


def leave(run: Run, m: GroupMember, label: str, version: int = 5, member_id: str | None = None) -> Any:
    member_id = m.member_id if member_id is None else member_id
    if version >= 3:
        request = LeaveGroupRequest[version](group_id=m.group_id, members=[LeaveGroupRequest.MemberIdentity(
            member_id=member_id, group_instance_id=m.group_instance_id, reason="differential")])
    else:
        request = LeaveGroupRequest[version](group_id=m.group_id, member_id=member_id)
    return run.record(label, m.hb_conn.call(request, LeaveGroupResponse))


def call(run: Run, label: str, request: Any, response_cls: Any) -> Any:
    conn = Connection((run.target.host, run.target.port), "differential")
    try:
        return run.record(label, conn.call(request, response_cls))
    finally:
        conn.close()


def describe(run: Run, label: str, groups: list[str], version: int = 5) -> Any:
    return call(run, label, DescribeGroupsRequest[version](groups=groups, include_authorized_operations=False),
                DescribeGroupsResponse)


def create_topic(run: Run, name: str, partitions: int) -> None:
    """CreateTopics (recorded), then wait until Metadata shows every partition with a leader (not recorded:
    how soon a broker's metadata catches up is its own business)."""
    t = CreateTopicsRequest.CreatableTopic
    call(run, f"create topic {name}", CreateTopicsRequest[4](topics=[t(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10_000, validate_only=False), CreateTopicsResponse)
    request = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name=name)],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    def ready() -> bool:
        conn = Connection((run.target.host, run.target.port), "differential")
        try:
            topic = conn.call(request, MetadataResponse).topics[0]
        finally:
            conn.close()
        return topic.error_code == 0 and len(topic.partitions) == partitions and all(
            p.error_code == 0 and p.leader_id >= 0 for p in topic.partitions)
    wait_until(ready, what=f"topic {name} with leaders")


def commit(run: Run, label: str, version: int, group: str, topic: str, offsets: dict[int, int], *,
           generation: int = -1, member_id: str = "", metadata: str = "", conn: Connection | None = None) -> Any:
    t = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        retention_time_ms=-1, topics=[t(name=topic, partitions=[t.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=metadata) for p, o in offsets.items()])])
    if conn is not None:
        return run.record(label, conn.call(request, OffsetCommitResponse))
    return call(run, label, request, OffsetCommitResponse)


def fetch_offsets(run: Run, label: str, version: int, group: str, topics: dict[str, list[int]] | None) -> Any:
    if version >= 8:
        g = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest[version](groups=[g(
            group_id=group, member_id=None, member_epoch=-1,
            topics=None if topics is None else [g.OffsetFetchRequestTopics(name=n, partition_indexes=ps)
                                                for n, ps in topics.items()])], require_stable=True)
    else:
        t = OffsetFetchRequest.OffsetFetchRequestTopic
        request = OffsetFetchRequest[version](group_id=group, require_stable=True, topics=None if topics is None else [
            t(name=n, partition_indexes=ps) for n, ps in topics.items()])
    return call(run, label, request, OffsetFetchResponse)
