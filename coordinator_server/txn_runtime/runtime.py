"""The transaction coordinator's shell on one node: it owns the clock the core is called with, writes what
the core decides to `__transaction_state`, answers the core once each write is durable, and loads every
partition at start-up.

Theory of operation. The core (`coordinator_server.txn.coordinator.TransactionCoordinator`) is synchronous:
each entry point takes `now_ms` and queues its records (`take_appends`) and decided transactions
(`take_markers`). After every call into the core, `_drive` takes both until the core has nothing left: each
record goes to the log as a batch of its own through the group-commit writer (many ids' records share a
round's fsync), and its `on_complete` runs once it is durable, or failed. There is no lock per transactional
id: the core answers CONCURRENT_TRANSACTIONS while an id has a change in flight, which the clients retry.

The clock is wall time in milliseconds: the core stamps the records with it (last update, transaction
start), as Kafka's coordinator does, so that they mean the same after a restart.

One node leads every partition, always at coordinator epoch 0 (the epoch only moves when leadership does).
A decided transaction's markers go to the topic partitions' writer (`MarkerWriter`, in process on one node);
one with no partition is complete at once. A partition answered with a retriable error is tried again after
`MARKER_RETRY_BACKOFF_S`; a partition whose topic is gone, or that refuses the marker as fenced, is dropped
(Kafka's marker handler does the same); once no partition is left the core writes the completion.

The sweep (`start_sweeps`) asks the core every cleanup interval to abort transactions past their timeout
(transaction.abort.timed.out.transaction.cleanup.interval.ms) and to expire unused ids.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import structlog

from coordinator_server.config import Config
from coordinator_server.storage.coordinator_log import TRANSACTION_LOG, CoordinatorLog, open_from_config
from coordinator_server.storage.errors import RecordTooLargeError, StorageError
from coordinator_server.storage.group_commit import Appended
from coordinator_server.topics.registry import OFFSETS_TOPIC
from coordinator_server.txn.coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
    TxnAppend,
    TxnConfig,
    TxnMarkers,
)
from protocol.errors import Errors

log = structlog.get_logger(__name__)

# This node leads every partition from its start on: the epoch moves only with leadership.
COORDINATOR_EPOCH = 0


MARKER_RETRY_BACKOFF_S = 0.1
# Answers after which a partition's marker is tried again (Kafka's TransactionMarkerRequestCompletionHandler).
_RETRIABLE = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR, Errors.NOT_ENOUGH_REPLICAS,
                        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT,
                        Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR})


class MarkerWriter(Protocol):
    """Writes COMMIT/ABORT markers to partitions (`net.data_plane.txn_markers.TopicTxnMarkers`); `on_done`
    once, with each partition's answer, when every marker is durable or refused."""

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          partitions: Sequence[tuple[str, int]],
                          on_done: Callable[[dict[tuple[str, int], Errors]], None]) -> None: ...


class TransactionLog(Protocol):
    """What the shell needs of the `__transaction_state` log (`storage.coordinator_log.CoordinatorLog`)."""

    @property
    def partitions(self) -> int: ...

    def read_records(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]: ...

    def submit_encoded(self, partition: int, encoded: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                       on_done: Callable[[Appended], None], leader_epoch: int = 0) -> bool: ...

    async def close(self) -> None: ...


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionRuntime:
    def __init__(self, log_: TransactionLog, coordinator: TransactionCoordinator,
                 clock_ms: Callable[[], int] = wall_clock_ms, markers: MarkerWriter | None = None,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 offsets_markers: MarkerWriter | None = None) -> None:
        self.log = log_
        self.coordinator = coordinator
        self._clock_ms = clock_ms
        self._driving = False
        self._closed = False
        self._markers = markers
        self._offsets_markers = offsets_markers  # the group coordinator's, for `__consumer_offsets`
        self._partition_exists = partition_exists
        self._sweeps: list[asyncio.Task[None]] = []
        # Decided transactions whose markers are being written: the partitions still to do.
        self.pending_markers: dict[TxnMarkers, set[tuple[str, int]]] = {}

    @classmethod
    def open(cls, config: Config, log_: TransactionLog, new_producer_id: Callable[[], int],
             clock_ms: Callable[[], int] = wall_clock_ms, markers: MarkerWriter | None = None,
             partition_exists: Callable[[str, int], bool] | None = None,
             offsets_markers: MarkerWriter | None = None) -> TransactionRuntime:
        """The shell over `log_` (opened by the caller, `open_transaction_log`), with every partition loaded.
        `new_producer_id` hands out producer ids unique across the data directory's life (the topic store's,
        which idempotent producers get theirs from too)."""
        started_s = time.monotonic()
        core = TransactionCoordinator(TxnConfig(partitions=log_.partitions,
                                                max_timeout_ms=config.transaction_max_timeout_ms,
                                                id_expiration_ms=config.transactional_id_expiration_ms),
                                      new_producer_id)
        runtime = cls(log_, core, clock_ms, markers, partition_exists, offsets_markers)
        ids = 0
        for partition in range(log_.partitions):
            core.begin_loading(partition, COORDINATOR_EPOCH)
            ids += core.load_partition(partition, log_.read_records(partition), COORDINATOR_EPOCH)
        log.info("transactions_loaded", partitions=log_.partitions, transactional_ids=ids,
                 seconds=round(time.monotonic() - started_s, 3))
        runtime._drive()  # transactions decided before a restart finish now
        return runtime

    def partition_for(self, transactional_id: str) -> int:
        return self.coordinator.partition_for(transactional_id)

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                         reply: Callable[[InitProducerIdResult], None]) -> None:
        """InitProducerId with a transactional id; `reply` runs once the answer's record is durable (or at
        once for a refusal)."""
        if self._closed:
            reply(InitProducerIdResult(Errors.NOT_COORDINATOR))
            return
        self.coordinator.handle_init_producer_id(transactional_id, timeout_ms, expected, self._clock_ms(), reply)
        self._drive()

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Sequence[tuple[str, int]], reply: Callable[[Errors], None]) -> None:
        """AddPartitionsToTxn (v0-3); `reply` once the transaction's record is durable, or with the refusal."""
        if self._closed:
            reply(Errors.NOT_COORDINATOR)
            return
        self.coordinator.handle_add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                               self._clock_ms(), reply)
        self._drive()

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                reply: Callable[[Errors], None]) -> None:
        """EndTxn: `reply` once the decision is durable; the markers follow."""
        if self._closed:
            reply(Errors.NOT_COORDINATOR)
            return
        self.coordinator.handle_end_txn(transactional_id, producer_id, producer_epoch, commit, self._clock_ms(),
                                        reply)
        self._drive()

    def abort_timed_out(self) -> int:
        """Fence and abort the transactions past their timeout; how many were."""
        if self._closed:
            return 0
        aborted = self.coordinator.abort_timed_out(self._clock_ms())
        if aborted:
            log.info("transactions_timed_out_aborted", count=aborted)
        self._drive()
        return aborted

    def expire_ids(self) -> int:
        """Remove the ids unused for transactional.id.expiration.ms; how many were."""
        if self._closed:
            return 0
        expired = self.coordinator.expire_ids(self._clock_ms())
        if expired:
            log.info("transactional_ids_expired", count=expired)
        self._drive()
        return expired

    def start_sweeps(self, abort_interval_ms: int, expire_interval_ms: int) -> None:
        """Run the two sweeps on the running loop until `close`."""
        async def every(interval_ms: int, sweep: Callable[[], int]) -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                sweep()

        loop = asyncio.get_running_loop()
        self._sweeps += [loop.create_task(every(abort_interval_ms, self.abort_timed_out)),
                         loop.create_task(every(expire_interval_ms, self.expire_ids))]

    async def close(self) -> None:
        """Take no more requests; the log waits for the writes in flight (their requests are answered) and
        is flushed and closed."""
        if self._closed:
            return
        self._closed = True
        for task in self._sweeps:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.log.close()

    # -- the shell's half of the core's protocol ------------------------------------------------------------

    def _drive(self) -> None:
        """Write what the core queued, until it queues nothing more. A completion that runs inside (a
        write refused at once) queues into the same loop rather than re-entering it."""
        if self._driving:
            return
        self._driving = True
        try:
            while True:
                appends = self.coordinator.take_appends()
                markers = self.coordinator.take_markers()
                if not appends and not markers:
                    return
                now_ms = self._clock_ms()
                for append in appends:
                    self._submit(append, now_ms)
                for decided in markers:
                    self._hand_markers(decided, now_ms)
        finally:
            self._driving = False

    def _submit(self, append: TxnAppend, now_ms: int) -> None:
        def written(appended: Appended) -> None:
            self._complete(append, Errors.NONE if appended.error is None else Errors.KAFKA_STORAGE_ERROR)

        try:
            self.log.submit_encoded(append.partition, [(append.key, append.value)], now_ms, written)
        except RecordTooLargeError:
            self._complete(append, Errors.MESSAGE_TOO_LARGE)
        except StorageError as e:
            log.error("transaction_log_append_failed", partition=append.partition, error=str(e))
            self._complete(append, Errors.KAFKA_STORAGE_ERROR)

    def _complete(self, append: TxnAppend, error: Errors) -> None:
        append.on_complete(error)
        self._drive()

    def _hand_markers(self, decided: TxnMarkers, now_ms: int) -> None:
        if not decided.partitions:
            self.coordinator.markers_written(decided, now_ms)
            return
        self.pending_markers[decided] = set(decided.partitions)
        self._send_markers(decided)

    def _send_markers(self, decided: TxnMarkers) -> None:
        left = self.pending_markers.get(decided)
        if left is None or self._closed:
            return
        if self._markers is None:
            log.warning("transaction_markers_not_written", transactional_id=decided.transactional_id,
                        partitions=len(left), commit=decided.commit)
            return

        def answered(errors: dict[tuple[str, int], Errors]) -> None:
            retry = False
            for key, error in errors.items():
                if error in _RETRIABLE or (error == Errors.UNKNOWN_TOPIC_OR_PARTITION and self._exists(key)):
                    retry = True
                    continue
                if error != Errors.NONE:
                    # Fenced, or the topic is gone: nothing more to write there (Kafka drops it too).
                    log.warning("transaction_marker_dropped", transactional_id=decided.transactional_id,
                                topic=key[0], partition=key[1], error=error.name)
                left.discard(key)
            if not left:
                del self.pending_markers[decided]
                self.coordinator.markers_written(decided, self._clock_ms())
                self._drive()
            elif retry:
                asyncio.get_running_loop().call_later(MARKER_RETRY_BACKOFF_S, self._send_markers, decided)

        # Topic partitions' markers go to their leader; `__consumer_offsets`' to the group coordinator, which
        # also applies them to the pending offsets. One answer once both have answered.
        by_writer: dict[bool, list[tuple[str, int]]] = {}
        for key in sorted(left):
            by_writer.setdefault(key[0] == OFFSETS_TOPIC, []).append(key)
        merged: dict[tuple[str, int], Errors] = {}
        waiting = [len(by_writer)]

        def one_answered(errors: dict[tuple[str, int], Errors]) -> None:
            merged.update(errors)
            waiting[0] -= 1
            if waiting[0] == 0:
                answered(merged)

        for offsets, keys in by_writer.items():
            writer = self._offsets_markers if offsets else self._markers
            if writer is None:
                one_answered(dict.fromkeys(keys, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                writer.write_txn_markers(decided.producer_id, decided.producer_epoch, decided.coordinator_epoch,
                                         decided.commit, keys, one_answered)

    def _exists(self, key: tuple[str, int]) -> bool:
        return self._partition_exists is not None and self._partition_exists(*key)


def open_transaction_log(config: Config) -> CoordinatorLog:
    """Open (recovering) `__transaction_state`: after `__consumer_offsets`'s log, which holds the data
    directory's lock. Compacted with the same cleaner settings."""
    return open_from_config(config, TRANSACTION_LOG, config.transaction_state_log_num_partitions)
