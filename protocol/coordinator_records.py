"""Kafka's `__consumer_offsets` record schemas as kafka-python data classes (kafka-semantics.md §5).

The JSON specs in `protocol/schemas/` are Kafka's own message specs ("type": "data"); kafka-python's
`ApiData` turns each into a class with `encode(version=..., header=True)` / `decode(data, header=True)`,
where the header is the int16 version Kafka writes before every key and value. No I/O here.

The key version doubles as the record type: 0 and 1 are offset commits, 2 is group metadata, 3-15 are
KIP-848 and share-group records this server does not read.
"""
from __future__ import annotations

import warnings

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


OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
OFFSET_COMMIT_KEY_WRITE_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
# OffsetCommitValue v1 carries an explicit expire timestamp; v3 a leader epoch (and no expire timestamp).
OFFSET_COMMIT_VALUE_WRITE_VERSION = 3
OFFSET_COMMIT_VALUE_EXPIRE_VERSION = 1
GROUP_METADATA_VALUE_WRITE_VERSION = 3

__all__ = [
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
