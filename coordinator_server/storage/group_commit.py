"""The one group-commit writer: every partition, `__consumer_offsets` or a topic, is appended and made
durable through it, with one failure semantics.

Theory of operation
-------------------
`submit(target, write, on_done)` runs `write` at once, on the caller's thread (the event loop): the batch
goes to the page cache, and offset assignment, the write and whatever the owner records about it (a
topic's producer state) are one step, as under Kafka's log lock. So the caller learns the batch's base and
last offsets at once (`submit` returns them) and a retry arriving right after sees the first attempt.
Only durability waits: the append joins a queue, and `on_done(Appended(base, last, error))` runs once
the batch is durable per the fsync policy, from the event loop, in submit order within each round. The
offsets in the completion are what a replication layer needs to wait for the high watermark to pass.

One writer task drains the queue in rounds. It takes everything queued and, on the loop, each touched
partition's sync plan (`PartitionLog.take_sync_plan`: it covers every write made so far, owns its file
descriptors, and the loop may keep appending, even rolling segments, while it runs), then hands the round's
plans to one sync thread (the loop closes the plans' descriptors once the thread is done with them). When
the round wrote to `SYNCFS_MIN_PARTITIONS` or more partitions on one filesystem, one syncfs(2) of it makes
them all durable at once (`storage.syncfs`: one journal commit and one cache flush instead of one per file;
on ext4, 40 partitions' fsyncs took ~2 ms and one syncfs ~0.35 ms); otherwise, or with syncfs off
(`--fsync-method fsync`, or a kernel that does not report its errors), the sync thread fsyncs each
partition, at once on a small pool when there are several. While a round is on the disk the next one queues
up, so under load one fsync covers many appends (group commit). Under policy `always` rounds are pipelined
two deep: the next round's plans are queued on the sync thread as soon as they are taken, so its fsyncs
start the moment the previous round's finish (never before: a failed fsync must be seen by the fsyncs after
it), and rounds complete in order.

A round whose sync is one syncfs and nothing else (only data written to active segments, on one filesystem,
through the system's own I/O) goes to that filesystem's syncfs thread instead (storage/syncfs_thread.py: a
C thread that never takes the GIL); so does a smaller round while a syncfs of its filesystem is under way,
which the next syncfs covers. Such rounds are not sync plans: the loop notes each partition's write count,
asks the thread for a syncfs, and when the thread's eventfd says it is done, marks the partitions synced
and completes the rounds, in order. The two paths never overlap: a round for one waits until the other's
rounds are complete, so syncs still run in order and rounds complete in order.

Fsync policy: `always` completes after the fsync; `interval:MS` completes at the next round, after the
write, and fsyncs the partitions written since at most every MS in the background; `never` completes
at the next round and leaves flushing to the OS and `close()`.

Failure semantics
-----------------
* A failed write (e.g. ENOSPC) fails its append and nothing else: `submit` raises StorageError and the
  partition log truncates the partial batch away, so later appends still make a valid log. (If even that
  truncation fails, `PartitionLog.failed` is set and the partition refuses appends until a restart,
  whose recovery cuts the torn tail.)
* A failed fsync fences the partition (`Target.fenced`); a failed syncfs, which cannot say whose write-back
  failed, fences every partition of the round it covered (on the syncfs thread, of every round asked of it
  until the loop learned of the failure: its first failure is sticky): after one, the kernel may have
  dropped the dirty pages and a retried fsync can report success for data that is gone. Every append of that
  round to the partition, and of every later round, completes with StorageError (their fsyncs are not even
  tried), and `submit` refuses the partition until the server restarts and recovery re-reads what is on
  disk.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import structlog

from coordinator_server.config import FsyncPolicy
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.log import SYSTEM_IO, PartitionLog, SyncPlan
from coordinator_server.storage.syncfs_thread import SyncfsThread
from protocol.value_class import ValueClass

log = structlog.get_logger(__name__)

# Threads that fsync the partitions of one round at once (see the module docstring).
DEFAULT_SYNC_THREADS: Final = 16
# From this many partitions of one round on one filesystem, one syncfs replaces their fsyncs. Measured on
# ext4 (benchmarks/findings.md, session 9): syncfs already costs less from 2 files, but it also writes back
# what other processes left dirty there, so a round of one to three partitions keeps its own fsyncs.
SYNCFS_MIN_PARTITIONS: Final = 4


# The failure events of each kind of partition, spelled out so that a name in docs/operations.md can be
# found in the code as it is logged.
_EVENTS: Final = {
    "log": {"append": "log_append_failed", "truncate": "log_truncate_failed", "fsync": "log_fsync_failed"},
    "topic_partition": {"append": "topic_partition_append_failed", "truncate": "topic_partition_truncate_failed",
                        "fsync": "topic_partition_fsync_failed"},
}

class Appended(ValueClass):
    """An append's completion: where its batch lies and whether it is durable (error None). A ValueClass:
    one is built per append (a NamedTuple's interpreted `__new__` took ~0.2 µs)."""

    __slots__ = ("base_offset", "error", "last_offset")

    def __init__(self, base_offset: int, last_offset: int, error: StorageError | None = None) -> None:
        self.base_offset: Final = base_offset
        self.last_offset: Final = last_offset
        self.error: Final = error

    def _fields(self) -> tuple[int, int, StorageError | None]:
        return self.base_offset, self.last_offset, self.error


class Target:
    """One partition as the writer sees it: its log, the names its failures are logged under, and the
    fence a failed fsync puts up. `kind` prefixes the events (`<kind>_append_failed`,
    `<kind>_fsync_failed`); `fields` identify the partition in them."""

    __slots__ = ("append_seconds", "fenced", "fields", "fsync_seconds", "kind", "log", "name")

    def __init__(self, name: str, plog: PartitionLog, *, kind: str, fields: dict[str, Any],
                 fsync_seconds: Any = None, append_seconds: Any = None) -> None:
        self.name = name
        self.log = plog
        self.kind = kind
        self.fields = fields
        self.fsync_seconds = fsync_seconds  # a prometheus Histogram (child), or None
        self.append_seconds = append_seconds
        self.fenced: StorageError | None = None  # set (from a sync thread) when an fsync failed

    def check_writable(self) -> None:
        """Raise StorageError when the partition takes no appends until a restart."""
        if self.fenced is not None:
            raise self.fenced
        if self.log.failed is not None:
            raise StorageError(f"{self.name} is unusable until restart: {self.log.failed}", self.log.failed.errno)


class _Append:
    """One append waiting for its round (a plain class: one is built per append)."""

    __slots__ = ("base_offset", "last_offset", "on_done", "target")

    def __init__(self, target: Target, base_offset: int, last_offset: int,
                 on_done: Callable[[Appended], None]) -> None:
        self.target: Final = target
        self.base_offset: Final = base_offset
        self.last_offset: Final = last_offset
        self.on_done: Final = on_done


class _SyncfsRound:
    """A round on a filesystem's syncfs thread: its appends, the number of writes of each partition it
    covers, and its request's number there."""

    __slots__ = ("appends", "device", "number", "requested_at", "writes")

    def __init__(self, appends: list[_Append], writes: dict[Target, int], device: int, number: int,
                 requested_at: float) -> None:
        self.appends: Final = appends
        self.writes: Final = writes
        self.device: Final = device
        self.number: Final = number
        self.requested_at: Final = requested_at


class GroupCommitWriter:
    def __init__(self, fsync: FsyncPolicy, name: str, sync_threads: int = DEFAULT_SYNC_THREADS, *,
                 syncfs: bool = True) -> None:
        self._fsync = fsync
        self._use_syncfs = syncfs  # where the partitions' FileIO has one (see the module docstring)
        # One descriptor per filesystem, opened before this writer's first write there and kept: syncfs
        # reports a write-back error to each open file whose last check predates it, so this one learns of
        # every error after it was opened, even one another program's syncfs (or this process's other
        # writer) saw first; a descriptor opened later (a new segment's) would not. -1: no syncfs there.
        self._syncfs_fds: dict[int, int] = {}
        # Filesystems where a syncfs failed: their partitions are fsynced one by one from then on, so that a
        # partition outside the failed round learns of its own lost pages from its own fsync.
        self._syncfs_failed: set[int] = set()
        self._name = name  # prefixes this writer's own events, e.g. `coordinator_log_sync_round_failed`
        # A round's fsyncs run from this thread; it hands them to the pool and waits for all (pool threads
        # start on demand). One thread, so rounds' fsyncs run in order.
        self._sync_runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-sync")
        self._sync_pool = ThreadPoolExecutor(max_workers=max(1, sync_threads), thread_name_prefix=f"{name}-fsync")
        # Per filesystem, its syncfs thread (storage/syncfs_thread.py; created on its first round there, None
        # when the system refused one: its rounds stay on the Python sync thread) and
        # that thread's last answer (synced, answered, errno); rounds waiting on them, in submit order.
        self._syncfs_threads: dict[int, Any] = {}
        self._syncfs_answers: dict[int, tuple[int, int, int]] = {}
        self._syncfs_rounds: collections.deque[_SyncfsRound] = collections.deque()
        self._syncfs_drained: asyncio.Future[None] | None = None  # set when `_syncfs_rounds` empties
        self._pending: list[_Append] = []
        self._dirty: dict[Target, None] = {}  # interval mode: written since their last fsync, in order
        self._flush_deadline: float | None = None  # loop time of the next background fsync
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.rounds = 0  # rounds completed (for tests and metrics)

    @property
    def closing(self) -> bool:
        return self._closing

    def submit(self, target: Target, write: Callable[[], tuple[int, int]],
               on_done: Callable[[Appended], None]) -> tuple[int, int]:
        """Write one batch now with `write` (which returns its base and last offsets, or raises OSError)
        and queue it for durability; returns the offsets. `on_done` is called once it is durable per the
        policy, or failed (see the module docstring). Raises StorageError, without calling `on_done`,
        when the writer is closed, the partition is fenced or the write failed."""
        if self._closing:
            raise StorageError(f"{self._name} is closed")
        target.check_writable()
        if self._use_syncfs and target.log.device not in self._syncfs_fds:
            self._open_syncfs_fd(target)
        started = time.perf_counter()
        try:
            base, last = write()
        except OSError as e:
            log.error(_EVENTS[target.kind]["append"], **target.fields, errno=e.errno, error=str(e))
            raise StorageError(f"append to {target.name} failed: {e}", e.errno) from e
        if target.append_seconds is not None:
            target.append_seconds.observe(time.perf_counter() - started)
        self._pending.append(_Append(target, base, last, on_done))
        self._start()
        return base, last

    async def write_durably(self, target: Target, write: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        """`submit`, then wait until the batch is durable per the policy; its offsets. Raises StorageError
        when the write or its fsync failed. (A follower's append: its copy counts toward acks=all.)"""
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()

        def done(appended: Appended) -> None:
            if not future.done():  # else the caller was cancelled; the batch was written all the same
                future.set_result(appended)

        offsets = self.submit(target, write, done)
        appended = await future
        if appended.error is not None:
            raise appended.error
        return offsets

    async def flush(self, targets: Iterable[Target]) -> dict[Target, StorageError | None]:
        """fsync these partitions now (at once); each one's error, or None. A fenced partition is not
        fsynced again and reports its fence; a closed or failed log has nothing to fsync."""
        results: dict[Target, StorageError | None] = {}
        plans: dict[Target, SyncPlan] = {}
        for t in targets:
            if t.fenced is not None:
                results[t] = t.fenced
            elif t.log.is_open and t.log.failed is None:
                plans[t] = t.log.take_sync_plan()
            else:
                results[t] = None
        if plans:
            synced = self._sync_runner.submit(self._sync_plans, plans)
            try:
                synced_results: dict[Target, StorageError | None] = await asyncio.wrap_future(synced)
                results |= synced_results
            finally:
                _close_when_done(plans, synced)
        return results

    async def truncate(self, target: Target, offset: int) -> int:
        """`PartitionLog.truncate_to(offset)` (a follower cutting what diverged from its leader) once
        every fsync already queued has run, so that no sync plan taken before the cut moves the recovery
        point past it afterwards; returns the new log end offset. Appends to the partition submitted
        before it and not yet complete still report their (now cut) offsets: a caller sequences its
        appends and truncations (as Kafka's fetcher thread does). It fsyncs on the calling thread (the
        loop), which is acceptable for a rare, follower-only step. A failure fences the partition: what
        is in memory may no longer match the disk."""
        if self._closing:
            raise StorageError(f"{self._name} is closed")
        target.check_writable()
        await self._syncfs_rounds_drained()
        await asyncio.wrap_future(self._sync_runner.submit(lambda: None))  # the sync thread runs in order
        target.check_writable()  # a queued fsync may have failed meanwhile
        try:
            return target.log.truncate_to(offset)
        except OSError as e:
            err = StorageError(f"truncation of {target.name} to {offset} failed: {e}; the partition takes no "
                               "more appends until the server restarts", e.errno)
            log.error(_EVENTS[target.kind]["truncate"], **target.fields, offset=offset, errno=e.errno, error=str(e))
            target.fenced = err
            raise err from e

    async def close(self, targets: Iterable[Target]) -> dict[Target, StorageError | None]:
        """Complete every queued append, fsync `targets` once more and stop the threads; returns what
        `flush` returns. Appends are refused from the call on."""
        self._closing = True
        try:
            if self._task is not None:
                self._start()  # wakes it so it drains the queue and stops
                await self._task
            return await self.flush(targets)
        finally:
            loop = asyncio.get_running_loop()
            for thread in self._syncfs_threads.values():
                if thread is not None:
                    loop.remove_reader(thread.fileno())
                    thread.close()  # the rounds are all answered: the task drained them
            self._syncfs_threads.clear()
            self._sync_runner.shutdown(wait=True)
            self._sync_pool.shutdown(wait=True)
            for fd in self._syncfs_fds.values():
                if fd >= 0:
                    os.close(fd)
            self._syncfs_fds.clear()

    def _open_syncfs_fd(self, target: Target) -> None:
        """Before the first write to a filesystem: the descriptor its syncfs calls go through (-1: none,
        when the partition's FileIO has no syncfs or the directory cannot be opened; fsync each then)."""
        fd = -1
        if target.log.file_io.syncfs is not None and target.log.device >= 0:
            try:
                fd = os.open(target.log.directory, os.O_RDONLY)
            except OSError as e:
                log.warning(f"{self._name}_syncfs_unavailable", **target.fields, errno=e.errno, error=str(e))
        self._syncfs_fds[target.log.device] = fd

    # -- the writer task --

    def _start(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self._name}-writer")
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
                    await self._syncfs_rounds_drained()
                    return
                timeout = None if self._flush_deadline is None else max(0.0, self._flush_deadline - loop.time())
                # Clearing and checking `_pending` happen with no await between them, so no wakeup is lost.
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
            round_, self._pending = self._pending, []
            if round_:
                route = self._syncfs_route(round_) if self._fsync.mode == "always" else None
                if route is not None:
                    # Syncs run in order, rounds complete in order: the Python thread's rounds go first.
                    if syncing is not None:
                        await syncing
                        syncing = None
                    self._request_syncfs(round_, *route)
                elif self._fsync.mode == "always":
                    await self._syncfs_rounds_drained()  # likewise, the other way round
                    plans = self._take_plans(round_)
                    synced = self._sync_runner.submit(self._sync_plans, plans)
                    task = loop.create_task(self._sync_and_complete(round_, plans, synced, syncing))
                    if syncing is not None:
                        # At most one round queued behind the one being fsynced: what arrives meanwhile
                        # makes the next round bigger instead of a chain of small ones.
                        await syncing
                    syncing = task
                else:
                    self._complete(round_, {})
                    if self._fsync.mode == "interval":
                        self._dirty |= dict.fromkeys(a.target for a in round_)
                        if self._flush_deadline is None:
                            self._flush_deadline = loop.time() + self._fsync.interval_ms / 1000
            if self._flush_deadline is not None and loop.time() >= self._flush_deadline:
                dirty, self._dirty, self._flush_deadline = self._dirty, {}, None
                try:
                    await self.flush(dirty)
                except Exception:  # a bug, not an I/O error (those fence the partition): keep writing
                    log.exception(f"{self._name}_background_fsync_failed")

    # -- rounds on a syncfs thread (storage/syncfs_thread.py) --

    def _syncfs_route(self, round_: list[_Append]) -> tuple[int, dict[Target, int]] | None:
        """The filesystem and each partition's writes, when the round's sync is one syncfs the filesystem's
        syncfs thread can run alone (see storage/syncfs_thread.py); None: the Python sync thread's round."""
        if SyncfsThread is None or not self._use_syncfs:
            return None
        writes: dict[Target, int] = {}
        device = -1
        for a in round_:
            t = a.target
            if t in writes or t.fenced is not None or not t.log.is_open or t.log.failed is not None:
                continue  # a fenced or closed partition's append completes with its fence, as in the plans
            plog = t.log
            if plog.file_io is not SYSTEM_IO or not plog.only_data_unsynced():
                return None
            if device != plog.device:
                if device != -1:
                    return None  # two filesystems: the Python path syncs each
                device = plog.device
            writes[t] = plog.writes
        if (not writes or device in self._syncfs_failed or self._syncfs_fds.get(device, -1) < 0
                or self._syncfs_threads.get(device, True) is None):
            return None
        # A round of few partitions fsyncs them (syncfs would also write back what other programs left dirty
        # there), unless a syncfs of that filesystem is under way anyway: the next one covers it for nothing,
        # where its own fsyncs would have to wait for that syncfs (syncs run in order).
        if len(writes) < SYNCFS_MIN_PARTITIONS and not (self._syncfs_rounds
                                                        and self._syncfs_rounds[-1].device == device):
            return None
        if device not in self._syncfs_threads and not self._start_syncfs_thread(device):
            return None
        return device, writes

    def _start_syncfs_thread(self, device: int) -> bool:
        """Start the filesystem's syncfs thread; False (logged, and its rounds stay on the Python sync
        thread) when the system refuses one."""
        try:
            thread = SyncfsThread(self._syncfs_fds[device])
        except OSError as e:
            log.warning(f"{self._name}_syncfs_thread_unavailable", device=device, errno=e.errno, error=str(e))
            self._syncfs_threads[device] = None
            return False
        self._syncfs_threads[device] = thread
        self._syncfs_answers[device] = (0, 0, 0)
        asyncio.get_running_loop().add_reader(thread.fileno(), self._syncfs_answered, device)
        return True

    def _request_syncfs(self, round_: list[_Append], device: int, writes: dict[Target, int]) -> None:
        number = self._syncfs_threads[device].request()
        self._syncfs_rounds.append(_SyncfsRound(round_, writes, device, number, time.perf_counter()))

    def _syncfs_answered(self, device: int) -> None:
        """On the loop, when a syncfs thread wrote its eventfd: complete the rounds it answered, in order."""
        self._syncfs_answers[device] = self._syncfs_threads[device].completed()
        rounds = self._syncfs_rounds
        now = time.perf_counter()
        while rounds:
            head = rounds[0]
            synced, answered, errno = self._syncfs_answers[head.device]
            if head.number > answered:
                break
            rounds.popleft()
            results: dict[Target, StorageError | None] = {}
            if head.number <= synced:
                for t, writes in head.writes.items():
                    t.log.mark_synced(writes)
                    if t.fsync_seconds is not None:
                        t.fsync_seconds.observe(now - head.requested_at)
            else:
                # The first failure is sticky on the thread (every later request there is answered with
                # it): from now on this filesystem's rounds fsync each partition (the Python path).
                self._syncfs_failed.add(head.device)
                e = OSError(errno, os.strerror(errno))
                for t in head.writes:
                    results[t] = t.fenced or _fence(t, e, f"syncfs covering {t.name}", syncfs=True)
            self._complete(head.appends, results)
        if not rounds and self._syncfs_drained is not None:
            self._syncfs_drained.set_result(None)
            self._syncfs_drained = None

    async def _syncfs_rounds_drained(self) -> None:
        """Wait until every round on a syncfs thread is complete."""
        if self._syncfs_rounds:
            if self._syncfs_drained is None:
                self._syncfs_drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._syncfs_drained)

    @staticmethod
    def _take_plans(round_: list[_Append]) -> dict[Target, SyncPlan]:
        """On the loop: the round's sync plans, each partition once."""
        plans: dict[Target, SyncPlan] = {}
        for a in round_:
            t = a.target
            if t not in plans and t.fenced is None and t.log.is_open and t.log.failed is None:
                plans[t] = t.log.take_sync_plan()
        return plans

    async def _sync_and_complete(self, round_: list[_Append], plans: dict[Target, SyncPlan],
                                 synced: concurrent.futures.Future[dict[Target, StorageError | None]],
                                 previous: asyncio.Task[None] | None) -> None:
        try:
            if previous is not None:
                await previous  # rounds complete in order
            results: dict[Target, StorageError | None] = await asyncio.wrap_future(synced)
        except Exception as e:  # a bug, not an I/O error: fail the round rather than hang its callers
            log.exception(f"{self._name}_sync_round_failed")
            err = StorageError(f"internal error in the {self._name} writer: {e!r}")
            results = {a.target: err for a in round_}
        finally:
            _close_when_done(plans, synced)
        self._complete(round_, results)

    def _complete(self, round_: list[_Append], results: dict[Target, StorageError | None]) -> None:
        self.rounds += 1
        for a in round_:
            # No plan for a partition fenced before the round (its fence is the answer) or whose log was
            # closed meanwhile (a deleted topic: nothing left to make durable).
            err = results.get(a.target, a.target.fenced)
            try:
                a.on_done(Appended(a.base_offset, a.last_offset, err))
            except Exception:  # a bug in a caller's callback: the other appends still complete
                log.exception(f"{self._name}_append_callback_failed", **a.target.fields)

    # -- in the sync threads --

    def _sync_plans(self, plans: dict[Target, SyncPlan]) -> dict[Target, StorageError | None]:
        """Make the round durable: one syncfs per filesystem it wrote enough partitions on, and the fsyncs
        of the rest, at once when there are several; waits for all."""
        results: dict[Target, StorageError | None] = {}
        if self._use_syncfs and len(plans) >= SYNCFS_MIN_PARTITIONS:
            by_device: dict[int, dict[Target, SyncPlan]] = {}
            rest: dict[Target, SyncPlan] = {}
            for t, plan in plans.items():
                device = t.log.device
                if t.fenced is not None or self._syncfs_fds.get(device, -1) < 0 or device in self._syncfs_failed:
                    rest[t] = plan  # a fenced partition's plan is not run there
                else:
                    by_device.setdefault(device, {})[t] = plan
            for device, group in by_device.items():
                if len(group) >= SYNCFS_MIN_PARTITIONS:
                    results |= self._syncfs(device, group)
                else:
                    rest |= group
            plans = rest
        if len(plans) <= 1:
            results |= {t: self._run_plan(t, plan) for t, plan in plans.items()}
        else:
            results |= zip(plans, self._sync_pool.map(self._run_plan, plans, plans.values()), strict=True)
        return results

    def _syncfs(self, device: int, group: dict[Target, SyncPlan]) -> dict[Target, StorageError | None]:
        """One syncfs for the plans of one filesystem; each plan's writes were made before it was taken,
        so before this call."""
        syncfs = next(iter(group.values())).file_io.syncfs
        assert syncfs is not None
        started = time.perf_counter()
        out: dict[Target, StorageError | None] = {}
        try:
            syncfs(self._syncfs_fds[device])
        except OSError as e:
            # The kernel does not say whose write-back failed: none of these partitions can be trusted, and
            # the next rounds on this filesystem fsync each partition, which reports each one's own errors.
            self._syncfs_failed.add(device)
            for t in group:
                out[t] = _fence(t, e, f"syncfs covering {t.name}", syncfs=True)
            return out
        elapsed = time.perf_counter() - started
        for t, plan in group.items():
            try:
                plan.run_covered(device)
            except OSError as e:  # a directory on another filesystem failed its own fsync
                out[t] = _fence(t, e, f"fsync of {t.name}")
                continue
            if t.fsync_seconds is not None:
                t.fsync_seconds.observe(elapsed)
            out[t] = None
        return out

    def _run_plan(self, target: Target, plan: SyncPlan) -> StorageError | None:
        if target.fenced is not None:  # an earlier fsync failed: this one could not be trusted
            return target.fenced
        started = time.perf_counter()
        try:
            plan.run()
        except OSError as e:
            return _fence(target, e, f"fsync of {target.name}")
        if target.fsync_seconds is not None:
            target.fsync_seconds.observe(time.perf_counter() - started)
        return None


def _close_when_done(plans: dict[Target, SyncPlan],
                     synced: concurrent.futures.Future[dict[Target, StorageError | None]]) -> None:
    """Close the plans' descriptors on the loop once the sync thread is done with them (it is, unless the
    awaiting task was cancelled mid-round: then the thread closes them when it finishes)."""
    def close_all(_: object = None) -> None:
        for plan in plans.values():
            plan.close()

    if synced.done():
        close_all()
    else:
        synced.add_done_callback(close_all)


def _fence(target: Target, e: OSError, what: str, **fields: Any) -> StorageError:
    """Fence `target` after its fsync (or the syncfs covering it), `what`, failed; the error to answer."""
    err = StorageError(f"{what} failed: {e}; the partition takes no more appends until the server restarts",
                       e.errno)
    log.error(_EVENTS[target.kind]["fsync"], **target.fields, errno=e.errno, error=str(e), **fields)
    target.fenced = err  # a plain attribute store; the loop reads it after this round
    return err


__all__ = ["DEFAULT_SYNC_THREADS", "SYNCFS_MIN_PARTITIONS", "Appended", "GroupCommitWriter", "Target"]
