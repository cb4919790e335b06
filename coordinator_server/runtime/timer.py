"""The one loop timer: the core's timing wheel is driven by exactly one `loop.call_at`, armed at the wheel's
next bucket deadline, and the core's clock moves with the loop's monotonic time."""
from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable

from coordinator_server.group.coordinator import GroupCoordinator


class LoopTimer:
    """`on_fired` runs after the timers due when the loop timer fired (the runtime writes what they emitted)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, coordinator: GroupCoordinator,
                 on_fired: Callable[[], None]) -> None:
        self.loop = loop
        self.coordinator = coordinator
        self._on_fired = on_fired
        self._handle: asyncio.TimerHandle | None = None
        self._deadline_ms: int | None = None
        self._closed = False

    def now_ms(self) -> int:
        return monotonic_ms(self.loop)

    def armed_for(self, deadline: int | None) -> bool:
        """Whether the loop timer is armed, and for `deadline`."""
        return self._handle is not None and deadline == self._deadline_ms

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def advance(self, now_ms: int) -> None:
        deadline = self.coordinator.next_expiration_ms()
        if deadline is None or deadline > now_ms:
            # Nothing due (after most requests): only the core's clock moves. The wheels' own clocks catch
            # up at the next expiration; a task added meanwhile lands in a coarser wheel and cascades.
            self.coordinator.tick(now_ms)
            return
        # Timers that come due here belong to whichever groups set them, not to the request whose call
        # happens to run them: their log lines must not carry this connection's peer and client id.
        contextvars.Context().run(self.coordinator.advance_clock, now_ms)

    def arm(self) -> None:
        if self._closed:
            return
        deadline = self.coordinator.next_expiration_ms()
        if deadline == self._deadline_ms and self._handle is not None:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._deadline_ms = deadline
        if deadline is not None:
            # In an empty context: call_at would otherwise copy the context of whichever request armed
            # it, and label other groups' expiries with that connection's peer and client id.
            self._handle = self.loop.call_at(deadline / 1000.0, self._fired, deadline,
                                                   context=contextvars.Context())

    def _fired(self, deadline_ms: int) -> None:
        self._handle = None
        self._deadline_ms = None
        if self._closed:
            return
        self.coordinator.wall_offset_ms = wall_offset_ms(self.loop)
        # The loop may wake a hair early in float seconds; it fired for this deadline, so it is due.
        self.advance(max(self.now_ms(), deadline_ms))
        self.arm()
        self._on_fired()


def monotonic_ms(loop: asyncio.AbstractEventLoop) -> int:
    return int(loop.time() * 1000)


def wall_offset_ms(loop: asyncio.AbstractEventLoop) -> int:
    return int(time.time() * 1000) - monotonic_ms(loop)
