"""The launcher starts a real ZooKeeper that answers, honours short sessions, and stops."""
from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from coordinator_server.tools.local_zookeeper import LocalZooKeeper, four_letter_word


def test_fixture_server_answers_and_chroots_isolate(zookeeper, zookeeper_server) -> None:
    assert four_letter_word(zookeeper_server.port, "ruok") == "imok"
    assert "Mode: standalone" in four_letter_word(zookeeper_server.port, "srvr")
    client = KazooClient(hosts=zookeeper.connect_string, timeout=2.0)
    client.start(timeout=10)
    try:
        client.create("/x", b"1")
        # A 2 s session is only possible because of the launcher's short tickTime (Debian's default
        # tick of 2000 ms would clamp it to at least 4 s).
        assert client._session_timeout == 2000
    finally:
        client.stop()
        client.close()
    root = KazooClient(hosts=zookeeper_server.connect_string)
    root.start(timeout=10)
    try:
        assert root.get(zookeeper.chroot + "/x")[0] == b"1"
    finally:
        root.stop()
        root.close()


def test_start_and_stop_a_second_server(tmp_path: Path) -> None:
    zk = LocalZooKeeper.start(tmp_path / "zk")
    assert four_letter_word(zk.port, "ruok") == "imok"
    assert (tmp_path / "zk" / "zoo.cfg").read_text().count("tickTime=500") == 1
    zk.stop()
    assert not zk.is_running()
    assert four_letter_word(zk.port, "ruok") == ""
