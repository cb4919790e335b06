"""Pending transactional offsets (group/txn_offsets.py): Kafka's replayEndTransactionMarker rules."""
from __future__ import annotations

from coordinator_server.group.records import OffsetCommitValue
from coordinator_server.group.txn_offsets import TransactionalOffsets

TP = ("t", 0)


def value(offset: int) -> OffsetCommitValue:
    return OffsetCommitValue(offset, -1, "", 1_000, -1)


def test_commit_moves_pending_into_committed() -> None:
    txn, committed = TransactionalOffsets(), {}
    txn.add("g", 7, TP, value(5))
    assert txn.has_pending_offset("g", TP) and committed == {}
    assert txn.end_transaction("g", 7, True, committed) == 1
    assert committed == {TP: value(5)} and not txn.has_pending("g")


def test_abort_drops_pending() -> None:
    txn, committed = TransactionalOffsets(), {TP: value(1)}
    txn.add("g", 7, TP, value(5))
    assert txn.end_transaction("g", 7, False, committed) == 0
    assert committed == {TP: value(1)} and not txn.has_pending("g")


def test_later_plain_commit_wins_over_earlier_pending() -> None:
    txn, committed = TransactionalOffsets(), {}
    txn.add("g", 7, TP, value(5))
    committed[TP] = value(9)
    txn.on_committed("g", TP)  # a plain commit after the transactional record
    assert txn.has_pending_offset("g", TP)  # still unstable until the marker
    txn.end_transaction("g", 7, True, committed)
    assert committed == {TP: value(9)}


def test_plain_commit_before_pending_is_replaced() -> None:
    txn, committed = TransactionalOffsets(), {TP: value(9)}
    txn.on_committed("g", TP)
    txn.add("g", 7, TP, value(5))
    txn.end_transaction("g", 7, True, committed)
    assert committed == {TP: value(5)}


def test_two_producers_later_record_wins_whatever_the_marker_order() -> None:
    for first_marker in (1, 2):
        txn, committed = TransactionalOffsets(), {}
        txn.add("g", 1, TP, value(10), order=100)
        txn.add("g", 2, TP, value(20), order=200)
        assert txn.open_producers("g") == {1, 2}
        other = 2 if first_marker == 1 else 1
        txn.end_transaction("g", first_marker, True, committed)
        txn.end_transaction("g", other, True, committed)
        assert committed == {TP: value(20)}, first_marker


def test_tombstone_removes_pending_of_every_producer() -> None:
    txn, committed = TransactionalOffsets(), {}
    txn.add("g", 1, TP, value(10))
    txn.add("g", 2, TP, value(20))
    txn.add("g", 2, ("t", 1), value(30))
    txn.on_tombstone("g", TP)
    assert txn.pending_partitions("g") == {("t", 1)}
    txn.end_transaction("g", 1, True, committed)
    txn.end_transaction("g", 2, True, committed)
    assert committed == {("t", 1): value(30)}


def test_marker_for_producer_with_nothing_pending_is_ignored() -> None:
    txn, committed = TransactionalOffsets(), {}
    txn.add("g", 1, TP, value(10))
    assert txn.end_transaction("g", 99, True, committed) == 0
    assert txn.end_transaction("h", 1, True, committed) == 0
    assert txn.groups_of(1) == ["g"] and committed == {}


def test_live_order_follows_loaded_orders() -> None:
    txn, committed = TransactionalOffsets(), {}
    txn.add("g", 1, TP, value(10), order=500)  # loaded at record offset 500
    txn.add("g", 2, TP, value(20))  # live, later in the log
    txn.end_transaction("g", 2, True, committed)
    txn.end_transaction("g", 1, True, committed)
    assert committed == {TP: value(20)}
