"""Kafka's DelayedOperation: a timer task that completes exactly once, by its condition or by its timeout.

Completion has one door, ``force_complete``: whoever calls it first (``try_complete`` when the condition
holds, or the timer through ``run``) marks the operation completed, takes it off the timer, tells the
purgatory that watches it and only then calls ``on_complete``, so the purgatory's bookkeeping is already
consistent if ``on_complete`` re-enters it. ``on_expiration`` runs after ``on_complete`` when the timer
won, as in Kafka.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Hashable

from mypy_extensions import mypyc_attr

from coordinator_server.purgatory.timing_wheel import TimerTask

CompletionListener = Callable[["DelayedOperation"], None]


# Subclassed outside the compiled modules (the topic store's fetches, replication's produces, tests).
@mypyc_attr(allow_interpreted_subclasses=True)
class DelayedOperation(TimerTask):
    """Kafka's DelayedOperation: tryComplete / forceComplete / onComplete / onExpiration, completed exactly once."""

    __slots__ = ("_completed", "_listener", "_watch_keys", "_watch_list")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False
        # Set by the purgatory that parks this operation; one shared callable per purgatory, not per op.
        self._listener: CompletionListener | None = None
        self._watch_keys: tuple[Hashable, ...] = ()
        # The watch list it sits in when watched under one key: lets the purgatory answer "is it alone
        # there?" without hashing the key into a table of millions (a heartbeat asks on every call).
        self._watch_list: dict[int, DelayedOperation] | None = None

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if it holds, return force_complete(), else False."""

    @abstractmethod
    def on_complete(self) -> None:
        """The only place a response goes out. Called exactly once."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called after force_complete() (and so after on_complete) when the timeout won."""

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """First caller wins: completes, cancels the timeout, calls on_complete(), returns True."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        listener = self._listener
        if listener is not None:
            self._listener = None
            listener(self)
        self.on_complete()
        return True

    def safe_try_complete(self) -> bool:
        """try_complete() unless already completed (then False: this call did not complete it)."""
        if self._completed:
            return False
        return self.try_complete()

    def run(self) -> None:
        if self.force_complete():
            self.on_expiration()
