"""The transaction coordinator: the transactional ids of the `__transaction_state` partitions this node leads.

Theory of operation. Synchronous and single-threaded, as the group coordinator: every entry point takes the
current time and runs to completion; answers go out through callbacks. The core never writes: each change
is a `TxnAppend` (one record: the id's key, its metadata after the change) taken by the shell with
`take_appends`, whose `on_complete` the shell calls with the write's outcome once it is durable (and, in a
cluster, committed). Only then is the change applied, and only if this node still leads the partition at
the coordinator epoch the change was prepared under; otherwise the request is answered NOT_COORDINATOR and
nothing is applied. A decided transaction's markers (`TxnMarkers`, taken with `take_markers`) are the
shell's to write to every partition of the transaction; once all are written it calls `markers_written`,
and the coordinator writes the transaction's completion.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import structlog

from coordinator_server.group.partitioner import partition_for
from coordinator_server.group.write_errors import write_error
from protocol.errors import Errors

from .metadata import TransactionMetadata, TxnRefusal, TxnTransit
from .operations import (
    Fence,
    add_partitions,
    begin_fence_abort,
    complete_transaction,
    end_transaction,
    expire,
    init_producer_id,
    prepare_fence,
    timed_out,
)
from .records import UnknownRecord, decode_key, decode_value, encode_key, encode_value
from .state import TransactionState

log = structlog.get_logger("coordinator_server.txn")


@dataclass(frozen=True, slots=True)
class TxnConfig:
    partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    value_version: int = 0  # the record value version: 0 while the finalized transaction.version is 0


@dataclass(slots=True)
class TxnAppend:
    partition: int
    key: bytes
    value: bytes | None  # None: the tombstone of an expired id
    on_complete: Callable[[Errors], None]


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """A decided transaction: a COMMIT or ABORT control record to write to each of `partitions`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: Errors
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int
    loading: bool = True
    ids: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, new_producer_id: Callable[[], int]) -> None:
        self.config = config
        self._new_producer_id = new_producer_id
        self._partitions: dict[int, _Partition] = {}
        self._appends: list[TxnAppend] = []
        self._markers: list[TxnMarkers] = []

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.partitions)

    def take_appends(self) -> list[TxnAppend]:
        out, self._appends = self._appends, []
        return out

    def take_markers(self) -> list[TxnMarkers]:
        out, self._markers = self._markers, []
        return out

    # -- leadership ---------------------------------------------------------------------------------------

    def begin_loading(self, partition: int, coordinator_epoch: int) -> bool:
        """This node leads `partition` from `coordinator_epoch` on: its ids answer LOAD_IN_PROGRESS until
        `load_partition`. False (ignored) unless the epoch is newer than one already held."""
        held = self._partitions.get(partition)
        if held is not None and held.coordinator_epoch >= coordinator_epoch:
            return False
        self._partitions[partition] = _Partition(coordinator_epoch)
        return True

    def load_partition(self, partition: int, records: Iterable[tuple[bytes, bytes | None]],
                       coordinator_epoch: int) -> int:
        """The partition's records in log order: the last one of each id wins, a tombstone removes it. The
        decided transactions found are finished: their markers are sent again. The ids loaded, or -1 when
        the partition moved on meanwhile."""
        held = self._partitions.get(partition)
        if held is None or held.coordinator_epoch != coordinator_epoch:
            return -1
        latest: dict[str, TxnTransit | None] = {}
        for key, value in records:
            try:
                transactional_id = decode_key(key)
            except UnknownRecord as e:
                # A newer broker's key version: not ours to read, and no reason to refuse the partition
                # (Kafka's loader skips it the same way). An unknown value version is damage and raises.
                log.warning("transaction_log_record_skipped", partition=partition, reason=str(e))
                continue
            latest[transactional_id] = decode_value(value)
        held.ids = {tid: TransactionMetadata.loaded(tid, record) for tid, record in latest.items()
                    if record is not None}
        held.loading = False
        for md in held.ids.values():
            if md.state.is_prepare:
                self._markers.append(_markers_of(md, coordinator_epoch))
        return len(held.ids)

    def unload_partition(self, partition: int, coordinator_epoch: int | None) -> bool:
        """Another node leads `partition` (at a newer epoch, or None: unknown): its ids are dropped, and
        whatever they were writing is answered NOT_COORDINATOR when it completes."""
        held = self._partitions.get(partition)
        if held is None or (coordinator_epoch is not None and held.coordinator_epoch >= coordinator_epoch):
            return False
        del self._partitions[partition]
        return True

    # -- the APIs -----------------------------------------------------------------------------------------

    def handle_init_producer_id(self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                                now_ms: int, reply: Callable[[InitProducerIdResult], None]) -> None:
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            reply(InitProducerIdResult(Errors.INVALID_TRANSACTION_TIMEOUT))
            return
        located = self._locate(transactional_id)
        if isinstance(located, Errors):
            reply(InitProducerIdResult(located))
            return
        md = located.ids.get(transactional_id)
        if md is None:
            # Cached at once, unwritten: the producer id is the id's from now on.
            md = located.ids[transactional_id] = TransactionMetadata.new(
                transactional_id, self._new_producer_id(), timeout_ms, now_ms)
        try:
            plan = init_producer_id(md, expected, timeout_ms, now_ms, self._new_producer_id)
        except TxnRefusal as e:
            reply(InitProducerIdResult(e.error))
            return
        if isinstance(plan, Fence):
            # Answered once the abort is decided: the producer retries, and then gets an epoch past it.
            self._fence_and_abort(located, md, plan, now_ms, lambda error: reply(InitProducerIdResult(
                Errors.CONCURRENT_TRANSACTIONS if error == Errors.NONE else error)))
            return
        self._write(located, md, plan, lambda error: reply(
            InitProducerIdResult(Errors.NONE, plan.producer_id, plan.producer_epoch) if error == Errors.NONE
            else InitProducerIdResult(error)))

    def handle_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]], now_ms: int,
                              reply: Callable[[Errors], None]) -> None:
        """AddPartitionsToTxn v0-3, and AddOffsetsToTxn with the group's `__consumer_offsets` partition."""
        prepared = self._prepare(transactional_id, reply, lambda md: add_partitions(
            md, producer_id, producer_epoch, partitions, now_ms))
        if prepared is not None:
            self._write(*prepared, reply)

    def handle_end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                       now_ms: int, reply: Callable[[Errors], None]) -> None:
        """EndTxn v0-4: answered once the decision (PrepareCommit or PrepareAbort) is durable; the markers
        follow."""
        prepared = self._prepare(transactional_id, reply, lambda md: end_transaction(
            md, producer_id, producer_epoch, commit, now_ms))
        if prepared is None:
            return
        held, md, transit = prepared
        epoch = held.coordinator_epoch

        def decided(error: Errors) -> None:
            if error == Errors.NONE:
                self._markers.append(_markers_of(md, epoch))
            reply(error)

        self._write(held, md, transit, decided)

    def markers_written(self, markers: TxnMarkers, now_ms: int) -> None:
        """Every marker of a decided transaction is written: write its completion (retried while the log is
        unavailable; given up when another coordinator takes over: it finishes the transaction itself)."""
        found = self._metadata(markers.transactional_id)
        if isinstance(found, Errors):
            return
        held, md = found
        current = md.current
        if (held.coordinator_epoch != markers.coordinator_epoch or not current.state.is_prepare
                or current.producer_id != markers.producer_id or current.producer_epoch != markers.producer_epoch):
            return
        try:
            transit = complete_transaction(md, now_ms)
        except TxnRefusal:
            return

        def completed(error: Errors) -> None:
            if error == Errors.COORDINATOR_NOT_AVAILABLE:
                self.markers_written(markers, now_ms)

        self._write(held, md, transit, completed)

    # -- sweeps -------------------------------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> int:
        """transaction.timeout.ms: each open transaction past it is fenced and aborted. How many were."""
        aborted = 0
        for held, md in list(self._led_ids()):
            if timed_out(md, now_ms):
                self._fence_and_abort(held, md, prepare_fence(md, now_ms), now_ms, lambda _error: None)
                aborted += 1
        return aborted

    def expire_ids(self, now_ms: int) -> int:
        """transactional.id.expiration.ms: resting ids unused for that long get a tombstone and are dropped."""
        expired = 0
        for held, md in list(self._led_ids()):
            dead = expire(md, now_ms, self.config.id_expiration_ms)
            if dead is not None:
                self._write(held, md, dead, lambda _error: None)
                expired += 1
        return expired

    # -- reading ------------------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[Errors, TransactionMetadata | None]:
        found = self._metadata(transactional_id, unknown=Errors.TRANSACTIONAL_ID_NOT_FOUND)
        return (found, None) if isinstance(found, Errors) else (Errors.NONE, found[1])

    def transactions(self) -> Iterator[TransactionMetadata]:
        """The ids of every partition led and loaded here."""
        return (md for _held, md in self._led_ids())

    # -- the write ----------------------------------------------------------------------------------------

    def _write(self, held: _Partition, md: TransactionMetadata, transit: TxnTransit,
               on_done: Callable[[Errors], None]) -> None:
        """Emit `transit`'s record; apply it once durable, if `held` is still this node's at the same
        coordinator epoch; `on_done` gets NONE, or the error the request is answered with."""
        partition = self.partition_for(md.transactional_id)
        epoch = held.coordinator_epoch

        def complete(error: Errors) -> None:
            if error != Errors.NONE:
                md.abandon(transit)
                on_done(write_error(error))  # the group core's map: Kafka answers both the same
                return
            now_held = self._partitions.get(partition)
            if now_held is not held or now_held.coordinator_epoch != epoch or held.ids.get(md.transactional_id) is not md:
                md.abandon(transit)
                on_done(Errors.NOT_COORDINATOR)
                return
            md.complete(transit)
            if transit.state is TransactionState.DEAD:
                del held.ids[md.transactional_id]
            on_done(Errors.NONE)

        self._appends.append(TxnAppend(partition, encode_key(md.transactional_id),
                                       encode_value(transit, self.config.value_version), complete))

    def _fence_and_abort(self, held: _Partition, md: TransactionMetadata, fence: Fence, now_ms: int,
                         on_done: Callable[[Errors], None]) -> None:
        abort = begin_fence_abort(md, fence, now_ms)
        epoch = held.coordinator_epoch

        def aborted(error: Errors) -> None:
            md.has_failed_epoch_fence = error != Errors.NONE
            if error == Errors.NONE:
                self._markers.append(_markers_of(md, epoch))
            on_done(error)

        self._write(held, md, abort, aborted)

    def _prepare(self, transactional_id: str, reply: Callable[[Errors], None],
                 decide: Callable[[TransactionMetadata], TxnTransit | None]
                 ) -> tuple[_Partition, TransactionMetadata, TxnTransit] | None:
        """The transition `decide` prepares for a known id, to write; None when the request is answered
        already: refused, or NONE with nothing to write."""
        found = self._metadata(transactional_id)
        if isinstance(found, Errors):
            reply(found)
            return None
        held, md = found
        try:
            transit = decide(md)
        except TxnRefusal as e:
            reply(e.error)
            return None
        if transit is None:
            reply(Errors.NONE)
            return None
        return held, md, transit

    def _locate(self, transactional_id: str) -> _Partition | Errors:
        held = self._partitions.get(self.partition_for(transactional_id))
        if held is None:
            return Errors.NOT_COORDINATOR
        if held.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return held

    def _metadata(self, transactional_id: str, unknown: Errors = Errors.INVALID_PRODUCER_ID_MAPPING
                  ) -> tuple[_Partition, TransactionMetadata] | Errors:
        located = self._locate(transactional_id)
        if isinstance(located, Errors):
            return located
        md = located.ids.get(transactional_id)
        return unknown if md is None else (located, md)

    def _led_ids(self) -> Iterator[tuple[_Partition, TransactionMetadata]]:
        for held in self._partitions.values():
            if not held.loading:
                for md in held.ids.values():
                    yield held, md


def _markers_of(md: TransactionMetadata, coordinator_epoch: int) -> TxnMarkers:
    current = md.current
    return TxnMarkers(md.transactional_id, current.producer_id, current.producer_epoch, coordinator_epoch,
                      current.state is TransactionState.PREPARE_COMMIT, current.partitions)
