"""A group-commit round over many partitions of one filesystem is made durable by one syncfs(2) instead of
one fsync per partition (storage/syncfs.py), with the same completion order and failure semantics: a failed
syncfs fences every partition it covered."""
from __future__ import annotations

import asyncio
import errno
import functools
import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from coordinator_server.config import FsyncPolicy, load_config
from coordinator_server.group.records import OffsetCommitRecord, OffsetCommitValue
from coordinator_server.storage import CoordinatorLog, FileIO, PartitionLog, StorageError
from coordinator_server.storage import syncfs as syncfs_module
from coordinator_server.storage.group_commit import SYNCFS_MIN_PARTITIONS, GroupCommitWriter, Target
from coordinator_server.storage.log import SYSTEM_IO
from coordinator_server.storage.segment import read_recovery_point

ALWAYS = FsyncPolicy("always")


def commit(group: str, seq: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(group, "t", 0, OffsetCommitValue(seq, -1, "", 1_000 + seq, -1))


class SyncfsIO(FileIO):
    """The real system calls, counted; syncfs optionally failing."""

    def __init__(self) -> None:
        super().__init__(fsync=self._fsync, syncfs=self._syncfs)
        object.__setattr__(self, "lock", threading.Lock())
        object.__setattr__(self, "file_fsyncs", 0)
        object.__setattr__(self, "syncfs_fds", [])
        object.__setattr__(self, "fail_syncfs", False)
        object.__setattr__(self, "gate", None)
        object.__setattr__(self, "in_syncfs", threading.Event())

    def _fsync(self, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            with self.lock:
                object.__setattr__(self, "file_fsyncs", self.file_fsyncs + 1)
        os.fsync(fd)

    def _syncfs(self, fd: int) -> None:
        with self.lock:
            self.syncfs_fds.append(fd)
        self.in_syncfs.set()
        if self.gate is not None:
            self.gate.wait(timeout=10)
        if self.fail_syncfs:
            raise OSError(errno.EIO, "Input/output error")
        if syncfs_module.SYSCALL is not None:
            syncfs_module.SYSCALL(fd)
        else:  # a kernel whose syncfs does not report errors: sync(2) makes the same writes durable
            os.sync()


def offsets(log: CoordinatorLog, partition: int) -> list[int]:
    return [r.value.offset for r in log.replay(partition) if isinstance(r, OffsetCommitRecord) and r.value]


async def test_a_round_over_many_partitions_is_one_syncfs_and_replays(tmp_path: Path) -> None:
    io = SyncfsIO()
    log = CoordinatorLog.open(tmp_path, 8, ALWAYS, file_io=io)
    # Queued in one loop iteration: one round over all eight partitions, two appends each.
    await asyncio.gather(*(log.append(i % 8, [commit(f"g{i % 8}", i)], 1) for i in range(16)))
    assert (len(io.syncfs_fds), io.file_fsyncs) == (1, 0)
    await log.close()
    log = CoordinatorLog.open(tmp_path, 8, ALWAYS)
    assert [offsets(log, p) for p in range(8)] == [[p, p + 8] for p in range(8)]
    await log.close()


async def test_a_round_over_few_partitions_fsyncs_each(tmp_path: Path) -> None:
    io = SyncfsIO()
    log = CoordinatorLog.open(tmp_path, 8, ALWAYS, file_io=io)
    few = SYNCFS_MIN_PARTITIONS - 1
    await asyncio.gather(*(log.append(p, [commit("g", p)], 1) for p in range(few)))
    assert (io.syncfs_fds, io.file_fsyncs) == ([], few)
    await log.close()


async def test_fsync_method_fsync_keeps_one_fsync_per_partition(tmp_path: Path) -> None:
    io = SyncfsIO()
    log = CoordinatorLog.open(tmp_path, 8, ALWAYS, file_io=io, syncfs=False)
    await asyncio.gather(*(log.append(p, [commit("g", p)], 1) for p in range(8)))
    assert (io.syncfs_fds, io.file_fsyncs) == ([], 8)
    await log.close()


async def test_a_failed_syncfs_fences_every_partition_it_covered(tmp_path: Path) -> None:
    io = SyncfsIO()
    log = CoordinatorLog.open(tmp_path, 10, ALWAYS, file_io=io)
    await asyncio.gather(*(log.append(p, [commit("g", p)], 1) for p in range(10)))  # all durable
    io.fail_syncfs = True  # as the kernel reports a lost write-back on the filesystem
    results = await asyncio.gather(*(log.append(p, [commit("g", 100 + p)], 1) for p in range(8)),
                                   return_exceptions=True)
    assert all(isinstance(r, StorageError) and r.errno == errno.EIO for r in results), results
    io.fail_syncfs = False
    for p in range(8):  # none of them is trusted again until a restart
        with pytest.raises(StorageError, match="until the server restarts"):
            await log.append(p, [commit("g", 200)], 1)
    await log.append(9, [commit("g", 209)], 1)  # a partition the failed round did not cover still works
    with pytest.raises(StorageError):
        await log.close()  # the fenced partitions were never made durable
    log = CoordinatorLog.open(tmp_path, 10, ALWAYS)
    assert offsets(log, 9) == [9, 209]
    await log.close()


async def submit_all(writer: GroupCommitWriter, targets: list[Target]) -> list[StorageError | None]:
    """One append to each target, queued in one loop iteration (one round); each one's error or None."""
    loop = asyncio.get_running_loop()
    futures = []
    for t in targets:
        future: asyncio.Future[StorageError | None] = loop.create_future()
        writer.submit(t, functools.partial(write_one, t.log),
                      lambda appended, future=future: future.set_result(appended.error))
        futures.append(future)
    return list(await asyncio.gather(*futures))


def write_one(plog: PartitionLog) -> tuple[int, int]:
    base = plog.append([(b"k", b"v")], 1)
    return base, base


def open_targets(tmp_path: Path, io: FileIO, n: int, **kwargs: int) -> list[Target]:
    logs = [PartitionLog.open(tmp_path, p, file_io=io, **kwargs) for p in range(n)]
    return [Target(f"p{i}", plog, kind="log", fields={"partition": i}) for i, plog in enumerate(logs)]


async def close_all(writer: GroupCommitWriter, targets: list[Target]) -> None:
    await writer.close([])
    for t in targets:
        t.log.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_plans_are_grouped_by_filesystem_and_synced_through_the_writers_descriptor(tmp_path: Path) -> None:
    io = SyncfsIO()
    targets = open_targets(tmp_path, io, 2 * SYNCFS_MIN_PARTITIONS)
    for t in targets[SYNCFS_MIN_PARTITIONS:]:
        t.log.device += 1_000_000  # as if the second half lay on another filesystem
    writer = GroupCommitWriter(ALWAYS, "test")
    assert await submit_all(writer, targets) == [None] * len(targets)
    assert len(io.syncfs_fds) == 2 and io.file_fsyncs == 0  # one syncfs per filesystem
    first, second = io.syncfs_fds
    assert first != second
    # Each filesystem's descriptor is the writer's own, opened before its first write there, not a
    # segment's: the same one again in the next round.
    assert await submit_all(writer, targets) == [None] * len(targets)
    assert io.syncfs_fds[2:] == [first, second]
    assert os.fstat(first).st_dev == targets[0].log.device
    await close_all(writer, targets)


async def test_a_round_closes_what_it_opened_and_moves_the_recovery_point_only_once_durable(tmp_path: Path) -> None:
    io = SyncfsIO()
    # Segments of ~one batch: every append rolls, so every plan carries a rolled segment and a checkpoint.
    targets = open_targets(tmp_path, io, 6, segment_bytes=100)
    writer = GroupCommitWriter(ALWAYS, "test")
    assert await submit_all(writer, targets) == [None] * 6
    fds = open_fds()
    for _ in range(3):
        assert await submit_all(writer, targets) == [None] * 6
    assert open_fds() == fds  # every plan's descriptors closed
    points = [read_recovery_point(t.log.directory) for t in targets]
    assert all(p is not None and p.offset >= 3 for p in points), points  # moved past the rolled segments

    io.fail_syncfs = True
    assert all(isinstance(e, StorageError) for e in await submit_all(writer, targets))
    assert open_fds() == fds  # closed on failure too
    assert [read_recovery_point(t.log.directory) for t in targets] == points  # not moved
    await close_all(writer, targets)


async def test_after_a_failed_syncfs_the_filesystem_is_fsynced_partition_by_partition(tmp_path: Path) -> None:
    io = SyncfsIO()
    targets = open_targets(tmp_path, io, 12)
    writer = GroupCommitWriter(ALWAYS, "test")
    io.fail_syncfs = True
    assert all(isinstance(e, StorageError) for e in await submit_all(writer, targets[:6]))
    io.fail_syncfs = False
    # The other six were not in the failed round; if their pages had been lost, only their own fsyncs
    # would say so now (syncfs reported the error once): each is fsynced.
    assert await submit_all(writer, targets[6:]) == [None] * 6
    assert (len(io.syncfs_fds), io.file_fsyncs) == (1, 6)
    await close_all(writer, targets)


async def test_a_round_queued_behind_a_failing_syncfs_is_failed_not_synced(tmp_path: Path) -> None:
    io = SyncfsIO()
    targets = open_targets(tmp_path, io, 6)
    writer = GroupCommitWriter(ALWAYS, "test")
    gate = threading.Event()
    object.__setattr__(io, "gate", gate)
    first = asyncio.ensure_future(submit_all(writer, targets))
    while not io.in_syncfs.is_set():  # round 1 is inside its syncfs
        await asyncio.sleep(0.001)
    second = asyncio.ensure_future(submit_all(writer, targets))  # round 2: written, queued behind it
    await asyncio.sleep(0.02)
    io.fail_syncfs = True
    gate.set()
    assert all(isinstance(e, StorageError) for e in await first)
    assert all(isinstance(e, StorageError) and "syncfs covering" in str(e) for e in await second)
    assert (len(io.syncfs_fds), io.file_fsyncs) == (1, 0)  # round 2's plans were discarded, not synced
    await close_all(writer, targets)


@pytest.mark.skipif(sys.platform != "linux" or syncfs_module._kernel_version(os.uname().release) < (5, 17),
                    reason="syncfs is used from Linux 5.17")
def test_the_system_call(tmp_path: Path) -> None:
    assert SYSTEM_IO.syncfs is syncfs_module.SYSCALL is not None
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY)
    try:
        os.write(fd, b"x")
        syncfs_module.SYSCALL(fd)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as info:
        syncfs_module.SYSCALL(fd)  # closed
    assert info.value.errno == errno.EBADF


@pytest.mark.parametrize(("release", "version"), [
    ("6.18.44-fc-v657", (6, 18)), ("5.8.0", (5, 8)), ("5.4.0-150-generic", (5, 4)), ("4.19.0+", (4, 19)),
    ("5.10rc1", (5, 10)), ("weird", (0, 0)),
])
def test_kernel_versions(release: str, version: tuple[int, int]) -> None:
    assert syncfs_module._kernel_version(release) == version


def test_the_option() -> None:
    assert load_config([], {}).fsync_method == "auto"
    assert load_config(["--fsync-method", "fsync"], {}).fsync_method == "fsync"
    assert load_config([], {"COORDINATOR_FSYNC_METHOD": "fsync"}).fsync_method == "fsync"
    with pytest.raises(SystemExit):
        load_config(["--fsync-method", "sometimes"], {})
