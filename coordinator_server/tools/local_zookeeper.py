"""A real standalone ZooKeeper as a subprocess, for `make cluster` and the cluster tests.

Debian's `zookeeper` package ships the server as jars under /usr/share/java; `zookeeper.jar`'s manifest
names its dependencies (jute, netty, slf4j...), so the class path is that jar plus an slf4j binding when
one is installed (without one ZooKeeper logs nothing). The server runs `ZooKeeperServerMain` — the
standalone server, one process, no quorum — with a generated zoo.cfg:

- `tickTime=500`, `minSessionTimeout=1000`: ZooKeeper clamps a client's requested session timeout to
  [2, 20] ticks by default, so with Debian's 2000 ms tick nothing below 4 s is possible; the tests want
  sessions of 2-4 s so a lost broker is noticed quickly.
- the admin server (an HTTP server on port 8080 by default) is disabled: it would collide between
  servers and is not needed.
- the four-letter words `ruok` and `srvr` are whitelisted: `srvr` reporting a `Mode:` is how `start`
  knows the server serves (`ruok` says `imok` before the database is loaded).

    zk = LocalZooKeeper.start(Path("build/cluster/zk"))
    zk.connect_string      # "127.0.0.1:PORT"
    zk.stop()              # SIGTERM, then SIGKILL after a grace period

`python -m coordinator_server.tools.local_zookeeper DIR [--port N]` runs one in the foreground.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
JAR_DIR = Path("/usr/share/java")
SERVER_JAR = "zookeeper.jar"
# Picked in order; the first installed one is used. slf4j-simple writes to a file we choose.
LOGGING_JARS = ("slf4j-simple.jar",)
TICK_TIME_MS = 500
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


class ZooKeeperNotInstalled(RuntimeError):
    """Debian's `zookeeper` package (and a JRE) is missing: `make cluster-deps` installs it."""


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalled("no `java` on PATH (make pipeline-deps installs default-jre-headless)")
    return java


def class_path(jar_dir: Path = JAR_DIR) -> str:
    server = jar_dir / SERVER_JAR
    if not server.exists():
        raise ZooKeeperNotInstalled(f"{server} not found (make cluster-deps installs Debian's zookeeper)")
    jars = [str(server), *[str(jar_dir / j) for j in LOGGING_JARS if (jar_dir / j).exists()][:1]]
    return os.pathsep.join(jars)


def zoo_cfg(port: int, data_dir: Path) -> str:
    return "\n".join([
        f"tickTime={TICK_TIME_MS}",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "minSessionTimeout=1000",
        "maxSessionTimeout=60000",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr",
        # Standalone: no snapshot purging needed for test-sized data, but keep the directory bounded.
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
        "",
    ])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a four-letter command (`ruok`, `srvr`) and return the whole answer ("" on any failure)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


@dataclass
class LocalZooKeeper:
    base_dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, base_dir: Path, port: int = 0, timeout_s: float = START_TIMEOUT_S) -> LocalZooKeeper:
        """Write zoo.cfg under `base_dir`, start the server, and return once it serves requests.

        `port=0` picks a free port (there is a small window between picking and binding; a collision shows
        up as the server exiting, reported with its log)."""
        base_dir = base_dir.resolve()
        data_dir = base_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        cfg = base_dir / "zoo.cfg"
        cfg.write_text(zoo_cfg(port, data_dir))
        log_path = base_dir / "zookeeper.log"
        cmd = [find_java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dorg.slf4j.simpleLogger.logFile={log_path}",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-Dzookeeper.admin.enableServer=false",
               "-cp", class_path(), MAIN_CLASS, str(cfg)]
        with open(log_path, "ab") as log:
            # Own process group, so a Ctrl-C in a terminal running `make cluster` reaches us, not the JVM
            # directly, and `stop` decides the order.
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        zk = cls(base_dir=base_dir, port=port, proc=proc, log_path=log_path)
        zk.wait_ready(timeout_s)
        return zk

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            # `ruok` answers `imok` as soon as the port is open, before the database is loaded; `srvr`
            # reports a Mode only once the server serves requests, which is what a client needs.
            if "Mode:" in four_letter_word(self.port, "srvr"):
                return
            time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"ZooKeeper did not answer ruok within {timeout_s} s; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """SIGTERM, then SIGKILL if it has not exited within `grace_s`. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.wait())

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator_server.tools.local_zookeeper",
                                     description="Run a standalone ZooKeeper in the foreground.")
    parser.add_argument("dir", type=Path, help="where zoo.cfg, data/ and zookeeper.log go")
    parser.add_argument("--port", type=int, default=2181)
    args = parser.parse_args(argv)
    zk = LocalZooKeeper.start(args.dir, args.port)
    print(f"zookeeper: {zk.connect_string} (pid {zk.proc.pid}, log {zk.log_path})", flush=True)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop and zk.is_running():
        time.sleep(0.2)
    code = zk.stop()
    return 0 if stop else code  # stopped on request is success; dying on its own is not


if __name__ == "__main__":
    sys.exit(main())
