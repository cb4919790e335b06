"""The group coordinator's settings, with Kafka's defaults (GroupCoordinatorConfig).

A leaf: it imports nothing of the group package, so every module of it may read these."""
from __future__ import annotations

from dataclasses import dataclass

# Kafka's NewMemberJoinTimeoutMs: a new member whose JoinGroup stays parked this long is dropped.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes = 10080
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2_147_483_647
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = OFFSETS_RETENTION_MS
    offsets_retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS
    # KIP-394 pending members one group may hold; the oldest is forgotten beyond it (docs/durability.md)
    group_max_pending_members: int = 10_000
