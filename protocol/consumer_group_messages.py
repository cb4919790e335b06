"""The KIP-848 consumer group protocol's requests, which kafka-python has no class for:
ConsumerGroupHeartbeat (api key 68) and ConsumerGroupDescribe (api key 69).

The JSON specs in `protocol/schemas/` are Kafka 4.x's own message specs; kafka-python's ApiMessage turns
them into classes that encode and decode exactly as its built-in ones (headers included), as for
ControlledShutdown (`protocol/broker_messages.py`); below them, the translation between these messages and
the core's version-free inputs and results, as `protocol/group_messages.py` does for the classic APIs.
No I/O here.
"""
from __future__ import annotations

import warnings
from typing import Any

from coordinator_server.group.consumer.api import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatResult,
    DescribedMember,
    DescribedTopicPartitions,
)

with warnings.catch_warnings():
    # kafka-python reads JSON specs with importlib.resources functions deprecated since Python 3.11.
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage

    _SCHEMAS = f"{__package__}.schemas"

    class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
        subscribed_topic_names, subscribed_topic_regex (v1+), server_assignor, topic_partitions."""

    class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """error_code, error_message, member_id, member_epoch, heartbeat_interval_ms, assignment."""

    class ConsumerGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_ids, include_authorized_operations."""

    class ConsumerGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """groups: error, state, epochs, assignor, members (assignment, target assignment, type v1+)."""


# KIP-848's member epochs in a request: 0 joins, -1 leaves, -2 leaves for now (a static member).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# From v1 the member id is the consumer's own (KIP-1082); v0 lets the coordinator make one up.
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
# ConsumerGroupDescribe's MemberType (v1+): what protocol a member speaks.
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


# -- requests in, responses out -------------------------------------------------------------------------

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
