"""TransactionCoordinator on a fake clock, with the test playing the shell: it takes the appends and
completes them (durable, or failed with a storage or replication error), and takes the markers and reports
them written. What must hold: an answer goes out only once its record is durable, and a change applies only
while the partition is still led at the epoch it was prepared under; a decided transaction's markers go out
and its completion follows them; a fence aborts the zombie's transaction; loading finishes what was decided;
the sweeps abort timed-out transactions and expire idle ids."""
from __future__ import annotations

import itertools
from typing import Any

from structlog.testing import capture_logs

from coordinator_server.txn.coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
    TxnAppend,
    TxnConfig,
)
from coordinator_server.txn.records import decode_key, decode_value
from coordinator_server.txn.state import TransactionState as S
from protocol.errors import Errors

TX = "tx"
T0 = 10_000


class Shell:
    def __init__(self, partitions: int = 4) -> None:
        pids = itertools.count(5000)
        self.core = TransactionCoordinator(TxnConfig(partitions=partitions), lambda: next(pids))
        self.partition = self.core.partition_for(TX)
        self.log: list[TxnAppend] = []  # every record written, in order
        self.replies: list[Any] = []
        self.core.begin_loading(self.partition, 1)
        self.core.load_partition(self.partition, [], 1)

    def flush(self, error: Errors = Errors.NONE) -> list[TxnAppend]:
        appends = self.core.take_appends()
        for a in appends:
            if error == Errors.NONE:
                self.log.append(a)
            a.on_complete(error)
        return appends

    def init(self, expected: tuple[int, int] | None = None, timeout_ms: int = 60_000, now: int = T0) -> Any:
        self.core.handle_init_producer_id(TX, timeout_ms, expected, now, self.replies.append)
        self.flush()
        return self.replies[-1]

    def add(self, pid: int, epoch: int, *partitions: tuple[str, int], now: int = T0) -> Errors:
        self.core.handle_add_partitions(TX, pid, epoch, partitions, now, self.replies.append)
        self.flush()
        return self.replies[-1]

    def end(self, pid: int, epoch: int, commit: bool, now: int = T0) -> Errors:
        self.core.handle_end_txn(TX, pid, epoch, commit, now, self.replies.append)
        self.flush()
        return self.replies[-1]

    def states(self) -> list[S | None]:
        out = []
        for a in self.log:
            value = decode_value(a.value)
            out.append(None if value is None else value.state)
        return out


def test_commit_is_answered_once_decided_then_markers_then_completion() -> None:
    shell = Shell()
    init = shell.init()
    assert init.error == Errors.NONE and init.producer_epoch == 0
    assert shell.add(init.producer_id, 0, ("t", 0), ("t", 1)) == Errors.NONE
    shell.core.handle_end_txn(TX, init.producer_id, 0, True, T0 + 1, shell.replies.append)
    assert shell.replies[-1] == Errors.NONE  # the add's; the EndTxn waits for its record
    assert shell.core.take_markers() == []
    shell.flush()
    assert shell.replies[-1] == Errors.NONE
    [markers] = shell.core.take_markers()
    assert markers.commit and markers.partitions == {("t", 0), ("t", 1)} and markers.coordinator_epoch == 1
    shell.core.markers_written(markers, T0 + 2)
    shell.flush()
    assert shell.states() == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert all(decode_key(a.key) == TX and a.partition == shell.partition for a in shell.log)


def test_a_failed_write_answers_the_mapped_error_and_changes_nothing() -> None:
    shell = Shell()
    init = shell.init()
    shell.core.handle_add_partitions(TX, init.producer_id, 0, [("t", 0)], T0, shell.replies.append)
    shell.flush(Errors.NOT_ENOUGH_REPLICAS)
    assert shell.replies[-1] == Errors.COORDINATOR_NOT_AVAILABLE
    shell.core.handle_end_txn(TX, init.producer_id, 0, True, T0, shell.replies.append)
    assert shell.replies[-1] == Errors.INVALID_TXN_STATE  # still Empty: the add never applied
    shell.core.handle_add_partitions(TX, init.producer_id, 0, [("t", 0)], T0, shell.replies.append)
    shell.flush(Errors.NOT_LEADER_OR_FOLLOWER)
    assert shell.replies[-1] == Errors.NOT_COORDINATOR


def test_a_change_durable_after_the_partition_moved_is_not_applied() -> None:
    shell = Shell()
    init = shell.init()
    shell.core.handle_add_partitions(TX, init.producer_id, 0, [("t", 0)], T0, shell.replies.append)
    assert shell.core.unload_partition(shell.partition, 2)
    shell.flush()
    assert shell.replies[-1] == Errors.NOT_COORDINATOR
    shell.core.handle_add_partitions(TX, init.producer_id, 0, [("t", 0)], T0, shell.replies.append)
    assert shell.replies[-1] == Errors.NOT_COORDINATOR


def test_requests_while_loading_and_for_unknown_ids() -> None:
    shell = Shell()
    shell.core.handle_end_txn(TX, 1, 0, True, T0, shell.replies.append)
    assert shell.replies[-1] == Errors.INVALID_PRODUCER_ID_MAPPING
    assert shell.core.begin_loading(shell.partition, 2) and not shell.core.begin_loading(shell.partition, 2)
    assert shell.init().error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    shell.core.handle_init_producer_id(TX, 0, None, T0, shell.replies.append)
    assert shell.replies[-1] == InitProducerIdResult(Errors.INVALID_TRANSACTION_TIMEOUT)
    shell.core.handle_init_producer_id(TX, 900_001, None, T0, shell.replies.append)
    assert shell.replies[-1] == InitProducerIdResult(Errors.INVALID_TRANSACTION_TIMEOUT)


def test_a_second_producer_fences_the_first_and_its_transaction_is_aborted() -> None:
    shell = Shell()
    zombie = shell.init()
    assert shell.add(zombie.producer_id, 0, ("t", 0)) == Errors.NONE
    assert shell.init().error == Errors.CONCURRENT_TRANSACTIONS  # the abort is decided first
    [markers] = shell.core.take_markers()
    assert not markers.commit and markers.producer_epoch == 1
    assert shell.end(zombie.producer_id, 0, True) == Errors.PRODUCER_FENCED
    shell.core.markers_written(markers, T0 + 1)
    shell.flush()
    successor = shell.init(now=T0 + 2)
    assert successor.error == Errors.NONE and successor.producer_id == zombie.producer_id
    assert successor.producer_epoch > zombie.producer_epoch + 1
    assert shell.states() == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


def test_loading_finishes_a_decided_transaction() -> None:
    shell = Shell()
    init = shell.init()
    shell.add(init.producer_id, 0, ("t", 0))
    shell.end(init.producer_id, 0, True)
    shell.core.take_markers()  # lost with the old leader
    records = [(a.key, a.value) for a in shell.log]
    fresh = Shell()
    assert fresh.core.begin_loading(fresh.partition, 5)
    assert fresh.core.load_partition(fresh.partition, records, 5) == 1
    [markers] = fresh.core.take_markers()
    assert markers.commit and markers.coordinator_epoch == 5 and markers.partitions == {("t", 0)}
    fresh.core.markers_written(markers, T0)
    fresh.flush()
    assert fresh.states() == [S.COMPLETE_COMMIT]


def test_loading_skips_a_key_version_it_does_not_read() -> None:
    shell = Shell()
    init = shell.init()
    records = [(a.key, a.value) for a in shell.log]
    newer = ((99).to_bytes(2, "big") + records[0][0][2:], records[0][1])  # a later broker's key layout
    fresh = Shell()
    assert fresh.core.begin_loading(fresh.partition, 5)
    with capture_logs() as logs:
        assert fresh.core.load_partition(fresh.partition, [newer, *records], 5) == 1
    assert [entry["event"] for entry in logs] == ["transaction_log_record_skipped"]
    fresh.core.handle_init_producer_id(TX, 60_000, None, T0, fresh.replies.append)
    fresh.flush()
    assert fresh.replies[-1].producer_id == init.producer_id and fresh.replies[-1].producer_epoch == 1


def test_timed_out_transactions_are_aborted_and_idle_ids_expire() -> None:
    shell = Shell()
    init = shell.init(timeout_ms=1000)
    shell.add(init.producer_id, 0, ("t", 0), now=T0)
    assert shell.core.abort_timed_out(T0 + 1000) == 0
    assert shell.core.abort_timed_out(T0 + 1001) == 1
    shell.flush()
    [markers] = shell.core.take_markers()
    assert not markers.commit and markers.producer_epoch == 1
    shell.core.markers_written(markers, T0 + 1002)
    shell.flush()
    assert shell.end(init.producer_id, 0, True) == Errors.PRODUCER_FENCED  # the late producer
    expiry = shell.core.config.id_expiration_ms
    assert shell.core.expire_ids(T0 + 1002 + expiry - 1) == 0
    assert shell.core.expire_ids(T0 + 1002 + expiry) == 1
    [tombstone] = shell.flush()
    assert tombstone.value is None
    assert shell.core.describe(TX) == (Errors.TRANSACTIONAL_ID_NOT_FOUND, None)


def test_the_completion_is_retried_while_the_log_is_unavailable_and_given_up_when_leadership_moved() -> None:
    shell = Shell()
    init = shell.init()
    shell.add(init.producer_id, 0, ("t", 0))
    shell.end(init.producer_id, 0, True)
    [markers] = shell.core.take_markers()
    shell.core.markers_written(markers, T0 + 1)
    [first] = shell.flush(Errors.NOT_ENOUGH_REPLICAS)  # COORDINATOR_NOT_AVAILABLE: written again at once
    [again] = shell.flush(Errors.REQUEST_TIMED_OUT)
    assert again.key == first.key and decode_value(again.value).state is S.COMPLETE_COMMIT  # type: ignore[union-attr]
    shell.flush(Errors.NOT_LEADER_OR_FOLLOWER)  # NOT_COORDINATOR: the next leader finishes it after its load
    assert shell.core.take_appends() == []
    assert shell.core.describe(TX)[1].state is S.PREPARE_COMMIT  # type: ignore[union-attr]
