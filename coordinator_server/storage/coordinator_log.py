"""The `__consumer_offsets` partitions of one data directory, with an asyncio group-commit writer.

Theory of operation
-------------------
Callers (the coordinator shell, one per group under that group's lock) `await append(partition,
records, timestamp_ms)`. The records are encoded at once, so a bad record fails its caller and nothing
else, and the append joins a queue. One writer task drains the queue: it takes *everything* queued,
writes one batch per append (appends of one partition in call order) and then fsyncs each partition it
touched once, before resolving all of their futures. While a round is on the disk, new appends queue up
for the next round, so under load one fsync covers many appends (group commit).

All file I/O of a round runs in one dedicated thread (`run_in_executor`), so the event loop never blocks
on a write or an fsync, and no two rounds touch a file at the same time. When a round touched several
partitions, that thread hands their fsyncs to a small pool and waits for all of them: each partition's
files are still fsynced by one thread at a time, but the fsyncs overlap, and the filesystem commits
concurrent fsyncs together (on ext4, 40 files took ~11 ms one after the other and ~5 ms at once). Groups
spread over all 50 partitions, so without this a busy round cost one fsync per partition in a row.

Under policy `always` the rounds are pipelined two deep: once a round is written, the I/O thread takes
its sync plans (`PartitionLog.take_sync_plan`) and a sync thread runs them while the I/O thread writes the
next round; that next round's fsyncs start only after the previous round's finished (so a failed fsync
fails the later round's appends to that partition too) and rounds complete in order. The writer waits
for a round's fsyncs before writing a third, so appends arriving meanwhile gather into one round.

Fsync policy: `always` resolves after the fsync; `interval:MS` resolves after the write and fsyncs the
dirty partitions at most every MS in the background; `never` resolves after the write and leaves flushing
to the OS (and `close()`).

Failures: a failed write (e.g. ENOSPC) fails only the appends whose batches did not make it to the file,
with `StorageError`; `PartitionLog` truncates the partial batch away, so later appends still make a valid
log. A failed fsync is different: after one, the kernel may have dropped the dirty pages and a retried
fsync can report success for data that is gone, so that partition refuses further appends until the
server restarts and recovery has re-read what is really on disk.

Compaction (`storage.compaction`): a background task checks every `backoff_ms` whether a partition's
sealed segments are dirtier than `min_cleanable_dirty_ratio` and cleans it: the heavy reading and writing
runs in a cleaner thread of its own while appends carry on to the active segment; the short swap runs in
the writer's I/O thread, between two rounds, so no append sees the segment list change under it.

The data directory holds `.lock` (an exclusive `flock` while a server uses it), `meta.properties` (the
partition count the directory was created with) and one `__consumer_offsets-<p>/` per partition.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno as errno_mod
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from coordinator_server import metrics
from coordinator_server.config import FsyncPolicy
from coordinator_server.group.records import CoordinatorRecord
from coordinator_server.storage import compaction
from coordinator_server.storage.batch import HEADER_SIZE
from coordinator_server.storage.codec import OtherRecord, decode, encode_record
from coordinator_server.storage.errors import RecordDecodeError, RecordTooLargeError, StorageError
from coordinator_server.storage.index import DEFAULT_INDEX_INTERVAL_BYTES
from coordinator_server.storage.log import (
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    FileIO,
    PartitionLog,
    SyncPlan,
    partition_dir,
)
from coordinator_server.storage.replay import LatestRecords

log = structlog.get_logger(__name__)

T = TypeVar("T")

LOCK_FILE = ".lock"
META_FILE = "meta.properties"
META_PARTITIONS_KEY = "offsets.topic.num.partitions"
_META_VERSION = "1"


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's log cleaner settings for `__consumer_offsets` (cleanup.policy=compact)."""

    enabled: bool = True  # log.cleaner.enable
    min_cleanable_dirty_ratio: float = compaction.DEFAULT_MIN_CLEANABLE_DIRTY_RATIO
    delete_retention_ms: int = compaction.DEFAULT_DELETE_RETENTION_MS
    backoff_ms: int = compaction.DEFAULT_CLEANER_BACKOFF_MS


# Kafka's message.max.bytes (the `__consumer_offsets` topic inherits the broker default).
DEFAULT_MAX_BATCH_BYTES = 1_048_588
# Threads that fsync the partitions of one round at once (see the module docstring).
DEFAULT_SYNC_THREADS = 16
# Per record in a v2 batch: length, attributes, offset and timestamp deltas, key/value lengths, headers
# count, all varints; 21 bytes bounds them for any record that fits in a batch.
_RECORD_OVERHEAD = 21


def batch_size_estimate(encoded: Sequence[tuple[bytes, bytes | None]]) -> int:
    """An upper bound of the uncompressed v2 batch holding these records."""
    return HEADER_SIZE + sum(_RECORD_OVERHEAD + len(k) + len(v or b"") for k, v in encoded)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Append:
    partition: int
    records: list[tuple[bytes, bytes | None]]
    timestamp_ms: int
    on_done: Callable[[StorageError | None], None]
    leader_epoch: int = 0


class CoordinatorLog:
    def __init__(self, data_dir: Path, partitions: int, fsync: FsyncPolicy, logs: list[PartitionLog],
                 lock_fd: int, cleaner: CleanerConfig | None = None,
                 wall_clock_ms: Callable[[], int] = _wall_clock_ms,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 sync_threads: int = DEFAULT_SYNC_THREADS) -> None:
        self.data_dir = data_dir
        self._max_batch_bytes = max_batch_bytes
        self._partitions = partitions
        self._fsync = fsync
        self._logs = logs
        self._lock_fd = lock_fd
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coordinator-log")
        # Policy `always`: a round's fsyncs run from this thread, while the I/O thread writes the next
        # round; it hands them to the pool and waits for all (pool threads start on demand).
        self._sync_runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coordinator-log-sync")
        self._sync_pool = ThreadPoolExecutor(max_workers=max(1, min(sync_threads, partitions)),
                                             thread_name_prefix="coordinator-log-fsync")
        self._pending: list[_Append] = []
        self._wakeup: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._dirty: set[int] = set()  # interval mode: written since their last fsync
        self._flush_deadline: float | None = None  # loop time of the next background fsync
        self._failed: dict[int, StorageError] = {}  # partitions whose fsync failed
        self._closing = False
        self._closed = False
        self._cleaner = cleaner or CleanerConfig()
        # The tombstone horizon is wall time; an injected clock keeps tests off the real one.
        self._wall_clock_ms = wall_clock_ms
        self._cleaner_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coordinator-log-cleaner")
        self._cleaner_task: asyncio.Task[None] | None = None
        self._cleaner_stop = threading.Event()
        self._cleaner_wakeup = asyncio.Event()
        self._compacting: set[int] = set()

    @classmethod
    def open(cls, data_dir: str | Path, partitions: int, fsync: FsyncPolicy, *,
             segment_bytes: int = DEFAULT_SEGMENT_BYTES, file_io: FileIO | None = None,
             segment_ms: int = DEFAULT_SEGMENT_MS, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
             cleaner: CleanerConfig | None = None,
             wall_clock_ms: Callable[[], int] = _wall_clock_ms,
             max_batch_bytes: int = 0) -> CoordinatorLog:
        """Lock the data directory, settle the partition count and open (recover) every partition.

        Raises StorageError when the directory is in use or its meta.properties is unusable, and
        CorruptLogError when a partition's log is damaged before its tail.
        """
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(data_dir)
        logs: list[PartitionLog] = []
        try:
            effective = _settle_partition_count(data_dir, partitions)
            for p in range(effective):
                logs.append(PartitionLog.open(data_dir, p, segment_bytes, file_io, segment_ms=segment_ms,
                                              index_interval_bytes=index_interval_bytes))
        except BaseException:
            for plog in logs:
                plog.close()
            _unlock(lock_fd)
            raise
        return cls(data_dir, effective, fsync, logs, lock_fd, cleaner, wall_clock_ms,
                   max_batch_bytes or DEFAULT_MAX_BATCH_BYTES)

    @property
    def partitions(self) -> int:
        """The effective `__consumer_offsets` partition count (the one recorded in meta.properties)."""
        return self._partitions

    def replay(self, partition: int) -> Iterator[CoordinatorRecord]:
        """Every record of `partition` in log order. Records of types this server does not read
        (KIP-848, share groups) are logged and left out; a record that does not decode raises."""
        for rec in self._log(partition).read():
            where = f"__consumer_offsets-{partition} offset {rec.offset}"
            if rec.key is None:
                raise RecordDecodeError(f"{where}: record has no key")
            try:
                decoded = decode(rec.key, rec.value)
            except RecordDecodeError as e:
                raise RecordDecodeError(f"{where}: {e}") from e
            if isinstance(decoded, OtherRecord):
                log.warning("unknown_record_type_skipped", partition=partition, offset=rec.offset,
                            key_version=decoded.key_version, record_type=decoded.type_name)
                continue
            yield decoded

    def replay_latest(self, partition: int) -> Iterator[CoordinatorRecord]:
        """What loading `partition` needs, fast: records that, applied to an empty `GroupLoader`, give
        the state `replay` gives (same values, same dict orders): the last value of every key, decoded
        once; keys removed by a tombstone are left out. Reads and checks the whole partition first
        (CRC, framing, keys; corruption raises), then decodes only the surviving values
        (`storage.replay`)."""
        latest = LatestRecords(partition)
        latest.add_batches(self._log(partition).checked_batches())
        return latest.records()

    async def append(self, partition: int, records: Sequence[CoordinatorRecord], timestamp_ms: int) -> None:
        """Append `records` as one batch; returns once durable per the fsync policy.

        Raises StorageError when the write or fsync failed (then none of these records count), and
        TypeError/ValueError at once for a record that cannot be encoded.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: StorageError | None) -> None:
            if future.done():  # the caller was cancelled; its batch was written all the same
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        if self.submit(partition, records, timestamp_ms, done):
            await future

    def submit(self, partition: int, records: Sequence[CoordinatorRecord], timestamp_ms: int,
               on_done: Callable[[StorageError | None], None], leader_epoch: int = 0) -> bool:
        """Queue `records` as one batch without awaiting: `append` for a caller that completes many
        appends from one callback each. Returns False (and never calls `on_done`) when there is nothing
        to write; otherwise the writer calls `on_done(None)` once the batch is durable per the fsync
        policy, or `on_done(error)` when its write or fsync failed, from the event loop, in submit order
        within each round. Raises what `append` raises before queueing (closed log, a record that
        cannot be encoded, a batch over the size limit, a partition that failed earlier)."""
        if self._closing:
            raise StorageError("coordinator log is closed")
        plog = self._log(partition)
        if not records:
            return False
        encoded = [encode_record(r) for r in records]
        size = batch_size_estimate(encoded)
        if size > self._max_batch_bytes:
            # Kafka refuses such a batch with MESSAGE_TOO_LARGE; the coordinator maps it per API.
            raise RecordTooLargeError(
                f"a {size}-byte batch for __consumer_offsets-{partition} is over message.max.bytes "
                f"({self._max_batch_bytes})")
        if partition in self._failed:
            raise self._failed[partition]
        if plog.failed is not None:
            raise StorageError(f"__consumer_offsets-{partition} is unusable until restart: {plog.failed}",
                               plog.failed.errno)
        self._pending.append(_Append(partition, encoded, timestamp_ms, on_done, leader_epoch))
        self._start_writer()
        return True

    async def close(self) -> None:
        """Wait for queued appends, fsync every partition, close the files and release the lock."""
        if self._closed:
            return
        self._closing = True
        await self._stop_cleaner()
        if self._writer is not None:
            self._start_writer()  # wakes it so it drains the queue and stops
            await self._writer
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._sync_and_close_all)
        finally:
            self._executor.shutdown(wait=True)
            self._sync_runner.shutdown(wait=True)
            self._sync_pool.shutdown(wait=True)
            self._cleaner_executor.shutdown(wait=True)
            _unlock(self._lock_fd)
            self._closed = True

    # -- the writer --

    def _start_writer(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._run(), name="coordinator-log-writer")
        if self._cleaner_task is None and self._cleaner.enabled and not self._closing:
            self._cleaner_task = asyncio.get_running_loop().create_task(
                self._run_cleaner(), name="coordinator-log-cleaner")
        self._wakeup.set()

    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        syncing: asyncio.Task[None] | None = None  # policy `always`: the round whose fsyncs are running
        while True:
            if not self._pending:
                if self._closing:
                    if syncing is not None:
                        await syncing
                    return
                timeout = None if self._flush_deadline is None else max(0.0, self._flush_deadline - loop.time())
                # Clearing and checking `_pending` happen with no await between them, so no wakeup is lost.
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
            round_, self._pending = self._pending, []
            if round_:
                written = await self._write(loop, round_, syncing)
                if syncing is not None:
                    # At most one round written behind the one being fsynced: what queues meanwhile
                    # makes the next round bigger instead of a chain of small ones.
                    await syncing
                syncing = written
            if self._flush_deadline is not None and loop.time() >= self._flush_deadline:
                dirty, self._dirty, self._flush_deadline = self._dirty, set(), None
                try:
                    await loop.run_in_executor(self._executor, self._sync_background, dirty)
                except Exception:  # a bug, not an I/O error (those poison the partition): keep writing
                    log.exception("coordinator_log_background_fsync_failed")

    async def _write(self, loop: asyncio.AbstractEventLoop, round_: list[_Append],
                     syncing: asyncio.Task[None] | None) -> asyncio.Task[None] | None:
        """Write the round; under policy `always`, return the task that fsyncs it (after `syncing`, the
        round before, is fsynced and completed) and then completes it; otherwise complete it now."""
        synced: concurrent.futures.Future[dict[int, StorageError | None]] | None = None
        try:
            errors, written, synced = await loop.run_in_executor(self._executor, self._write_round, round_)
        except Exception as e:  # a bug, not an I/O error: fail the round rather than hang its callers
            log.exception("coordinator_log_write_round_failed")
            errors = [StorageError(f"internal error in the log writer: {e!r}")] * len(round_)
            written = {}
        if self._fsync.mode == "always":
            return loop.create_task(self._sync_and_complete(round_, errors, written, synced, syncing))
        self._complete(round_, errors)
        if self._fsync.mode == "interval" and written:
            self._dirty |= set(written)
            if self._flush_deadline is None:
                self._flush_deadline = loop.time() + self._fsync.interval_ms / 1000
        return None

    async def _sync_and_complete(self, round_: list[_Append], errors: list[StorageError | None],
                                 written: dict[int, list[int]],
                                 synced: concurrent.futures.Future[dict[int, StorageError | None]] | None,
                                 previous: asyncio.Task[None] | None) -> None:
        try:
            if previous is not None:
                await previous  # rounds complete in order
            results = {} if synced is None else await asyncio.wrap_future(synced)
        except Exception as e:  # a bug, not an I/O error: fail the round rather than hang its callers
            log.exception("coordinator_log_sync_round_failed")
            results = {p: StorageError(f"internal error in the log writer: {e!r}") for p in written}
        for p, err in results.items():
            if err is not None:
                for i in written[p]:
                    errors[i] = err
        self._complete(round_, errors)

    def _complete(self, round_: list[_Append], errors: list[StorageError | None]) -> None:
        for a, err in zip(round_, errors, strict=True):
            try:
                a.on_done(err)
            except Exception:  # a bug in a caller's callback: the other appends still complete
                log.exception("coordinator_log_append_callback_failed", partition=a.partition)

    def _write_round(self, round_: list[_Append]) -> tuple[
            list[StorageError | None], dict[int, list[int]],
            concurrent.futures.Future[dict[int, StorageError | None]] | None]:
        """In the I/O thread: one batch per append; under policy `always`, the fsyncs of the written
        partitions are handed to the sync thread at once (they run while the next round is written).
        That thread runs rounds one after the other, so a round's fsyncs start only once the previous
        round's are done: a partition whose fsync failed there fails here too (its pages may be gone,
        and a later fsync can report success)."""
        errors: list[StorageError | None] = [None] * len(round_)
        written: dict[int, list[int]] = {}
        for i, a in enumerate(round_):
            if a.partition in self._failed:
                errors[i] = self._failed[a.partition]
                continue
            started = time.perf_counter()
            try:
                self._logs[a.partition].append(a.records, a.timestamp_ms, a.leader_epoch)
            except OSError as e:
                log.error("log_append_failed", partition=a.partition, errno=e.errno, error=str(e))
                errors[i] = StorageError(f"append to __consumer_offsets-{a.partition} failed: {e}", e.errno)
            else:
                metrics.LOG_APPEND_LATENCY.observe(time.perf_counter() - started)
                written.setdefault(a.partition, []).append(i)
        if self._fsync.mode != "always":
            return errors, written, None
        plans = {p: self._logs[p].take_sync_plan() for p in sorted(written)}
        return errors, written, self._sync_runner.submit(self._sync_plans, plans)

    def _sync_plans(self, plans: dict[int, SyncPlan]) -> dict[int, StorageError | None]:
        """In the sync thread: run the round's fsyncs, at once when there are several; waits for all."""
        if len(plans) <= 1:
            return {p: self._run_plan(p, plan) for p, plan in plans.items()}
        return dict(zip(plans, self._sync_pool.map(self._run_plan, plans, plans.values()), strict=True))

    def _run_plan(self, partition: int, plan: SyncPlan) -> StorageError | None:
        if partition in self._failed:  # an earlier fsync failed: this one could not be trusted
            plan.discard()
            return self._failed[partition]
        started = time.perf_counter()
        try:
            plan.run()
        except OSError as e:
            return self._fsync_failed(partition, e)
        metrics.LOG_FSYNC_COORDINATOR.observe(time.perf_counter() - started)
        return None

    def _sync_background(self, partitions: set[int]) -> None:
        for _ in self._sync_all(sorted(partitions)):
            pass

    def _sync_all(self, partitions: list[int]) -> list[tuple[int, StorageError | None]]:
        """In the I/O thread: fsync these partitions, at once when there are several; waits for all."""
        if len(partitions) <= 1:
            return [(p, self._sync(p)) for p in partitions]
        return list(zip(partitions, self._sync_pool.map(self._sync, partitions), strict=True))

    def _sync(self, partition: int) -> StorageError | None:
        if partition in self._failed:
            return self._failed[partition]
        started = time.perf_counter()
        try:
            self._logs[partition].sync()
        except OSError as e:
            return self._fsync_failed(partition, e)
        metrics.LOG_FSYNC_COORDINATOR.observe(time.perf_counter() - started)
        return None

    def _fsync_failed(self, partition: int, e: OSError) -> StorageError:
        err = StorageError(f"fsync of __consumer_offsets-{partition} failed: {e}; the partition takes "
                           "no more appends until the server restarts", e.errno)
        log.error("log_fsync_failed", partition=partition, errno=e.errno, error=str(e))
        self._failed[partition] = err
        return err

    def _sync_and_close_all(self) -> None:
        first_error: StorageError | None = None
        for p, plog in enumerate(self._logs):
            err = None if plog.failed is not None else self._sync(p)
            first_error = first_error or err
            # A clean mark lets the next open trust the whole partition: only when all of it is durable.
            plog.close(clean=err is None and plog.failed is None and p not in self._failed)
        if first_error is not None:
            raise first_error

    # -- compaction --

    async def compact_if_needed(self) -> int:
        """Clean every partition whose dirty ratio reached min_cleanable_dirty_ratio; returns how many."""
        cleaned = 0
        for p, plog in enumerate(self._logs):
            if self._closing:
                break
            if compaction.dirty_ratio(plog) >= self._cleaner.min_cleanable_dirty_ratio \
                    and await self.compact_now(p):
                cleaned += 1
        return cleaned

    async def compact_now(self, partition: int, now_ms: int | None = None) -> bool:
        """Clean `partition`'s sealed segments now; False when there was nothing to clean (no sealed
        segment, a failed partition, closing, or a cleaning already running)."""
        plog = self._log(partition)
        if self._closing or partition in self._failed or plog.failed is not None or partition in self._compacting:
            return False
        loop = asyncio.get_running_loop()
        self._compacting.add(partition)
        try:
            snap = await loop.run_in_executor(self._executor, compaction.snapshot, plog)
            if snap is None:
                return False
            now = self._wall_clock_ms() if now_ms is None else now_ms
            result = await loop.run_in_executor(
                self._cleaner_executor, compaction.clean, snap, now, self._cleaner.delete_retention_ms,
                plog.segment_bytes, self._cleaner_stop)
            if self._closing:
                compaction.discard(result)
                return False
            try:
                await loop.run_in_executor(self._executor, compaction.swap_in, plog, result)
            except OSError as e:
                # The files may be half swapped: only the recovery of a restart can sort them out.
                err = StorageError(f"swapping in the cleaned segments of __consumer_offsets-{partition} failed: "
                                   f"{e}; the partition takes no more appends until the server restarts", e.errno)
                log.error("log_cleaner_swap_failed", partition=partition, error=str(e))
                self._failed[partition] = err
                return False
            return True
        finally:
            self._compacting.discard(partition)

    async def _run_cleaner(self) -> None:
        while not self._closing:
            try:
                await self.compact_if_needed()
            except compaction.CleanerAborted:
                return
            except Exception:  # a bug or an I/O error while reading: the log stays as it was
                log.exception("log_cleaner_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cleaner_wakeup.wait(), self._cleaner.backoff_ms / 1000)

    async def _stop_cleaner(self) -> None:
        # Not a cancel: the cleaner thread would go on writing. The stop event makes it abort at its next
        # batch and delete its files; the wakeup ends the wait between two checks.
        self._cleaner_stop.set()
        self._cleaner_wakeup.set()
        task, self._cleaner_task = self._cleaner_task, None
        if task is not None:
            with contextlib.suppress(compaction.CleanerAborted):
                await task

    def partition_log(self, partition: int) -> PartitionLog:
        """One partition's local replica, for replication (reads on the loop; writes only via `run_io`)."""
        return self._log(partition)

    async def run_io(self, fn: Callable[[], T]) -> T:
        """Run `fn` in the writer's I/O thread, between rounds: how a follower truncates and appends what it
        fetched without racing the writer or a compaction swap on the same files."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _log(self, partition: int) -> PartitionLog:
        if not 0 <= partition < self._partitions:
            raise ValueError(f"__consumer_offsets has partitions 0-{self._partitions - 1}, not {partition}")
        return self._logs[partition]


def _lock(data_dir: Path) -> int:
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        if e.errno in (errno_mod.EWOULDBLOCK, errno_mod.EAGAIN):
            raise StorageError(f"data directory {data_dir} is in use by another coordinator-server "
                               f"(pid {holder or 'unknown'} holds the lock on {path})", e.errno) from e
        raise StorageError(f"cannot lock {path}: {e}", e.errno) from e
    # The pid is only for the message above; the flock is what excludes.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _settle_partition_count(data_dir: Path, configured: int) -> int:
    """The recorded partition count wins over the flag: it decides which partition holds each group,
    so changing it would lose every group (Kafka likewise uses the existing topic's partition count)."""
    path = data_dir / META_FILE
    if not path.exists():
        existing = sorted(p.name for p in data_dir.glob("__consumer_offsets-*"))
        if existing:
            raise StorageError(f"{path} is missing but {data_dir} already holds {', '.join(existing[:3])}"
                               f"{' ...' if len(existing) > 3 else ''}; restore {META_FILE} (a line "
                               f"{META_PARTITIONS_KEY}=<count>) rather than guess the partition count")
        _write_meta(path, configured)
        return configured
    recorded = _read_meta(path)
    if recorded != configured:
        log.warning("offsets_partitions_flag_ignored", configured=configured, recorded=recorded, file=str(path))
    return recorded


def _read_meta(path: Path) -> int:
    props: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    try:
        count = int(props[META_PARTITIONS_KEY])
    except (KeyError, ValueError):
        raise StorageError(f"{path} has no valid {META_PARTITIONS_KEY}=<count> line") from None
    if count < 1:
        raise StorageError(f"{path}: {META_PARTITIONS_KEY}={count} must be at least 1")
    return count


def _write_meta(path: Path, partitions: int) -> None:
    # Written once, atomically: a crash leaves either no file (first start again) or the whole file.
    tmp = path.with_name(path.name + ".tmp")
    text = (f"# coordinator-server: __consumer_offsets layout of this data directory. Do not edit.\n"
            f"version={_META_VERSION}\n{META_PARTITIONS_KEY}={partitions}\n")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


__all__ = ["LOCK_FILE", "META_FILE", "CleanerConfig", "CoordinatorLog", "partition_dir"]
