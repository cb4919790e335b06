"""`__transaction_state` records: one per transactional id (compacted), its key the id, its value the
metadata after a transition (`TxnTransit`), a null value the tombstone of an expired id.

Version 0 of the value is written while the finalized transaction version is 0, version 1 (flexible,
with the previous and next producer ids and the client's transaction version as tagged fields) from 1 up.
"""
from __future__ import annotations

from typing import Final

from protocol.transaction_records import TransactionLogKey, TransactionLogValue

from .metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnTransit
from .state import TransactionState

KEY_VERSION: Final = 0
_Partitions = TransactionLogValue.PartitionsSchema


class UnknownRecord(Exception):
    """A key version this coordinator does not read (skipped on load, as Kafka skips it)."""


def encode_key(transactional_id: str) -> bytes:
    return bytes(TransactionLogKey(transactional_id=transactional_id).encode(version=KEY_VERSION, header=True))


def encode_value(transit: TxnTransit | None, version: int) -> bytes | None:
    """None for Dead: the id's tombstone."""
    if transit is None or transit.state is TransactionState.DEAD:
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(transit.partitions):
        by_topic.setdefault(topic, []).append(partition)
    # Kafka writes null partitions in Empty, an empty list once a transaction completed.
    partitions = None if transit.state is TransactionState.EMPTY else [
        _Partitions(topic=t, partition_ids=ps) for t, ps in by_topic.items()]
    value = TransactionLogValue(
        producer_id=transit.producer_id, previous_producer_id=transit.previous_producer_id,
        next_producer_id=transit.next_producer_id, producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms, transaction_status=int(transit.state),
        transaction_partitions=partitions, transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=transit.txn_start_timestamp_ms,
        client_transaction_version=transit.client_transaction_version)
    return bytes(value.encode(version=version, header=True))


def decode_key(key: bytes) -> str:
    version = int.from_bytes(key[:2], "big", signed=True)
    if version != KEY_VERSION:
        raise UnknownRecord(f"transaction log key version {version}")
    return str(TransactionLogKey.decode(key, header=True).transactional_id)


def decode_value(value: bytes | None) -> TxnTransit | None:
    """None: a tombstone. An unknown value version raises (kafka-python's ValueError): corruption."""
    if value is None:
        return None
    v = TransactionLogValue.decode(value, header=True)
    partitions = frozenset((p.topic, i) for p in v.transaction_partitions or () for i in p.partition_ids)
    return TxnTransit(
        producer_id=v.producer_id, previous_producer_id=getattr(v, "previous_producer_id", NO_PRODUCER_ID),
        next_producer_id=getattr(v, "next_producer_id", NO_PRODUCER_ID), producer_epoch=v.producer_epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=v.transaction_timeout_ms,
        state=TransactionState(v.transaction_status), partitions=partitions,
        txn_start_timestamp_ms=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp_ms=v.transaction_last_update_timestamp_ms,
        client_transaction_version=getattr(v, "client_transaction_version", 0))
