"""The imperative shell around the coordinator core (coordinator_runtime.py composes the parts)."""
from __future__ import annotations

from .coordinator_runtime import CoordinatorRuntime, open_coordinator_log, shared_timer

__all__ = ["CoordinatorRuntime", "open_coordinator_log", "shared_timer"]
