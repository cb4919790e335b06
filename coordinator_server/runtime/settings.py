"""The group core's settings, read from the node's configuration."""
from __future__ import annotations

from coordinator_server.config import Config, consumer_group_assignors
from coordinator_server.group.consumer.settings import ConsumerGroupConfig
from coordinator_server.group.coordinator import GroupConfig


def consumer_group_config(config: Config) -> ConsumerGroupConfig:
    return ConsumerGroupConfig(
        heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        session_timeout_ms=config.group_consumer_session_timeout_ms,
        max_size=config.group_consumer_max_size,
        assignors=consumer_group_assignors(config),
        migration_policy=config.group_consumer_migration_policy,
    )


def group_config(config: Config) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=config.min_session_timeout_ms,
        max_session_timeout_ms=config.max_session_timeout_ms,
        initial_rebalance_delay_ms=config.initial_rebalance_delay_ms,
        group_max_size=config.group_max_size,
        group_max_pending_members=config.group_max_pending_members,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
    )
