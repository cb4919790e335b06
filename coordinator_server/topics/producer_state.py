"""Producer state of one partition (Kafka's ProducerStateManager).

Per producer id: its epoch and the metadata of its last five batches (Kafka's NumBatchesToRetain), so a
retried batch is recognised and answered with the offset it got the first time instead of being
appended again; for transactional producers also the first offset of the transaction open on this
partition and the coordinator epoch of the last marker, which fences markers from a deposed coordinator. Synchronous and clock-free; rebuilt on startup by replaying batch headers through
`on_appended`, exactly as live appends update it, so recovery and the request path cannot disagree.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from coordinator_server.storage.log import BatchInfo
from protocol.errors import Errors

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1  # of the last marker written for this producer
    txn_first_offset: int = -1  # the open transaction's first offset here, -1 when none is open
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    """`duplicate_of` is the base offset of the original when the batch is a retry."""

    error: Errors = Errors.NONE
    duplicate_of: int | None = None


def _in_sequence(last_seq: int, first_seq: int) -> bool:
    # Kafka's ProducerStateManager.inSequence: the next one, wrapping after Int32.MAX_VALUE.
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == _INT32_MAX)


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def producer_ids(self) -> list[int]:
        return list(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def check(self, info: BatchInfo) -> SequenceCheck:
        """Decide on a batch before it is appended: fine, a duplicate, or an error."""
        if info.producer_id == NO_PRODUCER_ID:
            return SequenceCheck()
        entry = self._producers.get(info.producer_id)
        if entry is None:
            # Unknown producer (new, or its batches aged out by retention): any sequence is accepted,
            # as Kafka does since KIP-360.
            return SequenceCheck()
        if info.producer_epoch < entry.epoch:
            return SequenceCheck(Errors.INVALID_PRODUCER_EPOCH)
        if info.producer_epoch > entry.epoch:
            # A bumped epoch restarts its sequences at 0.
            ok = info.base_sequence == 0
            return SequenceCheck() if ok else SequenceCheck(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for b in entry.batches:
            if b.first_seq == info.base_sequence and b.last_seq == info.last_sequence:
                return SequenceCheck(duplicate_of=b.base_offset)
        if not _in_sequence(entry.last_seq, info.base_sequence):
            return SequenceCheck(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return SequenceCheck()

    def on_appended(self, info: BatchInfo, base_offset: int) -> None:
        """Record a data batch now in the log (live append or replay)."""
        if info.producer_id == NO_PRODUCER_ID:
            return
        entry = self._producers.get(info.producer_id)
        if entry is None or info.producer_epoch > entry.epoch:
            entry = self._bumped(info.producer_id, info.producer_epoch, entry)
        entry.batches.append(BatchMetadata(info.base_sequence, info.last_sequence, base_offset))
        entry.last_timestamp = info.max_timestamp
        if info.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = base_offset

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Errors:
        """Whether a COMMIT or ABORT marker may be written for the producer: not from an epoch older than the
        producer's here, nor from a coordinator older than the one that wrote its last marker."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return Errors.NONE
        if producer_epoch < entry.epoch:
            return Errors.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return Errors.TRANSACTION_COORDINATOR_FENCED
        return Errors.NONE

    def on_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, timestamp_ms: int) -> None:
        """A marker is in the log: the producer's transaction here is over; a marker at a newer epoch (the
        coordinator's abort of a fenced producer's transaction) moves the producer to that epoch."""
        entry = self._producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch:
            entry = self._bumped(producer_id, producer_epoch, entry)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = -1
        entry.last_timestamp = timestamp_ms

    def _bumped(self, producer_id: int, epoch: int, old: ProducerEntry | None) -> ProducerEntry:
        # A new epoch restarts the sequences; the coordinator epoch and an open transaction carry over.
        entry = self._producers[producer_id] = ProducerEntry(epoch)
        if old is not None:
            entry.coordinator_epoch, entry.txn_first_offset = old.coordinator_epoch, old.txn_first_offset
        return entry
