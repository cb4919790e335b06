"""Delayed operations, their purgatory and the hierarchical timing wheel that times them out."""

from coordinator_server.purgatory.operation import DelayedOperation
from coordinator_server.purgatory.purgatory import DelayedOperationPurgatory
from coordinator_server.purgatory.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory", "Timer", "TimerTask"]
