"""What every group manager of a coordinator shard shares: the clock, the timer and its keyed-timer service,
the one group table of every group type (table.py), the gate (which partitions this node coordinates, and
which it is still loading) and the queue of appends.

`GroupCoordinator` (coordinator.py) is this class with the managers composed on it; the managers get it as
their `shard`, a concrete class (not a protocol), so that compiled code reads its fields natively on the hot
path. Nothing here decides anything about a group: the managers do.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Final

import structlog
from mypy_extensions import mypyc_attr

from coordinator_server.purgatory import Timer
from protocol.errors import Errors

from .api import PendingAppend
from .consumer.group import ConsumerGroup
from .group import GroupMetadata
from .partitioner import partition_for
from .records import CoordinatorRecord
from .table import Group
from .timers import KeyedTimer

log = structlog.get_logger("coordinator_server.group")

# Read once: each `Errors.NONE` in compiled code is a lookup through the enum's metaclass (its
# `__getattr__` hook), and a durable commit's callbacks test it on every append.
_NONE: Final = Errors.NONE


# GroupCoordinator's base, and GroupCoordinator allows interpreted subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class CoordinatorShard:
    def __init__(self, partitions: int, timer: Timer, wall_offset_ms: int = 0) -> None:
        self.partitions = partitions
        self.timer = timer
        # Every manager's keyed timers (session, rebalance and sync deadlines), on the one timing wheel.
        self.timers = KeyedTimer(timer)
        # wall clock = monotonic + offset; the shell refreshes the offset, the core never reads a clock.
        self.wall_offset_ms = wall_offset_ms
        self.now_ms = 0
        # Every group of the shard, classic and consumer alike (table.py); the managers share this one dict.
        self.groups: dict[str, Group] = {}
        self.active = True
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        # The leader epoch each held (owned or loading) partition was taken at (0 on one node).
        self.partition_epochs: dict[int, int] = {}
        self._appends: list[PendingAppend] = []

    # -- time ----------------------------------------------------------------------------------------

    def _tick(self, now_ms: int) -> None:
        if now_ms > self.now_ms:
            self.now_ms = now_ms

    @property
    def wall_ms(self) -> int:
        return self.now_ms + self.wall_offset_ms

    def tick(self, now_ms: int) -> None:
        """Move the clock with nothing due (the caller checked `next_expiration_ms`)."""
        self._tick(now_ms)

    # -- the appends ---------------------------------------------------------------------------------

    def emit_append(
        self, group_id: str, records: tuple[CoordinatorRecord, ...], on_done: Callable[[Errors], None]
    ) -> None:
        """Hand records to the shell to make durable; on_done runs with the write's outcome."""

        def on_complete(error: Errors, now_ms: int) -> None:
            self._tick(now_ms)
            if error is not _NONE:
                log.warning("coordinator_write_failed", group_id=group_id, error=error.name, records=len(records))
            on_done(error)

        self._appends.append(PendingAppend(group_id, self.partition_for(group_id), records, on_complete))

    def has_appends(self) -> bool:
        return bool(self._appends)

    def take_appends(self) -> list[PendingAppend]:
        appends, self._appends = self._appends, []
        return appends

    # -- the group table and the gate ----------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def classic_group(self, group_id: str) -> GroupMetadata | None:
        """The classic group of that id; None if there is none or the id holds a group of another type."""
        group = self.groups.get(group_id)
        return group if isinstance(group, GroupMetadata) else None

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id; None if there is none or the id holds a group of another type."""
        group = self.groups.get(group_id)
        return group if isinstance(group, ConsumerGroup) else None

    def validate_group_status(self, group_id: str | None, allow_empty: bool = False) -> Errors | None:
        """The checks every group request passes first: a group id (offset commits and fetches accept "", the
        rest reject it), then this node coordinating the group, loaded."""
        if group_id is None or (group_id == "" and not allow_empty):
            return Errors.INVALID_GROUP_ID
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self.loading_partitions:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return Errors.NOT_COORDINATOR
        return None
