"""The consumer group's rules for committed offsets (Kafka's ConsumerGroup.validateOffsetCommit and
validateOffsetFetch): a member commits and fetches at its current member epoch.

The offsets themselves are stored exactly as a classic group's (`coordinator_server/group/offsets.py`
writes them, the consumer group holds them); only who may commit differs.
"""
from __future__ import annotations

from protocol.errors import Errors

from .errors import ConsumerGroupError, unknown_member
from .group import ConsumerGroup

# KIP-848 members commit with OffsetCommit v9+ (the version that carries a member epoch meaningfully).
OFFSET_COMMIT_MIN_VERSION = 9


def validate_offset_commit(group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int) -> None:
    """Raise ConsumerGroupError unless this commit may go in. An epoch below 0 is an admin tool or a
    consumer without group management: allowed only while the group has no members."""
    if member_epoch < 0 and not group.members:
        return
    member = group.members.get(member_id)
    if member is None:
        raise unknown_member(member_id, group.group_id)
    if not member.uses_classic_protocol and api_version < OFFSET_COMMIT_MIN_VERSION:
        raise ConsumerGroupError(Errors.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by "
                                                             "members using the modern group protocol")
    _validate_epoch(member_epoch, member.member_epoch, member.uses_classic_protocol)


def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
    """OffsetFetch v9+ may name a member: then it must be one, at its current epoch."""
    if member_id is None and member_epoch < 0:
        return
    member = group.members.get(member_id or "")
    if member is None:
        raise unknown_member(member_id or "", group.group_id)
    _validate_epoch(member_epoch, member.member_epoch, member.uses_classic_protocol)


def _validate_epoch(received: int, expected: int, classic: bool) -> None:
    if received != expected:
        if classic:
            raise ConsumerGroupError(Errors.ILLEGAL_GENERATION, f"The received generation id {received} does not "
                                                                f"match the expected member epoch {expected}.")
        raise ConsumerGroupError(Errors.STALE_MEMBER_EPOCH, f"The received member epoch {received} does not match "
                                                            f"the expected member epoch {expected}.")
