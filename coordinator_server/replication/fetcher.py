"""A follower's fetcher: the partitions this node follows from one leader broker (Kafka's
ReplicaFetcherThread, one per source broker), fetched with the Kafka Fetch API as replica `node_id`.

Theory of operation. A partition joins the fetcher at a leader epoch and first needs truncation: the
fetcher asks the leader for the end offset of the follower's latest epoch (OffsetForLeaderEpoch, KIP-101
and KIP-279) and truncates its own log to where the two logs agree, so replicas never diverge. Then it
fetches from its log end offset, appends what the leader sends exactly as sent (offsets and leader epochs
are the leader's) and takes the leader's high watermark, capped at its own log end. A fetch names the
leader epoch the follower follows (current_leader_epoch): a leader at another epoch answers
FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH and the partition waits for the controller's word (a new
partition state) instead of fetching from the wrong leader. Transport failures back off and reconnect.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

import structlog
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from coordinator_server.replication.broker_client import BrokerClient, BrokerUnreachable
from coordinator_server.replication.follower import offset_truncation_state, truncate_without_epochs
from coordinator_server.replication.leader_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from coordinator_server.storage.batch import LOG_OVERHEAD
from protocol.errors import Errors

log = structlog.get_logger("coordinator_server.replication")

FETCH_VERSION = 12  # replica_id, current_leader_epoch (v9+), last_fetched_epoch (v12); served by every node
EPOCH_VERSION = 3  # OffsetForLeaderEpoch with replica_id (v3+)
FETCH_MAX_WAIT_MS = 500  # replica.fetch.wait.max.ms
FETCH_MIN_BYTES = 1  # replica.fetch.min.bytes
FETCH_MAX_BYTES = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
PARTITION_MAX_BYTES = 1024 * 1024  # replica.fetch.max.bytes
BACKOFF_S = 0.1  # replica.fetch.backoff.ms (Kafka: 1000; short, since it also paces the wait for a new leader)


class FollowerLog(Protocol):
    """The follower's local replicas, as the fetcher needs them (the replica manager provides it)."""

    def log_end_offset(self, partition: int) -> int: ...
    def high_watermark(self, partition: int) -> int: ...
    def latest_epoch(self, partition: int) -> int: ...
    def epoch_cache(self, partition: int) -> LeaderEpochCache: ...
    async def truncate_to(self, partition: int, offset: int) -> None: ...
    async def append(self, partition: int, batches: list[bytes]) -> None: ...
    def update_high_watermark(self, partition: int, high_watermark: int) -> None: ...


@dataclass(slots=True)
class _Fetching:
    partition: int
    leader_epoch: int
    truncated: bool = False  # the truncation protocol has run for this leader epoch
    fenced: bool = False  # our epoch is older than the leader's: wait for a new partition state
    retry_at: float = 0.0  # the leader does not lead it yet (it is behind us): retry from this loop time


class ReplicaFetcher:
    def __init__(self, node_id: int, leader_id: int, host: str, port: int, topic: str, log_: FollowerLog) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.topic = topic
        self._log = log_
        self._client = BrokerClient(host, port, client_id=f"replica-fetcher-{node_id}-from-{leader_id}")
        self._partitions: dict[int, _Fetching] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[int] = set()  # partitions of the request on the wire now
        self._writing = 0  # local appends or truncations under way (never interrupted)

    @property
    def address(self) -> tuple[str, int]:
        return self._client.host, self._client.port

    @property
    def partitions(self) -> set[int]:
        return set(self._partitions)

    def retarget(self, host: str, port: int) -> None:
        """The leader re-registered at another address: the next request connects there."""
        old, self._client = self._client, BrokerClient(host, port, client_id=self._client.client_id)
        asyncio.get_running_loop().create_task(old.close())

    def add_partition(self, partition: int, leader_epoch: int) -> None:
        self._partitions[partition] = _Fetching(partition, leader_epoch)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def remove_partition(self, partition: int) -> None:
        """Stop fetching `partition`; returns once nothing of this fetcher will still write it. A request
        on the wire for it is abandoned (the old leader may be paused and never answer: waiting for it
        would hold up the partition's next role); a local write under way is waited for."""
        self._partitions.pop(partition, None)
        while self._writing:
            await asyncio.sleep(0.005)
        if partition in self._inflight:
            # The request may never be answered (a paused leader): drop its connection, so the loop
            # fails it at once and goes on with the partitions that remain; nothing of it is written.
            self._client.abort()

    async def close(self) -> None:
        task, self._task = self._task, None
        self._partitions.clear()
        self._client.abort()  # a request on the wire fails at once instead of holding the close
        if task is not None:
            task.cancel()
            # Bounded: a cancellation can be lost inside asyncio.wait_for (Python < 3.12); the task then
            # finds no partition left and waits for a wake-up that never comes, which is harmless.
            await asyncio.wait([task], timeout=2.0)
        self._inflight.clear()

    # -- the loop ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            now = loop.time()
            waiting = [f for f in self._partitions.values() if not f.fenced]
            active = [f for f in waiting if f.retry_at <= now]
            if not active:
                self._wakeup.clear()
                timeout = min((f.retry_at for f in waiting), default=None)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), None if timeout is None else max(0.0, timeout - now))
                continue
            try:
                to_truncate = [f for f in active if not f.truncated]
                if to_truncate:
                    await self._truncate(to_truncate)
                else:
                    await self._fetch([f for f in active if f.truncated])
                failures = 0
            except BrokerUnreachable as e:
                # A leader that is gone stays gone until the controller says who leads now: back off
                # (up to a second) and log the first failure of a run of them, not every retry.
                if failures == 0:
                    log.info("replica_fetch_failed", leader=self.leader_id, error=str(e))
                failures += 1
                # Nothing is in flight while backing off: a partition removed now (the leadership change
                # that ends this wait, applied one partition at a time) must not wait for the backoff.
                self._inflight.clear()
                await asyncio.sleep(min(1.0, BACKOFF_S * failures))
                continue
            except Exception:
                log.exception("replica_fetcher_error", leader=self.leader_id)
                self._inflight.clear()
                await asyncio.sleep(BACKOFF_S)
            finally:
                self._inflight.clear()

    async def _truncate(self, fetching: list[_Fetching]) -> None:
        """KIP-101/279: ask the leader where our latest epoch ends there, and truncate to the agreement
        (again, with the next older epoch, until Kafka's getOffsetTruncationState says it is complete)."""
        asking = []
        for f in fetching:
            if self._log.latest_epoch(f.partition) == UNDEFINED_EPOCH:
                # No epochs here (a new replica, or a log from before epochs): Kafka cuts back to the HW.
                state = truncate_without_epochs(self._log.high_watermark(f.partition),
                                                self._log.log_end_offset(f.partition))
                await self._truncate_one(f, state.offset)
                f.truncated = True
            else:
                asking.append(f)
        if not asking:
            return
        topics = [OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=self.topic, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=f.partition, current_leader_epoch=f.leader_epoch,
                leader_epoch=self._log.latest_epoch(f.partition))
            for f in asking])]
        request = OffsetForLeaderEpochRequest[EPOCH_VERSION](replica_id=self.node_id, topics=topics)
        epochs = {f.partition: f.leader_epoch for f in asking}
        self._inflight.update(epochs)
        response = await self._client.call(request, OffsetForLeaderEpochResponse)
        self._inflight.clear()
        for t in response.topics:
            for p in t.partitions:
                found = self._partitions.get(p.partition)
                if found is None or found.leader_epoch != epochs.get(p.partition):
                    continue  # removed or re-added at another epoch meanwhile
                if not self._accept(found, Errors(p.error_code)):
                    continue
                state = offset_truncation_state(p.leader_epoch, p.end_offset, self._log.epoch_cache(found.partition),
                                                self._log.log_end_offset(found.partition),
                                                self._log.high_watermark(found.partition))
                await self._truncate_one(found, state.offset)
                found.truncated = state.truncation_completed

    async def _truncate_one(self, f: _Fetching, offset: int) -> None:
        local_end = self._log.log_end_offset(f.partition)
        if offset < local_end:
            log.info("replica_truncated", partition=f.partition, leader=self.leader_id,
                     leader_epoch=f.leader_epoch, from_offset=local_end, to_offset=offset)
            self._writing += 1
            try:
                await self._log.truncate_to(f.partition, offset)
            finally:
                self._writing -= 1

    async def _fetch(self, fetching: list[_Fetching]) -> None:
        partitions = [FetchRequest.FetchTopic.FetchPartition(
            partition=f.partition, current_leader_epoch=f.leader_epoch,
            fetch_offset=self._log.log_end_offset(f.partition), last_fetched_epoch=self._log.latest_epoch(f.partition),
            log_start_offset=-1, partition_max_bytes=PARTITION_MAX_BYTES) for f in fetching]
        request = FetchRequest[FETCH_VERSION](
            replica_id=self.node_id, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=FETCH_MIN_BYTES,
            max_bytes=FETCH_MAX_BYTES, isolation_level=0, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=partitions)],
            forgotten_topics_data=[], rack_id="")
        epochs = {f.partition: f.leader_epoch for f in fetching}
        self._inflight.update(epochs)
        response = await self._client.call(request, FetchResponse, timeout_s=FETCH_MAX_WAIT_MS / 1000 + 30)
        self._inflight.clear()
        if response.error_code:
            log.warning("replica_fetch_refused", leader=self.leader_id, error=Errors(response.error_code).name)
            await asyncio.sleep(BACKOFF_S)
            return
        for t in response.responses:
            for p in t.partitions:
                f = self._partitions.get(p.partition_index)
                if f is None or f.leader_epoch != epochs.get(p.partition_index):
                    continue  # stopped, or now followed at another epoch: what came back is stale
                if not self._accept(f, Errors(p.error_code)):
                    continue
                if p.records:
                    self._writing += 1
                    try:
                        await self._log.append(f.partition, split_batches(p.records))
                    finally:
                        self._writing -= 1
                self._log.update_high_watermark(f.partition, p.high_watermark)

    def _accept(self, f: _Fetching, error: Errors) -> bool:
        if error == Errors.NONE:
            return True
        if error == Errors.FENCED_LEADER_EPOCH:
            # The leader is at a newer epoch than we follow: only a new partition state from ZooKeeper
            # settles it (Kafka's fetcher likewise drops the partition until its next LeaderAndIsr).
            log.info("replica_fetch_fenced", partition=f.partition, leader=self.leader_id,
                     leader_epoch=f.leader_epoch, error=error.name)
            f.fenced = True
            return False
        if error in (Errors.UNKNOWN_LEADER_EPOCH, Errors.NOT_LEADER_OR_FOLLOWER):
            # The leader has not applied the state we follow yet (its watch fires after ours): back off
            # and ask again, as Kafka's fetcher delays a partition with a retriable error.
            log.debug("replica_fetch_retry", partition=f.partition, leader=self.leader_id, error=error.name)
            f.retry_at = asyncio.get_running_loop().time() + BACKOFF_S
            return False
        if error == Errors.OFFSET_OUT_OF_RANGE:
            # Our end is past the leader's (an unclean election): truncate again. (Behind the leader's log
            # start, which retention moved, truncating does not help: the backoff keeps that from spinning.)
            log.warning("replica_offset_out_of_range", partition=f.partition, leader=self.leader_id)
            f.truncated = False
            f.retry_at = asyncio.get_running_loop().time() + BACKOFF_S
            return False
        log.warning("replica_fetch_partition_error", partition=f.partition, leader=self.leader_id, error=error.name)
        return False


def split_batches(records: bytes) -> list[bytes]:
    """The whole v2 batches of a fetched record set (a partial last batch, cut by a size limit, is left)."""
    out = []
    pos = 0
    view = memoryview(records)
    while pos + LOG_OVERHEAD <= len(records):
        size = LOG_OVERHEAD + int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if pos + size > len(records):
            break
        out.append(bytes(view[pos:pos + size]))
        pos += size
    return out
