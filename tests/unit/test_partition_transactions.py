"""A partition's transactions (topics/transactions.py): the last stable offset stops read_committed at the
oldest open transaction until its marker is below the high watermark; each abort is indexed with the LSO of
its moment, and a fetch range is told exactly the aborts that overlap it; markers' bytes are Kafka's."""
from __future__ import annotations

import pytest

from coordinator_server.topics.transactions import (
    ABORTED_ENTRY_SIZE,
    AbortedTxn,
    BadMarker,
    PartitionTransactions,
    marker_key,
    marker_value,
    parse_marker,
)


def test_marker_bytes() -> None:
    assert marker_key(True) == b"\x00\x00\x00\x01" and marker_key(False) == b"\x00\x00\x00\x00"
    assert marker_value(7) == b"\x00\x00\x00\x00\x00\x07"
    assert parse_marker(marker_key(True), marker_value(7)) == (True, 7)
    with pytest.raises(BadMarker):
        parse_marker(b"\x00\x00\x00\x05", marker_value(0))
    with pytest.raises(BadMarker):
        parse_marker(None, None)


def test_aborted_index_entry_is_34_bytes() -> None:
    entry = AbortedTxn(9, 10, 20, 21)
    assert ABORTED_ENTRY_SIZE == 34 and len(entry.to_bytes()) == 34
    assert AbortedTxn.from_bytes(b"xx" + entry.to_bytes(), 2) == entry


def test_lso_waits_for_the_oldest_open_transaction_and_its_replicated_marker() -> None:
    txns = PartitionTransactions()
    assert txns.last_stable_offset(5) == 5  # nothing open: the high watermark
    txns.on_transactional_batch(1, 10)
    txns.on_transactional_batch(1, 12)  # still the transaction that opened at 10
    txns.on_transactional_batch(2, 15)
    assert txns.last_stable_offset(30) == 10 and txns.last_stable_offset(8) == 8
    assert txns.on_marker(1, 20, commit=True) is not None
    assert txns.last_stable_offset(30) == 10  # 1's marker is not below the high watermark yet
    txns.on_high_watermark(21)
    assert txns.last_stable_offset(30) == 15  # now producer 2's transaction holds it
    txns.on_marker(2, 25, commit=True)
    txns.on_high_watermark(26)
    assert txns.last_stable_offset(30) == 30 and txns.aborted == []
    assert txns.on_marker(3, 27, commit=False) is None  # nothing open for 3: no transaction, no entry


def test_each_abort_is_indexed_with_the_lso_of_its_moment() -> None:
    txns = PartitionTransactions()
    txns.on_transactional_batch(1, 0)
    txns.on_transactional_batch(2, 5)
    txns.on_marker(1, 10, commit=False)  # 2 still open from 5
    txns.on_marker(2, 20, commit=False)  # nothing else open
    assert txns.aborted == [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 20, 21)]


def test_a_fetch_range_is_told_the_aborts_that_overlap_it() -> None:
    txns = PartitionTransactions()
    for pid, first, marker in [(1, 0, 3), (2, 10, 14), (3, 20, 24)]:
        txns.on_transactional_batch(pid, first)
        txns.on_marker(pid, marker, commit=False)
    assert [a.producer_id for a in txns.aborted_between(0, 100)] == [1, 2, 3]
    assert [a.producer_id for a in txns.aborted_between(4, 100)] == [2, 3]  # 1 ended before the fetch
    assert [a.producer_id for a in txns.aborted_between(0, 10)] == [1]  # 2 began at the range's end
    assert txns.aborted_between(25, 100) == []


def test_truncation_reopens_a_transaction_whose_marker_was_cut() -> None:
    txns = PartitionTransactions()
    txns.on_transactional_batch(1, 10)
    txns.on_marker(1, 20, commit=False)
    txns.on_transactional_batch(2, 30)
    txns.truncate_to(15)
    assert txns.open_transactions() == {1: 10} and txns.aborted == []
    assert txns.last_stable_offset(100) == 10
