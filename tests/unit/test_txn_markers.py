"""The transaction runtime over a real `__transaction_state` log, with a marker writer of our own that answers
as a partition leader would: AddPartitionsToTxn and EndTxn answered once durable, the markers sent to each
partition after the decision, retried on retriable answers, dropped when fenced or the topic is gone, and the
transaction completed once none is left; the timeout sweep aborts an open transaction."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from coordinator_server.config import Config
from coordinator_server.txn.state import TransactionState as S
from coordinator_server.txn_runtime import TransactionRuntime, open_transaction_log
from protocol.errors import Errors
from tests.unit.test_txn_runtime import Ids, init

Key = tuple[str, int]


class ScriptedLeader:
    """Answers each partition's marker with the next error scripted for it (NONE once the script is used up),
    and records every marker asked for."""

    def __init__(self, script: dict[Key, list[Errors]] | None = None) -> None:
        self.script = script or {}
        self.asked: list[tuple[int, int, bool, list[Key]]] = []

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          partitions: Sequence[Key], on_done: Callable[[dict[Key, Errors]], None]) -> None:
        self.asked.append((producer_id, producer_epoch, commit, list(partitions)))
        answers = {key: (self.script.get(key) or [Errors.NONE]).pop(0) for key in partitions}
        asyncio.get_running_loop().call_soon(on_done, answers)


async def call(fn: Callable[..., None], *args: object) -> Errors:
    answer: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
    fn(*args, answer.set_result)
    return await asyncio.wait_for(answer, 5)


async def settled(runtime: TransactionRuntime, tid: str, state: S) -> None:
    for _ in range(200):
        _error, md = runtime.coordinator.describe(tid)
        if md is not None and md.state is state and md.pending is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{tid} never reached {state.display_name}: {md.state.display_name if md else None}")


def open_runtime(tmp_path: Path, leader: ScriptedLeader, exists: Callable[[str, int], bool] = lambda t, p: True,
                 **overrides: object) -> TransactionRuntime:
    cfg = Config(data_dir=str(tmp_path), transaction_state_log_num_partitions=3, **overrides)  # type: ignore[arg-type]
    return TransactionRuntime.open(cfg, open_transaction_log(cfg), Ids(), markers=leader, partition_exists=exists)


async def test_a_commit_writes_its_markers_retrying_a_partition_that_is_not_ready(tmp_path: Path) -> None:
    leader = ScriptedLeader({("t", 1): [Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR]})
    runtime = open_runtime(tmp_path, leader)
    ids = await init(runtime, "tx")
    pid, epoch = ids.producer_id, ids.producer_epoch
    assert await call(runtime.add_partitions, "tx", pid, epoch, [("t", 0), ("t", 1)]) == Errors.NONE
    assert await call(runtime.add_partitions, "tx", pid, epoch, [("t", 0)]) == Errors.NONE  # already in it
    assert await call(runtime.end_txn, "tx", pid, epoch, True) == Errors.NONE
    await settled(runtime, "tx", S.COMPLETE_COMMIT)
    assert leader.asked == [(pid, epoch, True, [("t", 0), ("t", 1)]), (pid, epoch, True, [("t", 1)]),
                            (pid, epoch, True, [("t", 1)])]
    # Retrying the commit once complete is answered as done; aborting it now is not a valid transition.
    assert await call(runtime.end_txn, "tx", pid, epoch, True) == Errors.NONE
    assert await call(runtime.end_txn, "tx", pid, epoch, False) == Errors.INVALID_TXN_STATE
    await runtime.close()


async def test_fenced_or_deleted_partitions_are_dropped_and_the_transaction_completes(tmp_path: Path) -> None:
    leader = ScriptedLeader({("t", 0): [Errors.INVALID_PRODUCER_EPOCH],
                             ("gone", 0): [Errors.UNKNOWN_TOPIC_OR_PARTITION]})
    runtime = open_runtime(tmp_path, leader, exists=lambda topic, index: topic != "gone")
    ids = await init(runtime, "tx")
    pid, epoch = ids.producer_id, ids.producer_epoch
    assert await call(runtime.add_partitions, "tx", pid, epoch, [("t", 0), ("gone", 0)]) == Errors.NONE
    assert await call(runtime.end_txn, "tx", pid, epoch, False) == Errors.NONE
    await settled(runtime, "tx", S.COMPLETE_ABORT)
    assert len(leader.asked) == 1
    await runtime.close()


async def test_kafkas_answers_to_wrong_identities_and_states(tmp_path: Path) -> None:
    runtime = open_runtime(tmp_path, ScriptedLeader())
    ids = await init(runtime, "tx")
    pid, epoch = ids.producer_id, ids.producer_epoch
    assert await call(runtime.add_partitions, "nobody", pid, epoch, [("t", 0)]) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert await call(runtime.add_partitions, "tx", pid + 1, epoch, [("t", 0)]) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert await call(runtime.add_partitions, "tx", pid, epoch - 1, [("t", 0)]) == Errors.PRODUCER_FENCED
    assert await call(runtime.end_txn, "tx", pid, epoch, True) == Errors.INVALID_TXN_STATE  # nothing open
    await runtime.close()


async def test_the_sweep_aborts_a_transaction_past_its_timeout(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    leader = ScriptedLeader()
    cfg = Config(data_dir=str(tmp_path), transaction_state_log_num_partitions=3)
    runtime = TransactionRuntime.open(cfg, open_transaction_log(cfg), Ids(), clock_ms=lambda: now[0],
                                      markers=leader, partition_exists=lambda t, p: True)
    ids = await init(runtime, "tx", timeout_ms=1_000)
    assert await call(runtime.add_partitions, "tx", ids.producer_id, ids.producer_epoch, [("t", 0)]) == Errors.NONE
    now[0] += 1_000
    assert runtime.abort_timed_out() == 0  # at its timeout, not past it
    now[0] += 1
    assert runtime.abort_timed_out() == 1
    await settled(runtime, "tx", S.COMPLETE_ABORT)
    # The abort was written at a bumped epoch, which fences the producer that let it time out.
    assert leader.asked == [(ids.producer_id, ids.producer_epoch + 1, False, [("t", 0)])]
    assert await call(runtime.end_txn, "tx", ids.producer_id, ids.producer_epoch, True) == Errors.PRODUCER_FENCED
    await runtime.close()


async def test_offsets_partitions_markers_go_to_the_group_coordinator(tmp_path: Path) -> None:
    topics, groups = ScriptedLeader(), ScriptedLeader({("__consumer_offsets", 7): [Errors.NOT_LEADER_OR_FOLLOWER]})
    cfg = Config(data_dir=str(tmp_path), transaction_state_log_num_partitions=3)
    runtime = TransactionRuntime.open(cfg, open_transaction_log(cfg), Ids(), markers=topics,
                                      partition_exists=lambda t, p: True, offsets_markers=groups)
    ids = await init(runtime, "tx")
    pid, epoch = ids.producer_id, ids.producer_epoch
    assert await call(runtime.add_partitions, "tx", pid, epoch, [("t", 0), ("__consumer_offsets", 7)]) == Errors.NONE
    assert await call(runtime.end_txn, "tx", pid, epoch, True) == Errors.NONE
    await settled(runtime, "tx", S.COMPLETE_COMMIT)
    assert topics.asked == [(pid, epoch, True, [("t", 0)])]
    assert groups.asked == [(pid, epoch, True, [("__consumer_offsets", 7)])] * 2  # retried once
    await runtime.close()
