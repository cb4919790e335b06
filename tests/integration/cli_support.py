"""Running a `coordinator-server` tool in process against a test server, as an operator would from a shell."""
from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator_server.cli import main as cli_main

from .conftest import ServerProcess


def run_tool(capsys: pytest.CaptureFixture[str], tool: str, srv: ServerProcess, *args: str) -> tuple[int, str, str]:
    """`coordinator-server TOOL ARGS --bootstrap-server SRV`: its exit code, stdout and stderr."""
    code = cli_main([tool, *args, "--bootstrap-server", srv.address])
    out, err = capsys.readouterr()
    return code, out, err


def run_tool_json(capsys: pytest.CaptureFixture[str], tool: str, srv: ServerProcess, *args: str) -> Any:
    """The tool's `--json` output, parsed; it must have succeeded."""
    code, out, err = run_tool(capsys, tool, srv, *args, "--json")
    assert code == 0, err
    return json.loads(out)
