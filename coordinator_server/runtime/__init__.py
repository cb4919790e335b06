"""The imperative shell around the coordinator core (coordinator_runtime.py composes the parts)."""
from __future__ import annotations

from .coordinator_runtime import CoordinatorRuntime

__all__ = ["CoordinatorRuntime"]
