"""Transactions on a topic partition over a real log: transactional batches open a producer's transaction,
markers (control batches) close it, the last stable offset and the aborted list follow, the producer state
refuses markers from old epochs and deposed coordinators, and a reopen rebuilds exactly the same state."""
from __future__ import annotations

import sys
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from coordinator_server.net.data_plane.txn_markers import control_batch
from coordinator_server.storage.batch import BatchInfo
from coordinator_server.topics.partition import Partition
from coordinator_server.topics.store import StoreConfig, TopicStore
from coordinator_server.topics.transactions import parse_marker
from protocol.errors import Errors


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], transactional: bool = True) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def open_partition(tmp_path: Path) -> tuple[TopicStore, Partition]:
    store = TopicStore.open(StoreConfig(data_dir=tmp_path), 50)
    store.create_topic("t", 1)
    part = store.partition("t", 0)
    assert part is not None
    return store, part


def append(part: Partition, raw: bytes) -> int:
    result = part.append(raw, 1 << 20)
    assert result.error == Errors.NONE, result
    return result.base_offset


def mark(part: Partition, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
    assert part.producers.check_marker(pid, epoch, coordinator_epoch) == Errors.NONE
    return part.write_marker(control_batch(pid, epoch, coordinator_epoch, commit, 5_000), pid, epoch,
                             coordinator_epoch, commit, 5_000)[0]


def state_of(part: Partition) -> tuple[int, list[tuple[int, int, int]], dict[int, int]]:
    hw = part.log_end_offset
    return (part.last_stable_offset(hw),
            [(a.producer_id, a.first_offset, a.last_offset) for a in part.transactions.aborted_between(0, hw)],
            part.transactions.open_transactions())


def test_the_control_batch_is_kafkas_marker_format() -> None:
    raw = control_batch(42, 3, 7, True, 5_000)
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    info = BatchInfo.parse(raw)
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.is_control) == (42, 3, -1, True)
    record = next(iter(batch))
    assert parse_marker(record.key, record.value) == (True, 7)


def test_lso_and_aborted_transactions_across_interleaved_producers(tmp_path: Path) -> None:
    store, part = open_partition(tmp_path)
    append(part, txn_batch(-1, -1, -1, [b"plain"], transactional=False))  # offset 0
    a0 = append(part, txn_batch(1, 0, 0, [b"a0", b"a1"]))  # 1-2
    b0 = append(part, txn_batch(2, 0, 0, [b"b0"]))  # 3
    assert state_of(part)[0] == a0  # held at the oldest open transaction
    abort_a = mark(part, 1, 0, commit=False)  # 4
    assert state_of(part)[0] == b0
    append(part, txn_batch(1, 0, 2, [b"a2"]))  # 5: producer 1's next transaction
    commit_b = mark(part, 2, 0, commit=True)  # 6
    assert state_of(part)[0] == 5
    mark(part, 1, 0, commit=True)  # 7
    lso, aborted, still_open = state_of(part)
    assert (lso, aborted, still_open) == (part.log_end_offset, [(1, a0, abort_a)], {})
    assert commit_b == 6
    before = state_of(part)
    store.close()
    reopened, part2 = open_partition_again(tmp_path)
    assert state_of(part2) == before
    reopened.close()


def open_partition_again(tmp_path: Path) -> tuple[TopicStore, Partition]:
    store = TopicStore.open(StoreConfig(data_dir=tmp_path), 50)
    part = store.partition("t", 0)
    assert part is not None
    return store, part


def test_an_open_transaction_survives_a_reopen_and_a_marker_then_closes_it(tmp_path: Path) -> None:
    store, part = open_partition(tmp_path)
    first = append(part, txn_batch(9, 2, 0, [b"x"]))
    append(part, txn_batch(-1, -1, -1, [b"after"], transactional=False))
    store.close()
    store, part = open_partition_again(tmp_path)
    assert state_of(part) == (first, [], {9: first})
    entry = part.producers.entry(9)
    assert entry is not None and entry.txn_first_offset == first
    mark(part, 9, 3, commit=False)  # the coordinator's abort after fencing epoch 2
    assert state_of(part)[0] == part.log_end_offset
    # The marker moved the producer to the fence's epoch: the zombie's next batch is refused.
    assert part.append(txn_batch(9, 2, 1, [b"zombie"]), 1 << 20).error == Errors.INVALID_PRODUCER_EPOCH
    store.close()


def test_markers_from_an_old_epoch_or_a_deposed_coordinator_are_refused(tmp_path: Path) -> None:
    store, part = open_partition(tmp_path)
    append(part, txn_batch(5, 4, 0, [b"x"]))
    assert part.producers.check_marker(5, 3, 0) == Errors.INVALID_PRODUCER_EPOCH
    mark(part, 5, 4, commit=True, coordinator_epoch=2)
    assert part.producers.check_marker(5, 4, 1) == Errors.TRANSACTION_COORDINATOR_FENCED
    assert part.producers.check_marker(5, 4, 2) == Errors.NONE
    # A marker for a producer this partition never saw is written all the same (Kafka does).
    assert part.producers.check_marker(77, 0, 0) == Errors.NONE
    store.close()


def test_a_producer_may_not_write_a_control_batch(tmp_path: Path) -> None:
    store, part = open_partition(tmp_path)
    result = part.append(control_batch(5, 0, 0, True, 1_000), 1 << 20)
    assert result.error == Errors.INVALID_RECORD
    store.close()
