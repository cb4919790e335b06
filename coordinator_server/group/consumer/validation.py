"""ConsumerGroupHeartbeat's request checks, with Kafka's messages (throwIfConsumerGroupHeartbeatRequestIsInvalid,
throwIfConsumerGroupMemberEpochIsInvalid and their kin): pure functions that raise ConsumerGroupError."""
from __future__ import annotations

import uuid
from collections.abc import Iterable

import structlog

from protocol.errors import Errors

from .api import ConsumerGroupHeartbeatInput
from .errors import ConsumerGroupError, invalid_request
from .member import ConsumerGroupMember
from .records import Assignment

log = structlog.get_logger("coordinator_server.group.consumer")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2
CONSUMER_GENERATED_MEMBER_ID_VERSION = 1


def validate_request(inp: ConsumerGroupHeartbeatInput, assignors: tuple[str, ...]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, with its messages."""
    epoch = inp.member_epoch
    if inp.api_version >= CONSUMER_GENERATED_MEMBER_ID_VERSION or epoch > 0 or epoch == LEAVE_EPOCH:
        _throw_if_empty(inp.member_id, "MemberId can't be empty.")
    _throw_if_empty(inp.group_id, "GroupId can't be empty.")
    _throw_if_empty(inp.instance_id, "InstanceId can't be empty.")
    _throw_if_empty(inp.rack_id, "RackId can't be empty.")
    if epoch == JOIN_EPOCH:
        if inp.rebalance_timeout_ms == -1:
            raise invalid_request("RebalanceTimeoutMs must be provided in first request.")
        if inp.owned_partitions is None or inp.owned_partitions:
            raise invalid_request("TopicPartitions must be empty when (re-)joining.")
        if inp.subscribed_topic_names is None and inp.subscribed_topic_regex is None:
            raise invalid_request("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                  "when (re-)joining.")
    elif epoch == LEAVE_STATIC_EPOCH:
        if inp.instance_id is None:
            raise invalid_request("InstanceId can't be null.")
    elif epoch < LEAVE_STATIC_EPOCH:
        raise invalid_request("MemberEpoch is invalid.")
    if inp.server_assignor is not None and inp.server_assignor not in assignors:
        raise ConsumerGroupError(
            Errors.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {inp.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.")


def _throw_if_empty(value: str | None, message: str) -> None:
    if value is not None and not value.strip():
        raise invalid_request(message)


def _owned_subset(owned: Iterable[tuple[uuid.UUID, tuple[int, ...]]] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    for topic_id, partitions in owned:
        mine = assigned.get(topic_id)
        if mine is None or any(p not in mine for p in partitions):
            return False
    return True


def throw_if_epoch_invalid(member: ConsumerGroupMember, inp: ConsumerGroupHeartbeatInput) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid; epoch 0 is a rejoin and always accepted
    (KAFKA-19233: a fenced member rejoins with its own member id)."""
    received = inp.member_epoch
    if received == JOIN_EPOCH:
        return
    if received > member.member_epoch:
        raise ConsumerGroupError(Errors.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 f"all its partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.previous_member_epoch
            or not _owned_subset(inp.owned_partitions, member.assigned_partitions)):
        # The previous epoch with a subset of the assignment is a lost response: accepted.
        raise ConsumerGroupError(Errors.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 f"all its partitions and rejoin.")


def throw_if_instance_fenced(member: ConsumerGroupMember, group_id: str, member_id: str, instance_id: str) -> None:
    if member.member_id != member_id:
        log.info("static_member_fenced", group_id=group_id, member_id=member_id, group_instance_id=instance_id,
                 current_member_id=member.member_id, operation="consumer-group-heartbeat")
        raise ConsumerGroupError(Errors.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was fenced by member "
                                 f"{member.member_id}.")

