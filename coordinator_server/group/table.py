"""The shard's one group table: every group it coordinates, whatever its type, under its group id.

Group ids are one namespace. An id names one group of one type at a time — a classic group
(`GroupMetadata`) or a KIP-848 consumer group (`ConsumerGroup`) — so a conversion between the protocols
replaces the table's entry rather than adding a second one. Code that needs one type asks for it by type
(the shard's `classic_group` / `consumer_group`) and gets None for an id held by a group of another type;
what that means (GROUP_ID_NOT_FOUND "is not a classic group", a classic member inside a consumer group...)
is the caller's to say. Code that walks every group dispatches on the type with isinstance, one branch per
type, so that a new type (share or streams groups) is one more member of `Group` and one more branch.
"""
from __future__ import annotations

from typing import TypeAlias

from .consumer.group import ConsumerGroup
from .group import GroupMetadata

Group: TypeAlias = GroupMetadata | ConsumerGroup
