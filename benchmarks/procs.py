"""Starting and stopping what the benchmarks measure: the coordinator, the floor, the mock-cluster peer,
and the load generator, each as a process of its own."""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Server:
    """The coordinator as `python -m coordinator_server`, JSON logs on stderr, `--port 0` unless given a port."""

    def __init__(self, data_dir: Path, flags: dict[str, Any], profile_to: Path | None = None, *, port: int = 0,
                 log_level: str = "warning", keep_events: frozenset[str] = frozenset()) -> None:
        self.data_dir = data_dir
        self.flags = flags
        self.fixed_port = port  # a cluster node's: the other nodes and clients find it there
        self.log_level = log_level
        # JSON log lines whose event is one of these are kept, each with the monotonic time it was read
        # (`received_s`), so a scenario can time what the server reports (the cluster's partition loads).
        self.keep_events = keep_events
        self.events: list[dict[str, Any]] = []
        self.profile_to = profile_to  # py-spy samples the process from `listening` to stop, raw format
        self.spy: subprocess.Popen[bytes] | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.port = -1
        self.started_at = 0.0
        self.listening_after_s = 0.0
        self._listening = threading.Event()
        self.stderr_tail: list[str] = []

    def argv(self) -> list[str]:
        args = [PY, "-m", "coordinator_server", "--port", str(self.fixed_port), "--data-dir", str(self.data_dir),
                "--log-format", "json", "--log-level", self.log_level]
        for name, value in self.flags.items():
            args += ["--" + name.replace("_", "-"), str(value)]
        return args

    def start(self, timeout_s: float = 600.0) -> Server:
        # `listening` is logged at info; the bench runs at warning to keep logging off the hot path, so the
        # port is found from the listening socket instead (ss is not needed: --port 0 then /proc).
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT)
        threading.Thread(target=self._read_stderr, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while self.port < 0:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n" + "\n".join(self.stderr_tail))
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start listening in time")
            self.port = _listening_port(self.pid)
            if self.port < 0:
                time.sleep(0.01)
        self.listening_after_s = time.perf_counter() - self.started_at
        if self.profile_to is not None:
            spy = str(Path(PY).parent / "py-spy")
            self.spy = subprocess.Popen([spy, "record", "--pid", str(self.pid), "--nonblocking", "-r", "200",
                                         "-f", "raw", "-o", str(self.profile_to)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # py-spy attaches
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail = [*self.stderr_tail[-40:], line.rstrip()]
            if self.keep_events and line.startswith("{"):
                received_s = time.monotonic()
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") in self.keep_events:
                        self.events.append({**event, "received_s": received_s})

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout_s: float = 120.0) -> int:
        assert self.proc is not None
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            self.spy.wait(60)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def _listening_port(pid: int) -> int:
    """The TCP port a process listens on (state 0A in /proc/net/tcp), found through its socket inodes."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        if not inodes:
            return -1
        with open(f"/proc/{pid}/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:
                    return int(parts[1].split(":")[1], 16)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return -1


class Floor:
    def __init__(self, canned: bytes, kind: str = "protocol", data_dir: Path | None = None) -> None:
        args = [canned.hex(), kind] + ([str(data_dir)] if data_dir is not None else [])
        self.proc = subprocess.Popen([PY, "-m", "benchmarks.floor", *args], stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        self.port = int(json.loads(self.proc.stdout.readline())["port"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


class Peer:
    """librdkafka's mock cluster, in a process of its own (benchmarks/peer.py)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([PY, "-m", "benchmarks.peer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.host, self.port = info["host"], int(info["port"])
        self.version = info["librdkafka"]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(20)


def run_loadgen(host: str, port: int, frames: list[list[bytes]], *, connections: int, warmup_s: float,
                duration_s: float, error_offset: int,
                addresses: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    """`addresses`, when given, is where each connection goes (one per connection); else all to host:port."""
    with tempfile.TemporaryDirectory() as tmp:
        frames_path = Path(tmp, "frames.pickle")
        frames_path.write_bytes(pickle.dumps(frames))
        spec_path = Path(tmp, "spec.json")
        spec_path.write_text(json.dumps({
            "host": host, "port": port, "connections": connections, "warmup_s": warmup_s,
            "duration_s": duration_s, "error_offset": error_offset, "frames": str(frames_path),
            "addresses": [list(a) for a in addresses] if addresses else None}))
        out = subprocess.run([PY, "-m", "benchmarks.loadgen", str(spec_path)], capture_output=True, text=True,
                             cwd=ROOT, timeout=duration_s + warmup_s + 120)
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run_json(module: str, *args: str, timeout_s: float = 900.0) -> dict[str, Any]:
    """Run `python -m module args...` and parse the last stdout line as JSON."""
    out = subprocess.run([PY, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"{module} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
