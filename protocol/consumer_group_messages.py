"""The KIP-848 consumer group protocol's requests, which kafka-python has no class for:
ConsumerGroupHeartbeat (api key 68) and ConsumerGroupDescribe (api key 69).

The JSON specs in `protocol/schemas/` are Kafka 4.x's own message specs; kafka-python's ApiMessage turns
them into classes that encode and decode exactly as its built-in ones (headers included), as for
ControlledShutdown (`protocol/broker_messages.py`). No I/O here; the translation between these messages and the
core's inputs and results is coordinator_server/net/consumer_group_handlers.py's.
"""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # kafka-python reads JSON specs with importlib.resources functions deprecated since Python 3.11.
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage

    _SCHEMAS = f"{__package__}.schemas"

    class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
        subscribed_topic_names, subscribed_topic_regex (v1+), server_assignor, topic_partitions."""

    class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """error_code, error_message, member_id, member_epoch, heartbeat_interval_ms, assignment."""

    class ConsumerGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """group_ids, include_authorized_operations."""

    class ConsumerGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """groups: error, state, epochs, assignor, members (assignment, target assignment, type v1+)."""


# KIP-848's member epochs in a request: 0 joins, -1 leaves, -2 leaves for now (a static member).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# From v1 the member id is the consumer's own (KIP-1082); v0 lets the coordinator make one up.
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
# ConsumerGroupDescribe's MemberType (v1+): what protocol a member speaks.
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1
