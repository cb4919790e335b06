"""A coordinator's compacted log in one data directory — the `__consumer_offsets` partitions, or the
`__transaction_state` ones (`CoordinatorTopic` names which): encoding, replay and compaction over the
group-commit writer (`storage.group_commit`). The group records' codec is built in (`append`, `replay`);
another coordinator hands its records encoded (`submit_encoded`) and reads them back as bytes
(`read_records`), its codec being its own.

Theory of operation
-------------------
Callers (the coordinator shell, one per group under that group's lock) `await append(partition,
records, timestamp_ms)`, or `submit` with a callback. The records are encoded at once, so a bad record
fails its caller and nothing else, and the batch is handed to the group-commit writer
(`storage.group_commit`, shared with the topic store): it is written at once, to the page cache, and
completes once durable per the fsync policy (`always`, `interval:MS`, `never`), many appends sharing one
fsync per partition. That module documents the rounds, the policies and the one failure semantics: a
failed write fails its append alone; a failed fsync fences the partition until the server restarts.

Compaction (`storage.compaction`): a background task checks every `backoff_ms` whether a partition's
sealed segments are dirtier than `min_cleanable_dirty_ratio` and cleans it: the heavy reading and writing
runs in a cleaner thread of its own while appends carry on to the active segment; the swap's file work
(renames, unlinks, directory fsyncs of sealed segments only) runs in a thread too, and the swap of the
segment list in memory on the event loop, the thread that appends, so no append sees it change under it.

The data directory holds `.lock` (an exclusive `flock` while a server uses it, taken by the
`__consumer_offsets` log, opened first), `meta.properties` (the partition count the directory was created
with) and one `__consumer_offsets-<p>/` per partition; the transaction log's count is in
`transaction-state.properties`, its partitions in `__transaction_state-<p>/`.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno as errno_mod
import fcntl
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog
from mypy_extensions import mypyc_attr

from coordinator_server import metrics
from coordinator_server.config import Config, FsyncPolicy
from coordinator_server.group.records import CoordinatorRecord, OffsetCommitRecord
from coordinator_server.storage import compaction
from coordinator_server.storage.batch import HEADER_SIZE
from coordinator_server.storage.codec import OtherRecord, decode, encode_record
from coordinator_server.storage.errors import RecordDecodeError, RecordTooLargeError, StorageError
from coordinator_server.storage.group_commit import DEFAULT_SYNC_THREADS, Appended, GroupCommitWriter, Target
from coordinator_server.storage.index import DEFAULT_INDEX_INTERVAL_BYTES
from coordinator_server.storage.log import (
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    FileIO,
    PartitionLog,
    partition_dir,
)
from coordinator_server.storage.offset_commit_codec import encode_offset_commit
from coordinator_server.storage.replay import LatestRecords

log = structlog.get_logger(__name__)

LOCK_FILE: Final = ".lock"
META_FILE: Final = "meta.properties"
META_PARTITIONS_KEY: Final = "offsets.topic.num.partitions"
_META_VERSION: Final = "1"


@dataclass(frozen=True, slots=True)
class CoordinatorTopic:
    """Which coordinator log: its topic, the file recording its partition count and the key there."""

    name: str
    meta_file: str
    meta_key: str
    metered: bool  # whether its appends and fsyncs count in the coordinator log's metrics


OFFSETS_LOG: Final = CoordinatorTopic("__consumer_offsets", META_FILE, META_PARTITIONS_KEY, True)
TRANSACTION_LOG: Final = CoordinatorTopic("__transaction_state", "transaction-state.properties",
                                          "transaction.state.log.num.partitions", False)


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's log cleaner settings for `__consumer_offsets` (cleanup.policy=compact)."""

    enabled: bool = True  # log.cleaner.enable
    min_cleanable_dirty_ratio: float = compaction.DEFAULT_MIN_CLEANABLE_DIRTY_RATIO
    delete_retention_ms: int = compaction.DEFAULT_DELETE_RETENTION_MS
    backoff_ms: int = compaction.DEFAULT_CLEANER_BACKOFF_MS


# Kafka's message.max.bytes (the `__consumer_offsets` topic inherits the broker default).
DEFAULT_MAX_BATCH_BYTES: Final = 1_048_588
# Per record in a v2 batch: length, attributes, offset and timestamp deltas, key/value lengths, headers
# count, all varints; 21 bytes bounds them for any record that fits in a batch.
_RECORD_OVERHEAD: Final = 21


def batch_size_estimate(encoded: Sequence[tuple[bytes, bytes | None]]) -> int:
    """An upper bound of the uncompressed v2 batch holding these records."""
    return HEADER_SIZE + sum(_RECORD_OVERHEAD + len(k) + len(v or b"") for k, v in encoded)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def open_from_config(config: Config, topic: CoordinatorTopic, partitions: int) -> CoordinatorLog:
    """Open (recovering) `topic`'s log in the node's data directory with the node's fsync, roll and cleaner
    settings: what `__consumer_offsets` and `__transaction_state` share."""
    return CoordinatorLog.open(
        config.data_dir, partitions, config.fsync, segment_ms=config.log_roll_ms,
        syncfs=config.fsync_method == "auto", topic=topic,
        cleaner=CleanerConfig(
            enabled=config.log_cleaner_enable,
            min_cleanable_dirty_ratio=config.log_cleaner_min_cleanable_ratio,
            delete_retention_ms=config.delete_retention_ms,
            backoff_ms=config.log_cleaner_backoff_ms,
        ),
    )


# The runtime's tests drive it with a scripted log (tests/unit/test_runtime_appends.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class CoordinatorLog:
    def __init__(self, data_dir: Path, partitions: int, fsync: FsyncPolicy, logs: list[PartitionLog],
                 lock_fd: int, cleaner: CleanerConfig | None = None,
                 wall_clock_ms: Callable[[], int] = _wall_clock_ms,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 sync_threads: int = DEFAULT_SYNC_THREADS, syncfs: bool = True,
                 topic: CoordinatorTopic = OFFSETS_LOG) -> None:
        self.data_dir = data_dir
        self.topic = topic
        self._max_batch_bytes = max_batch_bytes
        self._partitions = partitions
        self._logs = logs
        self._lock_fd = lock_fd
        # Closing, and the file half of a cleaner's swap; appends go through the writer.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coordinator-log")
        name = topic.name
        self._targets = [Target(f"{name}-{p}", plog, kind="log",
                                fields={"partition": p} if topic.metered else {"topic": name, "partition": p},
                                fsync_seconds=metrics.LOG_FSYNC_COORDINATOR if topic.metered else None,
                                append_seconds=metrics.LOG_APPEND_LATENCY.tally if topic.metered else None)
                         for p, plog in enumerate(logs)]
        self._writer = GroupCommitWriter(fsync, "coordinator_log" if topic.metered else "transaction_log",
                                         sync_threads=min(sync_threads, partitions), syncfs=syncfs)
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
             max_batch_bytes: int = 0, syncfs: bool = True,
             topic: CoordinatorTopic = OFFSETS_LOG) -> CoordinatorLog:
        """Lock the data directory (`__consumer_offsets`'s log only: the other logs of the directory are
        opened after it, under its lock), settle the partition count and open (recover) every partition.

        Raises StorageError when the directory is in use or its partition count file is unusable, and
        CorruptLogError when a partition's log is damaged before its tail.
        """
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(data_dir) if topic == OFFSETS_LOG else -1
        logs: list[PartitionLog] = []
        try:
            effective = _settle_partition_count(data_dir, partitions, topic)
            for p in range(effective):
                logs.append(PartitionLog.open_dir(data_dir / f"{topic.name}-{p}", p, segment_bytes, file_io,
                                                  segment_ms=segment_ms, index_interval_bytes=index_interval_bytes))
        except BaseException:
            for plog in logs:
                plog.close()
            _unlock(lock_fd)
            raise
        return cls(data_dir, effective, fsync, logs, lock_fd, cleaner, wall_clock_ms,
                   max_batch_bytes or DEFAULT_MAX_BATCH_BYTES, syncfs=syncfs, topic=topic)

    @property
    def partitions(self) -> int:
        """The effective partition count (the one recorded in the topic's partition count file)."""
        return self._partitions

    @property
    def write_rounds(self) -> int:
        """Write rounds the log's group-commit writer has completed: appends per round is the group commit."""
        return self._writer.rounds

    def read_records(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every record of `partition` in log order as (key, value) bytes, a None value a tombstone: what a
        coordinator with its own codec loads. Raises RecordDecodeError for a record without a key, and
        CorruptLogError for a damaged batch, as `replay` does."""
        for rec in self._log(partition).read():
            if rec.key is None:
                raise RecordDecodeError(f"{self.topic.name}-{partition} offset {rec.offset}: record has no key")
            yield rec.key, rec.value

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

    async def append(self, partition: int, records: Sequence[CoordinatorRecord], timestamp_ms: int,
                     leader_epoch: int = 0) -> None:
        """Append `records` as one batch stamped with `leader_epoch`; returns once durable per the fsync
        policy (`submit_batch` reports the batch's offsets too).

        Raises StorageError when the write or fsync failed (then none of these records count), and
        TypeError/ValueError at once for a record that cannot be encoded.
        """
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()

        def done(appended: Appended) -> None:
            if not future.done():  # else the caller was cancelled; its batch was written all the same
                future.set_result(appended)

        if self.submit_batch(partition, records, timestamp_ms, done, leader_epoch):
            appended = await future
            if appended.error is not None:
                raise appended.error

    def submit(self, partition: int, records: Sequence[CoordinatorRecord], timestamp_ms: int,
               on_done: Callable[[StorageError | None], None], leader_epoch: int = 0) -> bool:
        """`submit_batch` for a caller that needs only the outcome: `on_done(None)` once durable, or
        `on_done(error)` when its fsync failed."""
        return self.submit_batch(partition, records, timestamp_ms, lambda a: on_done(a.error), leader_epoch)

    def submit_batch(self, partition: int, records: Sequence[CoordinatorRecord], timestamp_ms: int,
                     on_done: Callable[[Appended], None], leader_epoch: int = 0) -> bool:
        """Write `records` now as one batch stamped with `leader_epoch`, without awaiting: `append` for a
        caller that completes many appends from one callback each. Returns False (and never calls
        `on_done`) when there is nothing to write; otherwise the writer calls `on_done(Appended(base,
        last, error))` once the batch is durable per the fsync policy (error None), or with the error
        when its fsync failed, from the event loop, in submit order within each round. Raises before
        writing anything for a closed log, a record that cannot be encoded, a batch over the size
        limit or a fenced partition, and StorageError when the write itself failed."""
        if self._closing:
            raise StorageError("coordinator log is closed")
        self._log(partition)
        if not records:
            return False
        try:
            encoded = [encode_offset_commit(r) if type(r) is OffsetCommitRecord else encode_record(r)
                       for r in records]
        except TypeError:
            encoded = [encode_record(r) for r in records]  # the codec names the field in its TypeError
        return self.submit_encoded(partition, encoded, timestamp_ms, on_done, leader_epoch)

    def submit_encoded(self, partition: int, encoded: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                       on_done: Callable[[Appended], None], leader_epoch: int = 0) -> bool:
        """`submit_batch` of records already encoded as (key, value) bytes, a None value a tombstone."""
        if self._closing:
            raise StorageError("coordinator log is closed")
        plog = self._log(partition)
        if not encoded:
            return False
        size = batch_size_estimate(encoded)
        if size > self._max_batch_bytes:
            # Kafka refuses such a batch with MESSAGE_TOO_LARGE; the coordinator maps it per API.
            raise RecordTooLargeError(
                f"a {size}-byte batch for {self.topic.name}-{partition} is over message.max.bytes "
                f"({self._max_batch_bytes})")
        self._writer.submit(self._targets[partition],
                            functools.partial(_write, plog, encoded, timestamp_ms, leader_epoch), on_done)
        self._maybe_start_cleaner()
        return True

    def partition_log(self, partition: int) -> PartitionLog:
        """One partition's local replica, for replication to read (writes go through the methods here)."""
        return self._log(partition)

    async def append_as_follower(self, partition: int, batches: list[bytes]) -> list[tuple[int, int]]:
        """Write batches fetched from the partition's leader as they are (their offsets and epochs), through
        the writer like every append, and return once durable per the fsync policy: a follower's copy
        counts toward acks=all. Returns (leader epoch, base offset) per batch."""
        plog = self._log(partition)
        written: list[tuple[int, int]] = []

        def write() -> tuple[int, int]:
            base = plog.next_offset
            written.extend(plog.append_as_follower(batches))
            return base, plog.next_offset - 1

        await self._writer.write_durably(self._targets[partition], write)
        return written

    async def truncate(self, partition: int, offset: int) -> int:
        """A follower cuts what diverged from its leader (GroupCommitWriter.truncate); the new log end."""
        return await self._writer.truncate(self._targets[partition], offset)

    async def close(self) -> None:
        """Wait for queued appends, fsync every partition, close the files and release the lock."""
        if self._closed:
            return
        self._closing = True
        await self._stop_cleaner()
        loop = asyncio.get_running_loop()
        try:
            results = await self._writer.close(self._targets)
            await loop.run_in_executor(self._executor, self._close_all, results)
        finally:
            self._executor.shutdown(wait=True)
            self._cleaner_executor.shutdown(wait=True)
            if self._lock_fd >= 0:
                _unlock(self._lock_fd)
            self._closed = True

    def _maybe_start_cleaner(self) -> None:
        if self._cleaner_task is None and self._cleaner.enabled and not self._closing:
            self._cleaner_task = asyncio.get_running_loop().create_task(
                self._run_cleaner(), name="coordinator-log-cleaner")

    def _close_all(self, results: dict[Target, StorageError | None]) -> None:
        """In the log's own thread, after the writer's last fsync of every partition."""
        first_error: StorageError | None = None
        for t in self._targets:
            err = results.get(t)
            first_error = first_error or err
            # A clean mark lets the next open trust the whole partition: only when all of it is durable.
            t.log.close(clean=err is None and t.log.failed is None and t.fenced is None)
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
        target = self._targets[partition]
        if self._closing or target.fenced is not None or plog.failed is not None or partition in self._compacting:
            return False
        loop = asyncio.get_running_loop()
        self._compacting.add(partition)
        try:
            snap = compaction.snapshot(plog)  # on the loop, the thread that appends (and rolls)
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
                await loop.run_in_executor(self._executor, compaction.swap_in_files, plog, result)
            except OSError as e:
                # The files may be half swapped: only the recovery of a restart can sort them out.
                err = StorageError(f"swapping in the cleaned segments of {self.topic.name}-{partition} failed: "
                                   f"{e}; the partition takes no more appends until the server restarts", e.errno)
                log.error("log_cleaner_swap_failed", partition=partition, error=str(e))
                target.fenced = err
                return False
            compaction.swap_in_memory(plog, result)
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

    def _log(self, partition: int) -> PartitionLog:
        if not 0 <= partition < self._partitions:
            raise ValueError(f"{self.topic.name} has partitions 0-{self._partitions - 1}, not {partition}")
        return self._logs[partition]


def _write(plog: PartitionLog, encoded: list[tuple[bytes, bytes | None]], timestamp_ms: int,
           leader_epoch: int) -> tuple[int, int]:
    """The writer's write step for one coordinator batch: its (base, last) offsets."""
    base = plog.append(encoded, timestamp_ms, leader_epoch)
    return base, plog.next_offset - 1


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


def _settle_partition_count(data_dir: Path, configured: int, topic: CoordinatorTopic) -> int:
    """The recorded partition count wins over the flag: it decides which partition holds each group (or
    transactional id), so changing it would lose every one (Kafka likewise uses the existing topic's
    partition count)."""
    path = data_dir / topic.meta_file
    if not path.exists():
        existing = sorted(p.name for p in data_dir.glob(f"{topic.name}-*"))
        if existing:
            raise StorageError(f"{path} is missing but {data_dir} already holds {', '.join(existing[:3])}"
                               f"{' ...' if len(existing) > 3 else ''}; restore {topic.meta_file} (a line "
                               f"{topic.meta_key}=<count>) rather than guess the partition count")
        _write_meta(path, configured, topic)
        return configured
    recorded = _read_meta(path, topic.meta_key)
    if recorded != configured:
        log.warning("offsets_partitions_flag_ignored" if topic == OFFSETS_LOG else "transaction_partitions_flag_ignored",
                    configured=configured, recorded=recorded, file=str(path))
    return recorded


def _read_meta(path: Path, key: str) -> int:
    props: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    try:
        count = int(props[key])
    except (KeyError, ValueError):
        raise StorageError(f"{path} has no valid {key}=<count> line") from None
    if count < 1:
        raise StorageError(f"{path}: {key}={count} must be at least 1")
    return count


def _write_meta(path: Path, partitions: int, topic: CoordinatorTopic = OFFSETS_LOG) -> None:
    # Written once, atomically: a crash leaves either no file (first start again) or the whole file.
    tmp = path.with_name(path.name + ".tmp")
    text = (f"# coordinator-server: {topic.name} layout of this data directory. Do not edit.\n"
            f"version={_META_VERSION}\n{topic.meta_key}={partitions}\n")
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


__all__ = ["LOCK_FILE", "META_FILE", "OFFSETS_LOG", "TRANSACTION_LOG", "CleanerConfig", "CoordinatorLog",
           "CoordinatorTopic", "open_from_config", "partition_dir"]
