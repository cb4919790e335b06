"""A real ZooKeeper (Debian's package, run by its JRE) for the cluster suites, on a free port, with a fresh
chroot per test so tests never see each other's znodes."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cluster_support import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


class ZooKeeper:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        (root / "data").mkdir(parents=True, exist_ok=True)
        # tickTime 500 ms allows sessions from 1 s: the suites use 2-4 s so failovers stay quick.
        (root / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={root / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\nminSessionTimeout=1000\nmaxSessionTimeout=30000\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ZooKeeper:
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            pytest.fail("ZooKeeper is not installed: run `make cluster-deps` (Debian's zookeeper and a JRE)")
        log = open(self.root / "zookeeper.log", "wb")  # noqa: SIM115 - the process writes it until stopped
        self.proc = subprocess.Popen(
            [java, "-Xmx256m", "-cp", str(ZOOKEEPER_JAR), "org.apache.zookeeper.server.ZooKeeperServerMain",
             str(self.root / "zoo.cfg")], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.root / 'zookeeper.log').read_text()[-2000:]}")
            if self.four_letter("ruok") == "imok":
                return self
            time.sleep(0.1)
        raise RuntimeError("ZooKeeper did not answer ruok within 30 s")

    def four_letter(self, word: str) -> str:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(word.encode())
                return s.recv(4096).decode(errors="replace")
        except OSError:
            return ""

    def connect_string(self, chroot: str = "") -> str:
        return f"127.0.0.1:{self.port}{chroot}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    zk = ZooKeeper(tmp_path_factory.mktemp("zookeeper")).start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeper) -> str:
    """A connect string with a chroot of this test's own (kazoo and the server create it on first use)."""
    return zookeeper_server.connect_string(f"/test-{uuid.uuid4().hex[:12]}")
