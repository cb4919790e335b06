"""The real server as a subprocess, for every integration test.

    def test_something(server_factory):
        srv = server_factory(topic=["orders:3"], initial_rebalance_delay_ms=0)
        ...connect to (srv.host, srv.port)...
        srv.kill9(); srv.restart()          # same data dir, new port
        assert srv.terminate() == 0         # SIGTERM, returns the exit code
        srv.events("listening")             # parsed JSON log lines so far

    def test_default(server):               # one server with default flags
        ...

Flags are keyword arguments: `initial_rebalance_delay_ms=0` becomes `--initial-rebalance-delay-ms 0`;
a list repeats the flag (`topic=["a:1", "b:2"]`); `True` passes a bare flag. `--port 0`,
`--data-dir` (a fresh tmp dir) and `--log-format json` are always set. The process's environment is
inherited, plus `env=` extras.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# kafka-python 3.0.12 loads its JSON schemas with the deprecated importlib.resources.read_text/open_text
# when each message module is first imported, which `filterwarnings = error` would turn into a
# collection error. Import them all once here, with that one warning silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    import kafka.protocol

    for _mod in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        importlib.import_module(_mod.name)
    import kafka.admin
    import kafka.consumer

START_TIMEOUT_S = 20.0


class ServerProcess:
    def __init__(self, data_dir: Path, flags: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.flags = dict(flags)
        self.env = {**os.environ, **(env or {})}
        self.host = "127.0.0.1"
        self.port = -1
        self.proc: subprocess.Popen[str] | None = None
        self.logs: list[dict[str, Any]] = []  # JSON log lines of every run, in order
        self.raw_stderr: list[str] = []  # lines that were not JSON (tracebacks from a crash, ...)
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    # ------------------------------------------------------------------------------------ control

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "coordinator_server", "--port", "0", "--data-dir", str(self.data_dir),
                "--log-format", "json"]
        for name, value in self.flags.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                args.append(flag)
            elif isinstance(value, list | tuple):
                for v in value:
                    args += [flag, str(v)]
            elif value is not None and value is not False:
                args += [flag, str(value)]
        return args

    def start(self, wait: bool = True) -> ServerProcess:
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        self._listening.clear()
        self.proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=self.env,
        )
        self._reader = threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)
        self._reader.start()
        if wait:
            self.wait_listening()
        return self

    def wait_listening(self, timeout_s: float = START_TIMEOUT_S) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None:
                self._join_reader()
                raise RuntimeError(f"server exited with {self.proc.returncode} before listening:\n"
                                   + "\n".join(self.stderr_lines()[-30:]))
            if time.monotonic() > deadline:
                raise RuntimeError("server did not log `listening` in time:\n"
                                   + "\n".join(self.stderr_lines()[-30:]))

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        return self._stop(signal.SIGTERM, timeout_s)

    def interrupt(self, timeout_s: float = 15.0) -> int:
        return self._stop(signal.SIGINT, timeout_s)

    def kill9(self) -> int:
        return self._stop(signal.SIGKILL, 10.0)

    def restart(self, **flag_overrides: Any) -> ServerProcess:
        """Stop (SIGTERM) if running, then start again on the same data dir (the port may change)."""
        if self.running:
            self.terminate()
        self.flags.update(flag_overrides)
        return self.start()

    def wait(self, timeout_s: float = 15.0) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout_s)
        self._join_reader()
        return code

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _stop(self, sig: signal.Signals, timeout_s: float) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            self._join_reader()
            raise
        self._join_reader()
        return code

    # --------------------------------------------------------------------------------------- logs

    def _read_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip("\n")
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._lock:
                if isinstance(event, dict):
                    self.logs.append(event)
                else:
                    self.raw_stderr.append(line)
            if isinstance(event, dict) and event.get("event") == "listening":
                self.host = str(event["host"])
                self.port = int(event["port"])
                self._listening.set()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(5)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.logs if name is None or e.get("event") == name]

    def stderr_lines(self) -> list[str]:
        with self._lock:
            return [json.dumps(e) for e in self.logs] + list(self.raw_stderr)

    def wait_for_event(self, name: str, timeout_s: float = 5.0, **match: Any) -> dict[str, Any]:
        """Wait until a log event `name` (with the given field values) has been seen."""
        deadline = time.monotonic() + timeout_s
        while True:
            for e in self.events(name):
                if all(e.get(k) == v for k, v in match.items()):
                    return e
            if time.monotonic() > deadline:
                raise AssertionError(f"no {name} {match} event in:\n" + "\n".join(self.stderr_lines()[-30:]))
            time.sleep(0.02)


ServerFactory = Callable[..., ServerProcess]


@pytest.fixture
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    started: list[ServerProcess] = []

    def factory(*, env: dict[str, str] | None = None, data_dir: Path | None = None, start: bool = True,
                **flags: Any) -> ServerProcess:
        srv = ServerProcess(data_dir or tmp_path_factory.mktemp("coordinator-data"), flags, env)
        started.append(srv)
        return srv.start() if start else srv

    yield factory
    for srv in started:
        if srv.running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                srv.terminate(5.0)


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    return server_factory()
