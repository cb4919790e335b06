"""The consumer group settings, with Kafka 4.x's defaults (GroupCoordinatorConfig's group.consumer.*).

A leaf: it imports nothing of the package."""
from __future__ import annotations

from dataclasses import dataclass

# group.consumer.migration.policy's values (Kafka's ConsumerGroupMigrationPolicy).
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")

# Kafka re-resolves a group's regular expressions at most this often (REGEX_BATCH_REFRESH_INTERVAL_MS).
REGEX_REFRESH_INTERVAL_MS = 10_000


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    max_size: int = 2_147_483_647  # group.consumer.max.size
    # group.consumer.assignors: the first is the default (Kafka: uniform, then range).
    assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled.
    migration_policy: str = "bidirectional"

    @property
    def default_assignor(self) -> str:
        return self.assignors[0]
