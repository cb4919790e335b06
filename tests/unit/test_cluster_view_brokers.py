"""The broker view keeps the newest membership: ZooKeeper's watch can fire twice in a row (a second broker
registering right after the first), and the read of the older list may finish last. CI once saw a node keep
{0, 1} for good after its watch had reported {0, 1, 2} (coordinator_server/cluster/controller.py)."""
from __future__ import annotations

import asyncio

from coordinator_server.cluster import zk_layout as zl
from coordinator_server.cluster.controller import ClusterView


class SlowFirstReads:
    """The ZooKeeper reads ClusterView makes of /brokers/ids/<id>: the first membership's reads are slow."""

    def __init__(self) -> None:
        self.slow = True

    async def get(self, path: str) -> tuple[bytes, int]:
        node_id = int(path.rsplit("/", 1)[1])
        await asyncio.sleep(0.05 if self.slow else 0)
        return zl.BrokerRegistration(node_id, "127.0.0.1", 9000 + node_id).encode(), 0


async def test_an_older_membership_read_finishing_last_does_not_win() -> None:
    zk = SlowFirstReads()
    heard: list[list[int]] = []
    view = ClusterView(zk, on_brokers_changed=lambda: heard.append(  # type: ignore[arg-type]
        [b.node_id for b in view.live_brokers()]))
    view._brokers_changed(["0", "1"])
    await asyncio.sleep(0)  # its reads are under way, slowly
    zk.slow = False
    view._brokers_changed(["0", "1", "2"])
    while view._tasks:
        await asyncio.gather(*list(view._tasks))
    assert [b.node_id for b in view.live_brokers()] == [0, 1, 2]
    assert heard == [[0, 1, 2]]
