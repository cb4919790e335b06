"""What every operator tool shares: one-line errors with exit code 1, aligned tables, JSON."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

EXIT_OK = 0
EXIT_ERROR = 1


class ToolError(Exception):
    """A failure to report as one line on stderr with exit code 1 (no traceback: it is the operator's
    problem to fix, not a bug)."""


def run_tool(prog: str, body: Callable[[], int]) -> int:
    """Run a tool's body, turning ToolError into `prog: error: ...` on stderr and exit code 1."""
    try:
        return body()
    except ToolError as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        return EXIT_ERROR
    except BrokenPipeError:
        # `... | head`: the reader went away; not an error worth a traceback.
        sys.stderr.close()
        return EXIT_OK


def cell(value: object) -> str:
    """A table cell: None (unknown, not applicable) prints as `-`, as Kafka's tools do."""
    return "-" if value is None else str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last column is not padded."""
    text_rows = [list(headers)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in text_rows) for i in range(len(headers))]
    lines = []
    for r in text_rows:
        padded = [v.ljust(w) for v, w in zip(r[:-1], widths[:-1], strict=True)] + [r[-1]]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines) + "\n"


def write_json(obj: Any, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def note(text: str) -> None:
    """A remark for a human (dry-run notice, empty group) on stderr, so stdout stays the data."""
    sys.stderr.write(text + "\n")
