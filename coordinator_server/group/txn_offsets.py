"""Pending transactional offsets: what TxnOffsetCommit wrote and no marker has settled yet.

Theory of operation. A transactional offset record, once durable, is *pending* for its producer id: OffsetFetch
never returns it (RequireStable answers UNSTABLE_OFFSET_COMMIT for its partition instead). The producer's
COMMIT marker moves its pending offsets into the committed ones, its ABORT marker drops them. A pending offset
replaces a committed one only when its record is later in the log than the committed one's (Kafka's
replayEndTransactionMarker): a plain OffsetCommit written after a transactional one wins, whatever order the
markers come in. Instead of every committed offset carrying its record's position, each pending entry
carries an `order` (its record's offset at load, a counter above every loaded one when live: both follow the
log's order within a group) and a `superseded` flag, set when a committed offset is applied after it (a
plain commit, or another producer's materialized entry with a greater order). An offset tombstone removes
the partition's pending entries of every open transaction of the group, as Kafka's replay does.

Synchronous and clock-free: the same calls apply records live (in their append's completion) and at load.
"""
from __future__ import annotations

from .records import OffsetCommitValue

TopicPartition = tuple[str, int]


class PendingTxnOffset:
    __slots__ = ("order", "superseded", "value")

    def __init__(self, value: OffsetCommitValue, order: int) -> None:
        self.value = value
        self.order = order
        self.superseded = False

    def __repr__(self) -> str:
        return f"PendingTxnOffset({self.value!r}, order={self.order}, superseded={self.superseded})"


class TransactionalOffsets:
    """Per group, per producer id, per partition: the pending entries (Kafka's pendingTransactionalOffsets
    and openTransactionsByGroup in one map)."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[int, dict[TopicPartition, PendingTxnOffset]]] = {}
        self._next_order = 0

    def has_pending(self, group_id: str) -> bool:
        return group_id in self.by_group

    def has_pending_offset(self, group_id: str, tp: TopicPartition) -> bool:
        producers = self.by_group.get(group_id)
        return producers is not None and any(tp in entries for entries in producers.values())

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        producers = self.by_group.get(group_id, {})
        return {tp for entries in producers.values() for tp in entries}

    def open_producers(self, group_id: str) -> set[int]:
        return set(self.by_group.get(group_id, {}))

    def add(self, group_id: str, producer_id: int, tp: TopicPartition, value: OffsetCommitValue,
            order: int | None = None) -> None:
        """Replay of a transactional offset record: `order` is its record's offset at load, None live."""
        if order is None:
            order = self._next_order
        self._next_order = max(self._next_order, order + 1)
        self.by_group.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = PendingTxnOffset(value, order)

    def on_committed(self, group_id: str, tp: TopicPartition, order: int | None = None) -> None:
        """A committed offset of `tp` was applied: a plain commit (None: later than every pending entry) or
        a materialized entry of that order. Earlier pending entries can no longer replace it."""
        producers = self.by_group.get(group_id)
        if producers is None:
            return
        for entries in producers.values():
            entry = entries.get(tp)
            if entry is not None and (order is None or entry.order < order):
                entry.superseded = True

    def on_tombstone(self, group_id: str, tp: TopicPartition) -> None:
        producers = self.by_group.get(group_id)
        if producers is None:
            return
        for producer_id in list(producers):
            entries = producers[producer_id]
            entries.pop(tp, None)
            if not entries:
                del producers[producer_id]
        if not producers:
            del self.by_group[group_id]

    def end_transaction(self, group_id: str, producer_id: int, commit: bool,
                        committed: dict[TopicPartition, OffsetCommitValue]) -> int:
        """Replay of a marker for one group: COMMIT materializes the producer's entries not superseded
        into `committed`, ABORT drops them. Returns how many offsets were materialized. A producer with
        nothing pending here is normal (it committed no offsets to this group)."""
        producers = self.by_group.get(group_id)
        if producers is None:
            return 0
        entries = producers.pop(producer_id, None)
        if not producers:
            del self.by_group[group_id]
        if entries is None or not commit:
            return 0
        materialized = 0
        for tp, entry in entries.items():
            if entry.superseded:
                continue
            committed[tp] = entry.value
            self.on_committed(group_id, tp, entry.order)
            materialized += 1
        return materialized

    def groups_of(self, producer_id: int) -> list[str]:
        """The groups where `producer_id` has an open transaction (a marker's reach)."""
        return [g for g, producers in self.by_group.items() if producer_id in producers]

    def forget_group(self, group_id: str) -> None:
        """The group left this coordinator (unloaded): its entries go with it; the log keeps them."""
        self.by_group.pop(group_id, None)
