"""ConsumerGroupHeartbeat: joining, heartbeating, leaving and being fenced (KIP-848; Kafka's
GroupMetadataManager for consumer groups).

Theory of operation. A heartbeat runs in three steps against the group as it stands, collecting records:
1. the member is created or updated; a change of its subscription (names, regex, the topics they resolve
   to) bumps the group epoch;
2. if the group epoch is ahead of the target assignment's, the assignor computes a new target for every
   member (one epoch, one assignment, whoever's heartbeat got there first);
3. the member is reconciled one step towards its target (`reconciliation.py`).
The records are then applied to the group (the one way hard state changes, and the same apply that
replays the log at load) and handed to the shell; the response waits until they are durable. A write
that fails answers the member with the mapped error; the group stays as applied, which is what the log
of this leader holds or will hold (docs/decisions.md, "KIP-848 consumer groups").

Timers, keyed per member and replaced on every schedule: the session timeout (reset by every heartbeat;
expiry fences the member) and the rebalance timeout (set when a member must revoke partitions; it is
fenced if it has not done so at that epoch by then). Both re-check the group when they fire. They, the
group table and fencing are the base class's (liveness.py); the request checks are validation.py's.
"""
from __future__ import annotations

import uuid
from dataclasses import replace

import structlog

from protocol.errors import Errors

from ..records import CoordinatorRecord, OffsetCommitValue
from . import regex as regexes
from .api import (
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatResult,
    HeartbeatCallback,
)
from .assignors import PartitionAssignorError
from .errors import ConsumerGroupError, group_not_found, invalid_request, not_a_consumer_group, unknown_member
from .group import ConsumerGroup
from .liveness import FENCE_KINDS as FENCE_KINDS
from .liveness import ConsumerGroupEvents as ConsumerGroupEvents
from .liveness import ConsumerGroupLiveness, member_tombstones
from .liveness import ConsumerGroupsHost as ConsumerGroupsHost
from .member import ConsumerGroupMember, MemberState, new_member
from .reconciliation import FencedByReconciliation, reconcile
from .records import (
    Assignment,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRegularExpressionRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ResolvedRegex,
    TopicMetadata,
    assignment_partitions,
)
from .settings import REGEX_REFRESH_INTERVAL_MS
from .target import build_target_assignment, subscribed_topics
from .validation import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    throw_if_epoch_invalid,
    throw_if_instance_fenced,
    validate_request,
)

log = structlog.get_logger("coordinator_server.group.consumer")


class ConsumerGroupManager(ConsumerGroupLiveness):
    # -- ConsumerGroupHeartbeat --------------------------------------------------------------------------

    def handle_heartbeat(self, inp: ConsumerGroupHeartbeatInput, respond: HeartbeatCallback) -> None:
        error = self.host.validate_group_status(inp.group_id)
        if error is not None:
            respond(ConsumerGroupHeartbeatResult(error))
            return
        try:
            validate_request(inp, self.config.assignors)
            if inp.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                records, result = self._leave(inp)
            else:
                records, result = self._heartbeat(inp)
        except ConsumerGroupError as e:
            respond(ConsumerGroupHeartbeatResult(e.error, e.message))
            return
        if not records:
            respond(result)
            return

        def on_written(error: Errors) -> None:
            if error is Errors.NONE:
                respond(result)
            else:
                log.warning("consumer_group_write_failed", group_id=inp.group_id, member_id=inp.member_id,
                            error=error.name)
                respond(ConsumerGroupHeartbeatResult(self.write_error(error)))

        self.append(inp.group_id, tuple(records), on_written)

    def _heartbeat(self, inp: ConsumerGroupHeartbeatInput) -> tuple[list[CoordinatorRecord], ConsumerGroupHeartbeatResult]:
        records: list[CoordinatorRecord] = []
        joining = inp.member_epoch == JOIN_EPOCH
        group, taken_over = self._get_or_maybe_create_group(inp.group_id, joining, records)
        member_id = inp.member_id or self.new_member_id()
        self.throw_if_full(group, member_id)
        if inp.instance_id is None:
            member = self.dynamic_member(group, member_id, inp, joining)
        else:
            member = self.static_member(group, member_id, inp, joining, records)
        # A static member replaced under a new id keeps its predecessor's target until the next epoch.
        predecessor = group.static_member(inp.instance_id)
        target_owner = predecessor.member_id if predecessor is not None else member.member_id
        owned = None if inp.owned_partitions is None else {t: p for t, p in inp.owned_partitions}
        updated = self.update_member(group, member, self._updated_member(member, inp), target_owner, owned, records)
        if taken_over is not None:
            group.offsets = taken_over
        self.schedule_session_timeout(group.group_id, updated.member_id)
        result = ConsumerGroupHeartbeatResult(Errors.NONE, None, updated.member_id, updated.member_epoch,
                                              self.config.heartbeat_interval_ms)
        full_request = joining or (inp.rebalance_timeout_ms != -1 and inp.owned_partitions is not None and (
            inp.subscribed_topic_names is not None or inp.subscribed_topic_regex is not None))
        if full_request or updated.assigned_partitions != member.assigned_partitions:
            result.assignment = updated.assigned_partitions
        return records, result

    def update_member(self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                      target_owner: str, owned: dict[uuid.UUID, tuple[int, ...]] | None,
                      records: list[CoordinatorRecord]) -> ConsumerGroupMember:
        """Steps 1-3 of a heartbeat (or of a classic member's JoinGroup): write the member's change, bump
        the group epoch if its subscription or the subscribed topics changed, compute a new target if the
        group epoch is ahead of it, reconcile the member one step, and apply the records to the group."""
        resolved = dict(group.resolved_regexes)
        bump_reasons: list[str] = []
        if not updated.metadata_equal(member) or updated.member_id not in group.members:
            records.append(ConsumerGroupMemberMetadataRecord(group.group_id, updated.member_id, updated.metadata_value()))
        self._maybe_update_regexes(group, member, updated, resolved, records)
        if subscribed_topics(updated, resolved) != subscribed_topics(member, group.resolved_regexes):
            bump_reasons.append(f"member {updated.member_id} changed its subscription")
        metadata = group.subscription_metadata
        metadata_version = None
        if bump_reasons or group.metadata_version != self.topics.version:
            metadata_version = self.topics.version
            metadata = self._subscription_metadata(group, member, updated, resolved)
            if metadata != group.subscription_metadata:
                records.append(ConsumerGroupPartitionMetadataRecord(group.group_id, tuple(sorted(
                    metadata.values(), key=lambda t: t.name))))
                bump_reasons.append("the subscribed topics' metadata changed")
        group_epoch = group.group_epoch
        if bump_reasons:
            group_epoch += 1
            records.append(ConsumerGroupMetadataRecord(group.group_id, group_epoch))
            reason = "; ".join(bump_reasons)
            log.info("consumer_group_epoch_bumped", group_id=group.group_id, group_epoch=group_epoch, reason=reason)
            self.events.on_group_epoch_bump(group.group_id, reason)
        if group_epoch > group.assignment_epoch:
            target = self._update_target_assignment(group, group_epoch, member, updated, target_owner, metadata,
                                                    resolved, records)
            target_epoch = group_epoch
        else:
            target = group.member_target(target_owner)
            target_epoch = group.assignment_epoch
        updated = self._maybe_reconcile(group, updated, target_epoch, target, owned, metadata, resolved, records)
        self._apply(group, records)
        if metadata_version is not None:
            group.metadata_version = metadata_version
        return updated

    # -- the group and the member ---------------------------------------------------------------------

    def _get_or_maybe_create_group(self, group_id: str, create: bool, records: list[CoordinatorRecord]
                                   ) -> tuple[ConsumerGroup, dict[tuple[str, int], OffsetCommitValue] | None]:
        group = self.group(group_id)
        if group is not None:
            return group, None
        classic_empty = self.host.classic_group_is_empty(group_id)
        if classic_empty is None:
            if not create:
                raise group_not_found(group_id)
            return ConsumerGroup(group_id), None
        if create and classic_empty:
            # Kafka's maybeDeleteEmptyClassicGroup: an empty classic group gives way, keeping its offsets.
            offsets, tombstone = self.host.take_over_classic_group(group_id)
            records.append(tombstone)
            log.info("classic_group_replaced", group_id=group_id, offsets=len(offsets),
                     reason="a consumer protocol member joined the empty classic group")
            return ConsumerGroup(group_id), offsets
        if create:
            return self._upgrade(group_id), None
        raise not_a_consumer_group(group_id)

    def _upgrade(self, group_id: str) -> ConsumerGroup:
        """KIP-848's online upgrade: the classic group with members becomes a consumer group (`group/migration.py`).
        Its records are written at once, ahead of the joining member's, so whatever the heartbeat then
        refuses, the log and the group agree."""
        converted = self.host.upgrade_classic_group(group_id)
        if converted is None:
            raise not_a_consumer_group(group_id)
        records, offsets = converted
        group = ConsumerGroup(group_id)
        self._apply(group, records)
        group.offsets = offsets
        for member_id in group.members:
            self.schedule_session_timeout(group_id, member_id)
        self.append(group_id, tuple(records), lambda error: None)
        log.info("consumer_group_upgraded", group_id=group_id, members=len(group.members),
                 group_epoch=group.group_epoch, reason="a consumer protocol member joined the classic group")
        return group

    def throw_if_full(self, group: ConsumerGroup, member_id: str) -> None:
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise ConsumerGroupError(Errors.GROUP_MAX_SIZE_REACHED,
                                     f"The consumer group has reached its maximum capacity of "
                                     f"{self.config.max_size} members.")

    def dynamic_member(self, group: ConsumerGroup, member_id: str, inp: ConsumerGroupHeartbeatInput,
                       joining: bool) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise unknown_member(member_id, group.group_id)
            log.info("consumer_member_joining", group_id=group.group_id, member_id=member_id, protocol="consumer")
            return new_member(member_id)
        throw_if_epoch_invalid(member, inp)
        return member

    def static_member(self, group: ConsumerGroup, member_id: str, inp: ConsumerGroupHeartbeatInput, joining: bool,
                      records: list[CoordinatorRecord], classic: bool = False) -> ConsumerGroupMember:
        """The static member a request is for; a new member id for a known instance replaces the old member
        if that one left (epoch -2), speaks the classic protocol, or `classic` (a JoinGroup) is asking."""
        instance_id = inp.instance_id
        assert instance_id is not None
        existing = group.static_member(instance_id)
        if not joining:
            if existing is None:
                raise ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            throw_if_instance_fenced(existing, group.group_id, member_id, instance_id)
            throw_if_epoch_invalid(existing, inp)
            return existing
        if existing is None:
            member = group.members.get(member_id)
            if member is not None:
                # A known member id may not take an instance id it did not join with.
                raise invalid_request(f"Member {member_id} cannot change its instance id to {instance_id}.")
            log.info("consumer_member_joining", group_id=group.group_id, member_id=member_id,
                     group_instance_id=instance_id, protocol="consumer")
            return new_member(member_id)
        if existing.member_id == member_id:
            # The same process again (a lost response, or after FENCED_MEMBER_EPOCH): handled in place.
            if existing.member_epoch == LEAVE_STATIC_EPOCH:
                return existing.update_epoch(0)
            return existing
        if existing.member_epoch != LEAVE_STATIC_EPOCH and not existing.uses_classic_protocol and not classic:
            log.info("static_member_unreleased", group_id=group.group_id, member_id=member_id,
                     group_instance_id=instance_id, current_member_id=existing.member_id)
            raise ConsumerGroupError(
                Errors.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} cannot join the group because the "
                f"instance id is owned by {existing.member_id} member.")
        # The instance restarted: the new member id takes over the old one's assignment, epoch 0.
        replacement = _rename(existing, member_id)
        records.extend(member_tombstones(group.group_id, existing.member_id))
        records.append(ConsumerGroupMemberMetadataRecord(group.group_id, member_id, replacement.metadata_value()))
        records.append(ConsumerGroupTargetAssignmentMemberRecord(group.group_id, member_id,
                                                                 group.member_target(existing.member_id)))
        records.append(ConsumerGroupCurrentMemberAssignmentRecord(group.group_id, member_id,
                                                                  replacement.assignment_value()))
        self._cancel_timers(group.group_id, existing.member_id)
        log.info("static_member_replaced", group_id=group.group_id, group_instance_id=instance_id,
                 old_member_id=existing.member_id, member_id=member_id, protocol="consumer")
        return replacement

    def _updated_member(self, member: ConsumerGroupMember, inp: ConsumerGroupHeartbeatInput) -> ConsumerGroupMember:
        changes: dict[str, object] = {"client_id": inp.client_id, "client_host": inp.client_host,
                                      "classic_member_metadata": None}
        if inp.instance_id is not None:
            changes["instance_id"] = inp.instance_id
        if inp.rack_id is not None:
            changes["rack_id"] = inp.rack_id
        if inp.rebalance_timeout_ms != -1:
            changes["rebalance_timeout_ms"] = inp.rebalance_timeout_ms
        if inp.server_assignor is not None:
            changes["server_assignor_name"] = inp.server_assignor
        if inp.subscribed_topic_names is not None:
            changes["subscribed_topic_names"] = frozenset(inp.subscribed_topic_names)
        if inp.subscribed_topic_regex is not None:
            changes["subscribed_topic_regex"] = inp.subscribed_topic_regex or None
        return replace(member, **changes)  # type: ignore[arg-type]

    # -- subscriptions ------------------------------------------------------------------------------------

    def _maybe_update_regexes(self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                              resolved: dict[str, ResolvedRegex], records: list[CoordinatorRecord]) -> None:
        """Resolve a regex a member brings, drop one nobody uses any more, and re-resolve the group's
        regexes when topics changed (at most every REGEX_REFRESH_INTERVAL_MS, as Kafka batches them)."""
        old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
        now_ms = self.host.now_ms
        if old != new:
            if old and group.subscribed_regexes.get(old, 0) == 1 and member.member_id in group.members:
                records.append(ConsumerGroupRegularExpressionRecord(group.group_id, old, None))
                resolved.pop(old, None)
            if new and new not in resolved:
                try:
                    regexes.validate(new)
                except regexes.InvalidRegularExpression as e:
                    raise ConsumerGroupError(Errors.INVALID_REGULAR_EXPRESSION, str(e)) from None
                self._resolve(group, new, resolved, records)
        in_use = set(group.subscribed_regexes) | ({new} if new else set())
        stale = [r for r in in_use if r in resolved and resolved[r].version != self.topics.version]
        if stale and now_ms - group.last_regex_refresh_ms >= REGEX_REFRESH_INTERVAL_MS:
            for regex in sorted(stale):
                self._resolve(group, regex, resolved, records)

    def _resolve(self, group: ConsumerGroup, regex: str, resolved: dict[str, ResolvedRegex],
                 records: list[CoordinatorRecord]) -> None:
        topics = regexes.resolve(regex, self.topics.topic_names())
        value = ResolvedRegex(topics, self.topics.version, self.host.wall_ms)
        previous = resolved.get(regex)
        resolved[regex] = value
        group.last_regex_refresh_ms = self.host.now_ms
        if previous is None or previous.topics != topics or previous.version != value.version:
            records.append(ConsumerGroupRegularExpressionRecord(group.group_id, regex, value))
            log.info("consumer_group_regex_resolved", group_id=group.group_id, regex=regex, topics=len(topics))

    def _subscription_metadata(self, group: ConsumerGroup, member: ConsumerGroupMember | None,
                               updated: ConsumerGroupMember | None, resolved: dict[str, ResolvedRegex]
                               ) -> dict[str, TopicMetadata]:
        """The subscribed topics' metadata with `member` replaced by `updated` (None: removed)."""
        names: set[str] = set()
        for other in group.members.values():
            if member is not None and other.member_id == member.member_id:
                continue
            names |= subscribed_topics(other, resolved)
        if updated is not None:
            names |= subscribed_topics(updated, resolved)
        metadata = {}
        for name in names:
            topic = self.topics.topic(name)
            if topic is not None:
                metadata[name] = topic
        return metadata

    # -- target assignment and reconciliation -------------------------------------------------------------

    def _update_target_assignment(self, group: ConsumerGroup, epoch: int, member: ConsumerGroupMember,
                                  updated: ConsumerGroupMember, target_owner: str, metadata: dict[str, TopicMetadata],
                                  resolved: dict[str, ResolvedRegex], records: list[CoordinatorRecord]) -> Assignment:
        members = dict(group.members)
        previous = dict(group.target_assignment)
        if target_owner != updated.member_id:  # a static member replaced: its target goes to the new id
            members.pop(target_owner, None)
            previous[updated.member_id] = previous.pop(target_owner, {})
        members[updated.member_id] = updated
        assignor = self._preferred_assignor(group, member, updated)
        try:
            target, target_records = build_target_assignment(group.group_id, epoch, assignor, members, previous,
                                                              resolved, metadata)
        except PartitionAssignorError as e:
            message = f"Failed to compute a new target assignment for epoch {epoch}: {e}"
            log.error("consumer_group_assignment_failed", group_id=group.group_id, error=message)
            raise ConsumerGroupError(Errors.UNKNOWN_SERVER_ERROR, message) from e
        records.extend(target_records)
        log.info("consumer_group_target_assigned", group_id=group.group_id, assignment_epoch=epoch, assignor=assignor,
                 # the members whose target changed: counting every member's partitions here would cost
                 # a pass over the group on every epoch, logged or not
                 members=len(members), changed=len(target_records) - 1)
        return target.get(updated.member_id, {})

    def _preferred_assignor(self, group: ConsumerGroup, member: ConsumerGroupMember,
                            updated: ConsumerGroupMember) -> str:
        counts = dict(group.server_assignors)
        if member.server_assignor_name and member.member_id in group.members:
            counts[member.server_assignor_name] -= 1
        if updated.server_assignor_name:
            counts[updated.server_assignor_name] = counts.get(updated.server_assignor_name, 0) + 1
        counts = {k: v for k, v in counts.items() if v > 0}
        if not counts:
            return self.config.default_assignor
        return max(counts.items(), key=lambda kv: kv[1])[0]

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, target_epoch: int,
                         target: Assignment, owned: dict[uuid.UUID, tuple[int, ...]] | None,
                         metadata: dict[str, TopicMetadata], resolved: dict[str, ResolvedRegex],
                         records: list[CoordinatorRecord]) -> ConsumerGroupMember:
        if member.is_reconciled_to(target_epoch) and member.member_id in group.members:
            return member
        topic_ids = frozenset(metadata[n].topic_id for n in subscribed_topics(member, resolved) if n in metadata)
        try:
            updated = reconcile(member, target_epoch, target, owned, group.current_partition_epoch, topic_ids)
        except FencedByReconciliation as e:
            raise ConsumerGroupError(Errors.FENCED_MEMBER_EPOCH, str(e)) from None
        if updated != member or member.member_id not in group.members:
            records.append(ConsumerGroupCurrentMemberAssignmentRecord(group.group_id, updated.member_id,
                                                                      updated.assignment_value()))
            log.debug("consumer_member_reconciled", group_id=group.group_id, member_id=updated.member_id,
                      member_epoch=updated.member_epoch, previous_epoch=updated.previous_member_epoch,
                      state=updated.state.name, assigned=assignment_partitions(updated.assigned_partitions),
                      revoking=assignment_partitions(updated.partitions_pending_revocation))
            if updated.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group.group_id, updated)
            else:
                self.cancel_timer(group.group_id, updated.member_id, "rebalance")
        return updated

    # -- leaving and fencing ------------------------------------------------------------------------------

    def _leave(self, inp: ConsumerGroupHeartbeatInput) -> tuple[list[CoordinatorRecord], ConsumerGroupHeartbeatResult]:
        group = self.group(inp.group_id)
        if group is None:
            if self.host.classic_group_is_empty(inp.group_id) is not None:
                raise not_a_consumer_group(inp.group_id)
            raise group_not_found(inp.group_id)
        result = ConsumerGroupHeartbeatResult(Errors.NONE, None, inp.member_id, inp.member_epoch)
        if inp.instance_id is None:
            member = group.members.get(inp.member_id)
            if member is None:
                raise unknown_member(inp.member_id, group.group_id)
            return self._fence(group, member, "the member left the group", "leave"), result
        member = group.static_member(inp.instance_id)
        if member is None:
            raise ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {inp.instance_id} is unknown.")
        throw_if_instance_fenced(member, group.group_id, inp.member_id, inp.instance_id)
        if inp.member_epoch == LEAVE_STATIC_EPOCH:
            # It will be back within its session timeout: keep its partitions, only mark it away.
            away = replace(member, member_epoch=LEAVE_STATIC_EPOCH, partitions_pending_revocation={})
            records: list[CoordinatorRecord] = [ConsumerGroupCurrentMemberAssignmentRecord(
                group.group_id, member.member_id, away.assignment_value())]
            self._apply(group, records)
            self.cancel_timer(group.group_id, member.member_id, "rebalance")
            log.info("static_member_left_temporarily", group_id=group.group_id, member_id=member.member_id,
                     group_instance_id=inp.instance_id)
            return records, result
        return self._fence(group, member, "the static member left the group", "leave"), result


def _rename(member: ConsumerGroupMember, member_id: str) -> ConsumerGroupMember:
    return replace(member, member_id=member_id, member_epoch=0, previous_member_epoch=0)

