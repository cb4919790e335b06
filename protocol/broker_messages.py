"""Requests only brokers send each other and kafka-python has no class for: ControlledShutdown (api key 7).

The JSON specs in `protocol/schemas/` are Kafka's own message specs; kafka-python's ApiMessage turns them
into classes that encode and decode exactly as its built-in ones (headers included). No I/O here.
"""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # kafka-python reads JSON specs with importlib.resources functions deprecated since Python 3.11.
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage

    _SCHEMAS = f"{__package__}.schemas"

    class ControlledShutdownRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """broker_id, broker_epoch (v2+)."""

    class ControlledShutdownResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """error_code, remaining_partitions (topic_name, partition_index)."""


CONTROLLED_SHUTDOWN_VERSION = 3
