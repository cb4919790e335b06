"""Regression: a follower's fetcher kept its partitions marked in flight while it backed off from a leader
that was gone (kill -9), so `remove_partition` — which each leadership change waits for, one partition
state at a time — waited out a backoff of up to a second per partition. With 17 partitions moving off a
killed node the last group was Stable again ~20 s after the kill instead of ~3 s (the cluster benchmark's
failover). Nothing is in flight during the backoff, so removing a partition must not wait for it."""
from __future__ import annotations

import asyncio
import socket

from coordinator_server.replication.fetcher import ReplicaFetcher
from coordinator_server.replication.leader_epoch_cache import LeaderEpochCache


class _Log:
    """The follower's replicas as the fetcher sees them: empty, at epoch 0, so it asks the leader first."""

    def log_end_offset(self, partition: int) -> int:
        return 0

    def high_watermark(self, partition: int) -> int:
        return 0

    def latest_epoch(self, partition: int) -> int:
        return 0

    def epoch_cache(self, partition: int) -> LeaderEpochCache:
        raise AssertionError("the leader never answers")

    async def truncate_to(self, partition: int, offset: int) -> None:
        raise AssertionError("the leader never answers")

    async def append(self, partition: int, batches: list[bytes]) -> None:
        raise AssertionError("the leader never answers")

    def update_high_watermark(self, partition: int, high_watermark: int) -> None:
        raise AssertionError("the leader never answers")


async def test_removing_partitions_does_not_wait_out_the_backoff_from_a_dead_leader() -> None:
    # A bound socket that does not listen: every connection to it is refused, as to a killed broker's port.
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        fetcher = ReplicaFetcher(1, 0, "127.0.0.1", dead.getsockname()[1], "__consumer_offsets", _Log())
        for p in range(3):
            fetcher.add_partition(p, 1)
        # Long enough for several refused rounds: the backoff has grown to ~0.6 s a round.
        await asyncio.sleep(1.6)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for p in range(3):  # one at a time, as the replica manager applies partition states
            await fetcher.remove_partition(p)
        took_s = loop.time() - started
        await fetcher.close()
    assert not fetcher.partitions
    assert took_s < 0.3, f"removing 3 partitions took {took_s:.2f} s"
