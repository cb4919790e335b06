"""Classic-protocol members inside a consumer group (KIP-848's migration; Kafka's
classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup and
classicGroupLeaveToConsumerGroup).

Such a member speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup, and the coordinator computes its assignment:
- JoinGroup is the member's heartbeat with its subscription (the embedded ConsumerProtocolSubscription:
  topics and owned partitions): it runs the same update → target → reconcile step as ConsumerGroupHeartbeat
  and answers with generation = the member epoch, no leader and no members (so the client is a follower);
- SyncGroup answers the member's assigned partitions as a ConsumerProtocolAssignment (by topic name);
- Heartbeat answers REBALANCE_IN_PROGRESS while the member must rejoin to move on: the group epoch is ahead
  of it, it has partitions to revoke, or partitions it waits for were released;
- LeaveGroup removes the members named, with one group epoch bump.
A classic member's liveness is its own session timeout; it must rejoin (after REBALANCE_IN_PROGRESS) and
sync (after a JoinGroup answer) within its rebalance timeout, or it is fenced.
"""
from __future__ import annotations

import uuid
from dataclasses import replace

import structlog

from protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    MalformedConsumerProtocol,
    decode_subscription,
    encode_assignment,
)
from protocol.errors import Errors

from ..api import (
    JoinCallback,
    JoinGroupInput,
    JoinGroupResult,
    LeaveGroupInput,
    LeaveGroupResult,
    LeaveMemberResult,
    SyncCallback,
    SyncGroupInput,
    SyncGroupResult,
)
from ..records import CoordinatorRecord
from .api import ConsumerGroupHeartbeatInput
from .errors import ConsumerGroupError, unknown_member
from .group import ConsumerGroup
from .manager import ConsumerGroupManager
from .member import ConsumerGroupMember, MemberState
from .records import ClassicMemberMetadata, ClassicProtocol

log = structlog.get_logger("coordinator_server.group.consumer")

# JoinGroup v4+: a dynamic member without an id is given one and asked to come back with it (KIP-394).
_MEMBER_ID_REQUIRED_VERSION = 4


class ClassicMembers:
    def __init__(self, manager: ConsumerGroupManager) -> None:
        self.manager = manager

    # -- JoinGroup ---------------------------------------------------------------------------------------

    def join(self, group: ConsumerGroup, inp: JoinGroupInput, respond: JoinCallback) -> None:
        m = self.manager
        unknown = inp.member_id == ""
        member_id = m.new_member_id() if unknown else inp.member_id
        try:
            m.throw_if_full(group, member_id)
            _throw_if_protocols_unsupported(group, member_id, inp)
            if unknown and inp.group_instance_id is None and inp.api_version >= _MEMBER_ID_REQUIRED_VERSION:
                log.info("consumer_member_id_required", group_id=group.group_id, member_id=member_id)
                respond(JoinGroupResult(Errors.MEMBER_ID_REQUIRED, member_id=member_id))
                return
            try:
                subscription = decode_subscription(inp.protocols[0][1])
            except MalformedConsumerProtocol as e:
                raise ConsumerGroupError(Errors.INCONSISTENT_GROUP_PROTOCOL, str(e)) from None
            records: list[CoordinatorRecord] = []
            # The consumer protocol's join, as far as finding or replacing the member goes.
            as_heartbeat = ConsumerGroupHeartbeatInput(group.group_id, member_id, 0, inp.group_instance_id)
            if inp.group_instance_id is None:
                member = m.dynamic_member(group, member_id, as_heartbeat, True)
            else:
                member = m.static_member(group, member_id, as_heartbeat, True, records, classic=True)
            predecessor = group.static_member(inp.group_instance_id)
            target_owner = predecessor.member_id if predecessor is not None else member.member_id
            classic = ClassicMemberMetadata(inp.session_timeout_ms,
                                            tuple(ClassicProtocol(name, data) for name, data in inp.protocols))
            updated = replace(
                member, instance_id=inp.group_instance_id, client_id=inp.client_id, client_host=inp.client_host,
                rack_id=subscription.rack_id or member.rack_id, rebalance_timeout_ms=inp.rebalance_timeout_ms,
                server_assignor_name=None, subscribed_topic_names=frozenset(subscription.topics),
                subscribed_topic_regex=None, classic_member_metadata=classic)
            owned = self._owned_ids(subscription.owned_partitions)
            updated = m.update_member(group, member, updated, target_owner, owned, records)
        except ConsumerGroupError as e:
            respond(JoinGroupResult(e.error, member_id=inp.member_id))
            return
        result = JoinGroupResult(Errors.NONE, generation_id=updated.member_epoch,
                                 protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=inp.protocols[0][0],
                                 member_id=updated.member_id)
        group_id = group.group_id

        def on_written(error: Errors) -> None:
            if error is not Errors.NONE:
                respond(JoinGroupResult(m.write_error(error), member_id=inp.member_id))
                return
            m.cancel_timer(group_id, updated.member_id, "join")
            if m.group(group_id) is not None:  # still a consumer group
                m.schedule_session_timeout(group_id, updated.member_id)
                m.schedule_classic_timeout(group_id, updated, "sync")
            respond(result)

        if records:
            m.append(group_id, tuple(records), on_written)
        else:
            on_written(Errors.NONE)

    def _owned_ids(self, owned: dict[str, tuple[int, ...]]) -> dict[uuid.UUID, tuple[int, ...]]:
        out: dict[uuid.UUID, tuple[int, ...]] = {}
        for name, partitions in owned.items():
            topic = self.manager.topics.topic(name)
            if topic is not None:
                out[topic.topic_id] = partitions
        return out

    # -- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------------------------

    def sync(self, group: ConsumerGroup, inp: SyncGroupInput, respond: SyncCallback) -> None:
        try:
            member = self._validate(group, inp.member_id, inp.group_instance_id, inp.generation_id)
            meta = member.classic_member_metadata
            assert meta is not None
            names = [p.name for p in meta.supported_protocols]
            if (inp.protocol_type is not None and inp.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    inp.protocol_name is not None and inp.protocol_name not in names):
                raise ConsumerGroupError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                         f"The protocol of member {member.member_id} does not match the group's.")
            self._throw_if_rebalance_in_progress(group, member)
        except ConsumerGroupError as e:
            respond(SyncGroupResult(e.error))
            return
        m = self.manager
        m.cancel_timer(group.group_id, member.member_id, "sync")
        m.schedule_session_timeout(group.group_id, member.member_id)
        protocol = inp.protocol_name or names[0]
        metadata = next(p.metadata for p in meta.supported_protocols if p.name == protocol)
        respond(SyncGroupResult(Errors.NONE, CONSUMER_PROTOCOL_TYPE, protocol, self._assignment(member, metadata)))

    def _assignment(self, member: ConsumerGroupMember, subscription: bytes) -> bytes:
        by_name: dict[str, tuple[int, ...]] = {}
        for topic_id, partitions in member.assigned_partitions.items():
            topic = self.manager.topics.topic_by_id(topic_id)
            if topic is not None:
                by_name[topic.name] = tuple(sorted(partitions))
        return encode_assignment(by_name, decode_subscription(subscription).version)

    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int) -> Errors:
        try:
            member = self._validate(group, member_id, instance_id, generation_id)
        except ConsumerGroupError as e:
            return e.error
        m = self.manager
        m.schedule_session_timeout(group.group_id, member.member_id)
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not _waiting_on_unreleased_partition(group, member))):
            m.schedule_classic_timeout(group.group_id, member, "join")
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def leave(self, group: ConsumerGroup, inp: LeaveGroupInput) -> LeaveGroupResult:
        """Answered at once, as the classic LeaveGroup is; the records follow to the log."""
        results: list[LeaveMemberResult] = []
        leaving: list[ConsumerGroupMember] = []
        for who in inp.members:
            try:
                member = self._leaving_member(group, who.member_id, who.group_instance_id)
            except ConsumerGroupError as e:
                results.append(LeaveMemberResult(who.member_id, who.group_instance_id, e.error))
                continue
            if member.member_id not in {m.member_id for m in leaving}:
                leaving.append(member)
            results.append(LeaveMemberResult(who.member_id, who.group_instance_id, Errors.NONE))
        if leaving:
            reason = "; ".join(f"LeaveGroup; client reason: {w.reason or 'not provided'}" for w in inp.members[:1])
            records = self.manager.fence_members(group, leaving, reason, "leave")
            self.manager.append(group.group_id, tuple(records), lambda error: None)
        return LeaveGroupResult(Errors.NONE, results)

    def _leaving_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise unknown_member(member_id, group.group_id)
            _throw_if_not_classic(member)
            return member
        member = group.static_member(instance_id)
        if member is None:
            raise ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member_id and member.member_id != member_id:  # "" is an admin removing the instance
            raise ConsumerGroupError(Errors.FENCED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {instance_id} was fenced by member "
                                     f"{member.member_id}.")
        return member

    # -- checks ------------------------------------------------------------------------------------------

    def _validate(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                  generation_id: int) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember, then the member must be classic and at its epoch."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise unknown_member(member_id, group.group_id)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise ConsumerGroupError(Errors.FENCED_INSTANCE_ID,
                                         f"Static member {member_id} with instance id {instance_id} was fenced by "
                                         f"member {member.member_id}.")
        _throw_if_not_classic(member)
        if generation_id != member.member_epoch:
            raise ConsumerGroupError(Errors.ILLEGAL_GENERATION,
                                     f"The generation id {generation_id} does not match the member epoch "
                                     f"{member.member_epoch} of member {member_id}.")
        return member

    def _throw_if_rebalance_in_progress(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """A newer group epoch: rejoin to catch up, unless the member is still revoking (its next join
        finishes that, and catches up if it must)."""
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self.manager.schedule_classic_timeout(group.group_id, member, "join")
            raise ConsumerGroupError(Errors.REBALANCE_IN_PROGRESS,
                                     f"A new rebalance is triggered in group {group.group_id} and member "
                                     f"{member.member_id} should rejoin to catch up.")


def _throw_if_not_classic(member: ConsumerGroupMember) -> None:
    if not member.uses_classic_protocol:
        raise ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID,
                                 f"Member {member.member_id} does not use the classic protocol.")


def _throw_if_protocols_unsupported(group: ConsumerGroup, member_id: str, inp: JoinGroupInput) -> None:
    """Kafka's supportsClassicProtocols: the consumer protocol type, and one protocol every classic member
    of the group supports."""
    names = {name for name, _ in inp.protocols}
    supported = False
    if inp.protocol_type == CONSUMER_PROTOCOL_TYPE and names:
        counts: dict[str, int] = {}
        classic = 0
        for other in group.members.values():
            meta = other.classic_member_metadata
            if meta is None or other.member_id == member_id:
                continue
            classic += 1
            for protocol in meta.supported_protocols:
                counts[protocol.name] = counts.get(protocol.name, 0) + 1
        supported = classic == 0 or any(counts.get(name, 0) == classic for name in names)
    if not supported:
        raise ConsumerGroupError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                 f"The group {group.group_id} does not support the protocols of member {member_id}.")


def _waiting_on_unreleased_partition(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Some partition of the member's target is still owned by another member (Kafka's
    waitingOnUnreleasedPartition): rejoining now would not get it."""
    for topic_id, partitions in group.member_target(member.member_id).items():
        mine = member.assigned_partitions.get(topic_id, frozenset())
        for partition in partitions:
            if partition not in mine and group.current_partition_epoch(topic_id, partition) != -1:
                return True
    return False
