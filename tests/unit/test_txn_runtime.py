"""The transaction coordinator's shell (`coordinator_server/txn_runtime/`) over a real `__transaction_state`
log in a temporary directory: InitProducerId answered once its record is durable, the epoch bumped on each
re-init and kept across a reopen (the log replayed at start), an open transaction left in the log fenced and
aborted, the timeout bound, a failed write answered with the group core's map, and the log's layout (its own
partition count file, its own directories)."""
from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest.mock import Mock

import pytest
from kafka.protocol.producer import InitProducerIdRequest

from coordinator_server.config import Config
from coordinator_server.group.partitioner import partition_for
from coordinator_server.net.data_plane.init_producer_id import InitProducerIdHandler
from coordinator_server.net.handlers import _coordinator_error
from coordinator_server.security.authorizer import ALLOW_ALL
from coordinator_server.storage.coordinator_log import TRANSACTION_LOG, CoordinatorLog
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.group_commit import Appended
from coordinator_server.txn.coordinator import InitProducerIdResult
from coordinator_server.txn.metadata import TxnTransit
from coordinator_server.txn.records import decode_key, decode_value, encode_key, encode_value
from coordinator_server.txn.state import TransactionState as S
from coordinator_server.txn_runtime import TransactionRuntime, open_transaction_log
from protocol.errors import Errors

PARTITIONS = 5
NOW = 1_700_000_000_000


def config(data_dir: Path, **overrides: object) -> Config:
    return Config(data_dir=str(data_dir), transaction_state_log_num_partitions=PARTITIONS, **overrides)  # type: ignore[arg-type]


class Ids:
    """Producer ids as the topic store hands them out: never the same twice."""

    def __init__(self, start: int = 1000) -> None:
        self._next = itertools.count(start)

    def __call__(self) -> int:
        return next(self._next)


async def init(runtime: TransactionRuntime, tid: str, timeout_ms: int = 60_000,
               expected: tuple[int, int] | None = None) -> InitProducerIdResult:
    answer: asyncio.Future[InitProducerIdResult] = asyncio.get_running_loop().create_future()
    runtime.init_producer_id(tid, timeout_ms, expected, answer.set_result)
    return await asyncio.wait_for(answer, 5)


async def init_until_done(runtime: TransactionRuntime, tid: str) -> InitProducerIdResult:
    """As a client does: CONCURRENT_TRANSACTIONS is retried."""
    for _ in range(50):
        result = await init(runtime, tid)
        if result.error != Errors.CONCURRENT_TRANSACTIONS:
            return result
        await asyncio.sleep(0.01)
    raise AssertionError("still CONCURRENT_TRANSACTIONS")


def records_of(log_: CoordinatorLog, tid: str) -> list[TxnTransit | None]:
    return [decode_value(v) for k, v in log_.read_records(partition_for(tid, log_.partitions)) if decode_key(k) == tid]


async def test_init_answers_after_the_write_and_bumps_the_epoch_across_a_reopen(tmp_path: Path) -> None:
    ids = Ids()
    runtime = TransactionRuntime.open(config(tmp_path), open_transaction_log(config(tmp_path)), ids)
    first = await init(runtime, "tx")
    assert first == InitProducerIdResult(Errors.NONE, 1000, 0)
    second = await init(runtime, "tx")
    assert second == InitProducerIdResult(Errors.NONE, 1000, 1)
    kip360 = await init(runtime, "tx", expected=(1000, 1))
    assert kip360 == InitProducerIdResult(Errors.NONE, 1000, 2)
    assert (await init(runtime, "tx", expected=(1000, 0))).error == Errors.PRODUCER_FENCED
    other = await init(runtime, "another")
    assert other.error == Errors.NONE and other.producer_id not in (-1, 1000) and other.producer_epoch == 0
    await runtime.close()

    log_ = open_transaction_log(config(tmp_path))
    states = [(r.state, r.producer_epoch) for r in records_of(log_, "tx") if r is not None]
    assert states == [(S.EMPTY, 0), (S.EMPTY, 1), (S.EMPTY, 2)]
    reopened = TransactionRuntime.open(config(tmp_path), log_, Ids(5000))
    again = await init(reopened, "tx")
    assert again == InitProducerIdResult(Errors.NONE, 1000, 3)
    await reopened.close()


async def test_the_timeout_is_bounded_by_transaction_max_timeout_ms(tmp_path: Path) -> None:
    cfg = config(tmp_path, transaction_max_timeout_ms=10_000)
    runtime = TransactionRuntime.open(cfg, open_transaction_log(cfg), Ids())
    assert (await init(runtime, "tx", timeout_ms=10_001)).error == Errors.INVALID_TRANSACTION_TIMEOUT
    assert (await init(runtime, "tx", timeout_ms=0)).error == Errors.INVALID_TRANSACTION_TIMEOUT
    assert (await init(runtime, "tx", timeout_ms=10_000)).error == Errors.NONE
    await runtime.close()


async def test_an_open_transaction_found_at_start_is_fenced_and_aborted(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    log_ = open_transaction_log(cfg)
    ongoing = TxnTransit(producer_id=77, previous_producer_id=-1, next_producer_id=-1, producer_epoch=4,
                         last_producer_epoch=-1, txn_timeout_ms=60_000, state=S.ONGOING, partitions=frozenset(),
                         txn_start_timestamp_ms=NOW, txn_last_update_timestamp_ms=NOW)
    done: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
    log_.submit_encoded(partition_for("zombie", PARTITIONS), [(encode_key("zombie"), encode_value(ongoing, 0))],
                        NOW, done.set_result)
    assert (await done).error is None
    runtime = TransactionRuntime.open(cfg, log_, Ids())
    # The zombie's epoch is fenced and its transaction aborted; the new producer retries and gets past it.
    assert (await init(runtime, "zombie")).error == Errors.CONCURRENT_TRANSACTIONS
    result = await init_until_done(runtime, "zombie")
    assert result.error == Errors.NONE and result.producer_id == 77 and result.producer_epoch > 5
    await runtime.close()
    states = [r.state for r in records_of(open_transaction_log(cfg), "zombie") if r is not None]
    assert states == [S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


class FailingLog:
    """A `__transaction_state` whose writes fail: at once, or once written (a failed fsync)."""

    def __init__(self, at_once: bool) -> None:
        self.at_once = at_once
        self.closed = False

    @property
    def partitions(self) -> int:
        return PARTITIONS

    def read_records(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(())

    def submit_encoded(self, partition: int, encoded: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                       on_done: Callable[[Appended], None], leader_epoch: int = 0) -> bool:
        if self.at_once:
            raise StorageError("disk gone")
        asyncio.get_running_loop().call_soon(on_done, Appended(0, 0, StorageError("fsync failed")))
        return True

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("at_once", [True, False])
async def test_a_failed_write_is_answered_not_coordinator_and_changes_nothing(tmp_path: Path, at_once: bool) -> None:
    failing = FailingLog(at_once)
    runtime = TransactionRuntime.open(config(tmp_path), failing, Ids())
    assert (await init(runtime, "tx")).error == Errors.NOT_COORDINATOR
    failing.at_once = False
    assert (await init(runtime, "tx")).error == Errors.NOT_COORDINATOR
    await runtime.close()
    assert failing.closed
    assert (await init(runtime, "tx")).error == Errors.NOT_COORDINATOR  # closed: nothing is taken any more


async def test_the_log_keeps_its_own_partition_count_and_directories(tmp_path: Path) -> None:
    log_ = open_transaction_log(config(tmp_path))
    assert log_.partitions == PARTITIONS
    await log_.close()
    reopened = CoordinatorLog.open(tmp_path, 9, Config().fsync, topic=TRANSACTION_LOG)
    assert reopened.partitions == PARTITIONS  # the recorded count wins over the flag
    await reopened.close()
    assert (tmp_path / "transaction-state.properties").read_text().splitlines()[-1] == \
        f"transaction.state.log.num.partitions={PARTITIONS}"
    assert sorted(p.name for p in tmp_path.glob("__transaction_state-*")) == \
        sorted(f"__transaction_state-{p}" for p in range(PARTITIONS))
    # The offsets log, opened beside it, still takes the directory's lock and keeps its own count.
    offsets = CoordinatorLog.open(tmp_path, 3, Config().fsync)
    assert offsets.partitions == 3
    await offsets.close()


# -- the network's side: what a cluster (no transaction coordinator) answers ---------------------------------


@pytest.mark.parametrize(("key_type", "served", "error"), [
    (0, False, Errors.NONE), (1, True, Errors.NONE), (1, False, Errors.COORDINATOR_NOT_AVAILABLE),
    (2, True, Errors.INVALID_REQUEST)])
def test_find_coordinator_of_a_transactional_id_is_this_node_only_where_served(
        key_type: int, served: bool, error: Errors) -> None:
    assert _coordinator_error(key_type, 3, served) == error


async def test_init_producer_id_without_a_transaction_coordinator_is_coordinator_not_available() -> None:
    handler = InitProducerIdHandler(Mock(), Mock(), None)
    req = InitProducerIdRequest[4](transactional_id="tx", transaction_timeout_ms=60_000, producer_id=-1,
                                   producer_epoch=-1)
    answer = await handler.handle_init_producer_id(req, 4, ALLOW_ALL)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (15, -1, -1)
    half = InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60_000, producer_id=7,
                                    producer_epoch=-1)
    assert (await handler.handle_init_producer_id(half, 4, ALLOW_ALL)).error_code == 42
