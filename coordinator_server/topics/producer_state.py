"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, non-transactional part).

Per producer id: its epoch and the metadata of its last five batches (Kafka's NumBatchesToRetain), so a
retried batch is recognised and answered with the offset it got the first time instead of being
appended again. Synchronous and clock-free; rebuilt on startup by replaying batch headers through
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
        """Record a batch now in the log (live append or replay)."""
        if info.producer_id == NO_PRODUCER_ID:
            return
        entry = self._producers.get(info.producer_id)
        if entry is None or info.producer_epoch > entry.epoch:
            entry = self._producers[info.producer_id] = ProducerEntry(info.producer_epoch)
        entry.batches.append(BatchMetadata(info.base_sequence, info.last_sequence, base_offset))
