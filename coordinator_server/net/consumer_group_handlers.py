"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848): decode → runtime → encode.

Authorization as Kafka's API layer does it: READ on the group for a heartbeat (GROUP_AUTHORIZATION_FAILED),
and DESCRIBE on every topic a member names in its subscription (TOPIC_AUTHORIZATION_FAILED);
DESCRIBE on each described group.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from coordinator_server.group.consumer.api import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatResult,
    DescribedMember,
    DescribedTopicPartitions,
)
from coordinator_server.net.awaiting import as_future
from coordinator_server.security.authorizer import Access
from protocol.consumer_group_messages import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse
from protocol.errors import Errors


class ConsumerGroupRuntime(Protocol):
    def consumer_group_heartbeat(self, inp: ConsumerGroupHeartbeatInput,
                                 on_result: Callable[[ConsumerGroupHeartbeatResult], None],
                                 on_failure: Callable[[BaseException], None]) -> None: ...
    async def consumer_group_describe(self, group_ids: list[str]) -> list[ConsumerGroupDescription]: ...


class ConsumerGroupHandlers:
    def __init__(self, runtime: ConsumerGroupRuntime) -> None:
        self.runtime = runtime

    async def heartbeat(self, req: Any, version: int, access: Access, client_id: str, client_host: str) -> Any:
        if not access.group("READ", req.group_id):
            return heartbeat_response(ConsumerGroupHeartbeatResult(Errors.GROUP_AUTHORIZATION_FAILED), version)
        denied = sorted(t for t in req.subscribed_topic_names or () if not access.topic("DESCRIBE", t))
        if denied:
            return heartbeat_response(ConsumerGroupHeartbeatResult(
                Errors.TOPIC_AUTHORIZATION_FAILED, f"The following topics are not authorized: {', '.join(denied)}."),
                version)
        inp = heartbeat_input(req, version, client_id, client_host)
        return heartbeat_response(await as_future(self.runtime.consumer_group_heartbeat, inp), version)

    async def describe(self, req: Any, version: int, access: Access) -> Any:
        ids = list(req.group_ids)
        allowed = [g for g in ids if access.group("DESCRIBE", g)]
        described = iter(await self.runtime.consumer_group_describe(allowed) if allowed else [])
        out = [next(described) if access.group("DESCRIBE", g) else
               ConsumerGroupDescription(g, Errors.GROUP_AUTHORIZATION_FAILED) for g in ids]
        operations = None
        if req.include_authorized_operations:
            # As Kafka: only a group answered without an error says what the caller may do to it.
            operations = [access.group_operations(d.group_id) if d.error is Errors.NONE else None for d in out]
        return describe_response(out, version, operations)


# -- requests in, responses out (the messages: protocol/consumer_group_messages.py) -------------------------------------------------------------------------

def heartbeat_input(req: Any, version: int, client_id: str, client_host: str) -> ConsumerGroupHeartbeatInput:
    """The version-free core input of a ConsumerGroupHeartbeat request (v0 has no regex)."""
    owned = None if req.topic_partitions is None else tuple(
        (tp.topic_id, tuple(tp.partitions)) for tp in req.topic_partitions)
    names = None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names)
    return ConsumerGroupHeartbeatInput(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms, subscribed_topic_names=names,
        subscribed_topic_regex=req.subscribed_topic_regex if version >= 1 else None,
        server_assignor=req.server_assignor, owned_partitions=owned, api_version=version, client_id=client_id,
        client_host=client_host,
    )


def heartbeat_response(result: ConsumerGroupHeartbeatResult, version: int) -> Any:
    cls: Any = ConsumerGroupHeartbeatResponse  # built from its JSON schema at import: not indexable to mypy
    assignment = None
    if result.assignment is not None:
        assignment = cls.Assignment(topic_partitions=[
            cls.Assignment.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(result.assignment.items(), key=lambda kv: kv[0].bytes)])
    return cls[version](
        throttle_time_ms=0, error_code=int(result.error), error_message=result.error_message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment,
    )


# ConsumerGroupDescribe's AuthorizedOperations when they were not asked for (INT32_MIN).
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def authorized_operations_bits(codes: frozenset[int]) -> int:
    """ConsumerGroupDescribe's AuthorizedOperations: a 32-bit field, bit N for the operation of code N."""
    return sum(1 << code for code in codes)


def describe_response(groups: list[ConsumerGroupDescription], version: int,
                      authorized_operations: list[frozenset[int] | None] | None = None) -> Any:
    """`authorized_operations`, one per group when the request asked for them: the operation codes the
    caller may do on that group, or None for a group not described (an error)."""
    cls: Any = ConsumerGroupDescribeResponse  # (as above)
    operations = [AUTHORIZED_OPERATIONS_OMITTED if ops is None else authorized_operations_bits(ops)
                  for ops in authorized_operations or [None] * len(groups)]
    group_cls = cls.DescribedGroup
    member_cls = group_cls.Member
    assignment_cls = member_cls.Assignment

    def assignment(partitions: tuple[DescribedTopicPartitions, ...]) -> Any:
        return assignment_cls(topic_partitions=[
            assignment_cls.TopicPartitions(topic_id=tp.topic_id, topic_name=tp.topic_name, partitions=list(tp.partitions))
            for tp in partitions])

    def member(m: DescribedMember) -> Any:
        extra = {"member_type": m.member_type} if version >= 1 else {}
        return member_cls(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            # Kafka describes a member with no regex with an empty one, not null.
            subscribed_topic_regex=m.subscribed_topic_regex or "", assignment=assignment(m.assignment),
            target_assignment=assignment(m.target_assignment), **extra)

    return cls[version](throttle_time_ms=0, groups=[
        group_cls(error_code=int(g.error), error_message=g.error_message, group_id=g.group_id, group_state=g.state,
                  group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch, assignor_name=g.assignor_name,
                  members=[member(m) for m in g.members], authorized_operations=ops)
        for g, ops in zip(groups, operations, strict=True)])
