"""The coordinator's delayed operations: each re-checks the group when it fires, because the
group may have moved on since it was scheduled (stale timers are expected, not bugs).

They decide nothing themselves: they call back through `RebalanceCallbacks`, which the rebalance mechanics
(rebalance.py, under the façade in coordinator.py) provide. The arrow runs one way — those modules import
this one, never the reverse.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from coordinator_server.purgatory import DelayedOperation, DelayedOperationPurgatory

from .group import GroupMetadata


class RebalanceCallbacks(Protocol):
    """What the delayed operations call when they are checked, complete or expire."""

    @property
    def now_ms(self) -> int: ...

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool: ...

    def on_complete_join(self, group: GroupMetadata) -> None: ...

    def on_expire_join(self, group: GroupMetadata) -> None: ...

    def try_complete_heartbeat(
        self, group: GroupMetadata, member_id: str, is_pending: bool, force_complete: Callable[[], bool]
    ) -> bool: ...

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None: ...


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def member_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class DelayedJoin(DelayedOperation):
    """Completes once every member has rejoined and no pending member remains, or at the rebalance timeout."""

    __slots__ = ("callbacks", "group")

    def __init__(self, callbacks: RebalanceCallbacks, group: GroupMetadata, rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.callbacks = callbacks
        self.group = group

    def try_complete(self) -> bool:
        return self.callbacks.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.callbacks.on_complete_join(self.group)

    def on_expiration(self) -> None:
        self.callbacks.on_expire_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an Empty group waits `group.initial.rebalance.delay.ms` and waits again while
    new members keep arriving, within the rebalance timeout. It never completes early."""

    __slots__ = ("configured_delay_ms", "purgatory", "remaining_ms")

    def __init__(
        self,
        callbacks: RebalanceCallbacks,
        purgatory: DelayedOperationPurgatory[DelayedOperation],
        group: GroupMetadata,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(callbacks, group, delay_ms)
        self.purgatory = purgatory
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.callbacks, self.purgatory, group, self.configured_delay_ms, delay, remaining),
                (join_key(group.group_id),),
                self.callbacks.now_ms,
            )
        else:
            self.callbacks.on_complete_join(group)

    def on_expiration(self) -> None:
        pass  # every initial wait ends by expiring; that is its design, not a rebalance timeout


class DelayedHeartbeat(DelayedOperation):
    """A member's (or pending member's) session deadline."""

    __slots__ = ("callbacks", "group", "is_pending", "member_id")

    def __init__(
        self, callbacks: RebalanceCallbacks, group: GroupMetadata, member_id: str, is_pending: bool, timeout_ms: int
    ) -> None:
        super().__init__(timeout_ms)
        self.callbacks = callbacks
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.callbacks.try_complete_heartbeat(self.group, self.member_id, self.is_pending, self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.callbacks.on_expire_heartbeat(self.group, self.member_id, self.is_pending)
