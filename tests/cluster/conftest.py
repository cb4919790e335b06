"""A real standalone ZooKeeper for the cluster tests (coordinator_server/tools/local_zookeeper.py).

One server per test module (a JVM start costs ~1-2 s on this machine); every test gets its own random
chroot, so tests never see each other's znodes:

    def test_something(zookeeper):
        zookeeper.connect_string   # "127.0.0.1:PORT/t-3f2a..." (the chroot exists)
        zookeeper.server           # the LocalZooKeeper (host-level connect string, stop, log)
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from coordinator_server.tools.local_zookeeper import LocalZooKeeper, ZooKeeperNotInstalled


@dataclass(frozen=True)
class ZooKeeperChroot:
    server: LocalZooKeeper
    chroot: str

    @property
    def connect_string(self) -> str:
        return self.server.connect_string + self.chroot


@pytest.fixture(scope="module")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    try:
        server = LocalZooKeeper.start(Path(tmp_path_factory.mktemp("zookeeper")))
    except ZooKeeperNotInstalled as e:
        # Not a skip: `make test` installs it (cluster-deps), and a silently skipped suite proves nothing.
        pytest.fail(f"ZooKeeper is not installed: {e}")
    yield server
    server.stop()


@pytest.fixture
def zookeeper(zookeeper_server: LocalZooKeeper) -> ZooKeeperChroot:
    if not zookeeper_server.is_running():
        pytest.fail(f"ZooKeeper died; log:\n{zookeeper_server.log_tail()}")
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    # kazoo warns (an error here) when a chroot does not exist yet, so make it first, as an operator would.
    root = KazooClient(hosts=zookeeper_server.connect_string)
    root.start(timeout=10)
    try:
        root.create(chroot)
    finally:
        root.stop()
        root.close()
    return ZooKeeperChroot(zookeeper_server, chroot)


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperChroot) -> str:
    """The connect string of this test's own chroot, as a node's --zookeeper-connect."""
    return zookeeper.connect_string
