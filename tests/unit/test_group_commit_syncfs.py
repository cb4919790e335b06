"""A group-commit round over many partitions of one filesystem is made durable by one syncfs(2) instead of
one fsync per partition (storage/syncfs.py), with the same completion order and failure semantics: a failed
syncfs fences every partition it covered."""
from __future__ import annotations

import asyncio
import errno
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

    def _fsync(self, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            with self.lock:
                object.__setattr__(self, "file_fsyncs", self.file_fsyncs + 1)
        os.fsync(fd)

    def _syncfs(self, fd: int) -> None:
        with self.lock:
            self.syncfs_fds.append(fd)
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


async def test_plans_are_grouped_by_filesystem(tmp_path: Path) -> None:
    io = SyncfsIO()
    logs = [PartitionLog.open(tmp_path, p, file_io=io) for p in range(2 * SYNCFS_MIN_PARTITIONS)]
    for plog in logs[SYNCFS_MIN_PARTITIONS:]:
        plog.device += 1_000_000  # as if the second half lay on another filesystem
    targets = [Target(f"p{i}", plog, kind="log", fields={"partition": i}) for i, plog in enumerate(logs)]
    writer = GroupCommitWriter(ALWAYS, "test")
    for plog in logs:
        plog.append([(b"k", b"v")], 1)
    assert await writer.flush(targets) == dict.fromkeys(targets)
    assert (len(io.syncfs_fds), io.file_fsyncs) == (2, 0)  # one syncfs per filesystem
    await writer.close([])
    for plog in logs:
        plog.close()


@pytest.mark.skipif(sys.platform != "linux" or syncfs_module._kernel_version(os.uname().release) < (5, 8),
                    reason="syncfs reports write-back errors from Linux 5.8")
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
