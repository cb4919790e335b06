"""What every part of the results table shares: the targets the rows are judged by and the formatting of
a cell (a ratio, a CPU figure, an error fit for one line)."""
from __future__ import annotations

import re
from typing import Any

TARGETS = {
    "heartbeat_vs_floor": 0.6,
    "heartbeat_vs_peer": 1.0,
    "rebalance_growth": 11.0,  # issue 16 (12 before it)
    "rebalance_5000_vs_before": 0.5,  # issue 16: half the time of the run before the speed work
    "bytes_per_member": 2048.0,
    "group_commit_gain": 20.0,
    "commit_cpu_us": 35.0,
    "recovery_after_rps": 1_000_000.0,
    "pipeline_vs_replay": 0.5,
}


def ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x and y else None


def cpu_cell(run: dict[str, Any]) -> str:
    us = run.get("server_cpu_us_per_request")
    return f", {us:.1f} µs CPU each" if us is not None else ""


def met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def cpu_s(run: dict[str, Any]) -> str:
    cpu = run.get("server_cpu_s")
    return f", {cpu:.1f} s CPU" if cpu is not None else ""


def ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1000:,.0f} ms"


def errors_cell(run: dict[str, Any]) -> str:
    return f" ({run['errors']:,} errors, first {run['first_error']})" if run.get("errors") else ""


def one_line(error: str, limit: int = 240) -> str:
    """An error's last line (a traceback ends with the exception), fit for a table cell."""
    lines = [line.strip() for line in error.replace("\\n", "\n").splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"\w+(Error|Exception)\b", line)]
    text = (raised or lines or [error])[-1].replace("|", "/")
    return text if len(text) <= limit else text[:limit] + "…"
