"""Kafka's `__consumer_offsets` record schemas as kafka-python data classes.

The JSON specs in `protocol/schemas/` are Kafka's own message specs ("type": "data"); kafka-python's
`ApiData` turns each into a class with `encode(version=..., header=True)` / `decode(data, header=True)`,
where the header is the int16 version Kafka writes before every key and value. No I/O here.

The key version doubles as the record type: 0 and 1 are offset commits, 2 is group metadata, 3-8 and 16
are KIP-848 consumer group records; share and streams group types this server does not read.
"""
from __future__ import annotations

import warnings
from typing import Any

# kafka-python 3.0.12 reads every JSON spec with importlib.resources.read_text/open_text, deprecated since
# Python 3.11. The warning is about kafka-python's code, and under pytest's `filterwarnings = error` it
# would make importing kafka, and defining the classes below, fail; so both happen with it muted.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.api_data import ApiData

    # The JSON files live next to this module; kafka-python reads them with importlib.resources.
    _SCHEMAS = f"{__package__}.schemas"

    class OffsetCommitKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group, topic, partition (versions 0 and 1 share one layout)."""

    class OffsetCommitValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """offset, leader_epoch (v3+), metadata, commit_timestamp, expire_timestamp (v1 only)."""

    class GroupMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group (version 2 only)."""

    class GroupMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """protocol_type, generation, protocol, leader, current_state_timestamp (v2+), members.

        Members are `GroupMetadataValue.MemberMetadata`: member_id, group_instance_id (v3+), client_id,
        client_host, rebalance_timeout (v1+), session_timeout, subscription, assignment.
        """

    # KIP-848 consumer groups: one key class per record type (its only version is the type), one value
    # class each (version 0, flexible).
    class ConsumerGroupMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id (type 3)."""

    class ConsumerGroupMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """epoch (tagged: metadata_hash, creation_time_ms)."""

    class ConsumerGroupPartitionMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id (type 4)."""

    class ConsumerGroupPartitionMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """topics: topic_id, topic_name, num_partitions, partition_metadata."""

    class ConsumerGroupMemberMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id, member_id (type 5)."""

    class ConsumerGroupMemberMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """instance_id, rack_id, client_id, client_host, subscribed_topic_names, subscribed_topic_regex,
        rebalance_timeout_ms, server_assignor, classic_member_metadata (tagged)."""

    class ConsumerGroupTargetAssignmentMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id (type 6)."""

    class ConsumerGroupTargetAssignmentMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """assignment_epoch."""

    class ConsumerGroupTargetAssignmentMemberKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id, member_id (type 7)."""

    class ConsumerGroupTargetAssignmentMemberValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """topic_partitions: topic_id, partitions."""

    class ConsumerGroupCurrentMemberAssignmentKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id, member_id (type 8)."""

    class ConsumerGroupCurrentMemberAssignmentValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """member_epoch, previous_member_epoch, state, assigned_partitions, partitions_pending_revocation."""

    class ConsumerGroupRegularExpressionKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id, regular_expression (type 16)."""

    class ConsumerGroupRegularExpressionValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """topics, version, timestamp."""


OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
OFFSET_COMMIT_KEY_WRITE_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
# OffsetCommitValue v1 carries an explicit expire timestamp; v3 a leader epoch (and no expire timestamp).
OFFSET_COMMIT_VALUE_WRITE_VERSION = 3
OFFSET_COMMIT_VALUE_EXPIRE_VERSION = 1
GROUP_METADATA_VALUE_WRITE_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 0

# Record type (key version) -> (key class, value class) of the KIP-848 consumer group records.
CONSUMER_GROUP_SCHEMAS: dict[int, tuple[Any, Any]] = {
    3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
    16: (ConsumerGroupRegularExpressionKey, ConsumerGroupRegularExpressionValue),
}

__all__ = [
    "CONSUMER_GROUP_SCHEMAS",
    "CONSUMER_GROUP_VALUE_VERSION",
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_WRITE_VERSION",
    "OFFSET_COMMIT_KEY_VERSIONS",
    "OFFSET_COMMIT_KEY_WRITE_VERSION",
    "OFFSET_COMMIT_VALUE_EXPIRE_VERSION",
    "OFFSET_COMMIT_VALUE_WRITE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
]
