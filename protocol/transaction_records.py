"""Kafka's `__transaction_state` record schemas as kafka-python data classes (protocol/schemas/TransactionLog*.json).

As for `__consumer_offsets` (protocol/coordinator_records.py): `encode(version=..., header=True)` writes the
int16 version Kafka puts before every key and value, `decode(data, header=True)` reads it. No I/O here.
"""
from __future__ import annotations

import warnings

# kafka-python reads the JSON specs with importlib.resources' deprecated readers (see coordinator_records.py).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.api_data import ApiData

    _SCHEMAS = f"{__package__}.schemas"

    class TransactionLogKey(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """transactional_id (version 0 only)."""

    class TransactionLogValue(ApiData, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
        """producer_id, producer_epoch, transaction_timeout_ms, transaction_status, transaction_partitions
        (`TransactionLogValue.PartitionsSchema`: topic, partition_ids), transaction_last_update_timestamp_ms,
        transaction_start_timestamp_ms; v1 (flexible) adds the tagged previous_producer_id, next_producer_id
        and client_transaction_version."""
