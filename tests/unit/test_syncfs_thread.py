"""The group-commit writer's syncfs thread (storage/syncfs_thread.py): syncfs(2) on a C thread that never takes
the GIL, answering through an eventfd; rounds over it complete in order with the Python sync thread's, and
a failed syncfs fences every partition it covered, as on the Python path."""
from __future__ import annotations

import asyncio
import errno
import functools
import os
import select
from pathlib import Path

import pytest

from coordinator_server.config import FsyncPolicy
from coordinator_server.storage import PartitionLog, StorageError, group_commit
from coordinator_server.storage import syncfs as syncfs_module
from coordinator_server.storage.group_commit import SYNCFS_MIN_PARTITIONS, GroupCommitWriter, Target
from coordinator_server.storage.log import SYSTEM_IO
from coordinator_server.storage.segment import read_recovery_point
from coordinator_server.storage.syncfs_thread import SyncfsThread
from tests.unit.test_group_commit_syncfs import close_all, open_targets, write_one

pytestmark = pytest.mark.skipif(SyncfsThread is None or syncfs_module.SYSCALL is None,
                                reason="the C extension is not built (COORDINATOR_PURE_PYTHON) or no syncfs")

ALWAYS = FsyncPolicy("always")
BAD_FD = 1 << 30  # above any descriptor limit: syncfs answers EBADF


def answered(thread: SyncfsThread, number: int) -> tuple[int, int, int]:
    """Wait for the eventfd until request `number` is answered; (synced, answered, errno)."""
    while True:
        select.select([thread.fileno()], [], [], 5)
        synced, done, err = thread.completed()
        if done >= number:
            return synced, done, err


def test_requests_are_answered_through_the_eventfd(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    thread = SyncfsThread(fd)
    try:
        assert thread.completed() == (0, 0, 0)
        first = thread.request()
        assert answered(thread, first) == (first, first, 0)
        numbers = [thread.request() for _ in range(5)]  # made together: covered by one or two syncfs
        assert numbers == list(range(first + 1, first + 6))
        assert answered(thread, numbers[-1]) == (numbers[-1], numbers[-1], 0)
    finally:
        thread.close()
        os.close(fd)
    with pytest.raises(RuntimeError):
        thread.request()
    thread.close()  # twice is fine


def test_the_first_failure_is_sticky() -> None:
    thread = SyncfsThread(BAD_FD)
    try:
        first = thread.request()
        assert answered(thread, first) == (0, first, errno.EBADF)
        # Every later request is answered with it too: a syncfs after a failed write-back could report
        # success for pages the kernel dropped.
        second = thread.request()
        assert answered(thread, second) == (0, second, errno.EBADF)
    finally:
        thread.close()


async def submit_all(writer: GroupCommitWriter, targets: list[Target],
                     order: list[str] | None = None, tag: str = "") -> list[StorageError | None]:
    """One append to each target, queued in one loop iteration (one round); each one's error or None."""
    loop = asyncio.get_running_loop()
    futures = []
    for t in targets:
        future: asyncio.Future[StorageError | None] = loop.create_future()

        def done(appended, future=future, name=t.name):  # type: ignore[no-untyped-def]
            if order is not None:
                order.append(f"{tag}{name}")
            future.set_result(appended.error)

        writer.submit(t, functools.partial(write_one, t.log), done)
        futures.append(future)
    return list(await asyncio.gather(*futures))


async def test_a_round_of_data_only_is_synced_by_the_thread_and_counts_as_synced(tmp_path: Path) -> None:
    targets = open_targets(tmp_path, SYSTEM_IO, SYNCFS_MIN_PARTITIONS + 2)
    writer = GroupCommitWriter(ALWAYS, "test")
    assert await submit_all(writer, targets) == [None] * len(targets)  # the first: new segment files
    assert await submit_all(writer, targets) == [None] * len(targets)
    assert len(writer._syncfs_threads) == 1
    assert all(t.log.only_data_unsynced() for t in targets)
    await writer.close([])
    for t in targets:
        t.log.close()  # every write marked synced: a clean shutdown mark
    reopened = [PartitionLog.open(tmp_path, p) for p in range(len(targets))]
    assert [[r.offset for r in plog.read()] for plog in reopened] == [[0, 1]] * len(targets)
    for plog in reopened:
        plog.close()


async def test_rounds_complete_in_order_across_the_two_sync_paths(tmp_path: Path) -> None:
    # Segments of ~one batch: every append rolls, so those partitions take the Python path (their recovery
    # point is written after the sync); the others are data only.
    rolling = open_targets(tmp_path / "rolling", SYSTEM_IO, SYNCFS_MIN_PARTITIONS, segment_bytes=100)
    plain = open_targets(tmp_path / "plain", SYSTEM_IO, SYNCFS_MIN_PARTITIONS)
    for t in rolling:
        t.name = "r" + t.name
    writer = GroupCommitWriter(ALWAYS, "test")
    assert await submit_all(writer, plain + rolling) == [None] * (2 * SYNCFS_MIN_PARTITIONS)
    order: list[str] = []
    rounds = []
    for tag, targets in (("1", plain), ("2", rolling), ("3", plain), ("4", rolling)):
        rounds.append(asyncio.ensure_future(submit_all(writer, targets, order, tag)))
        await asyncio.sleep(0)
        while writer._pending:  # the writer takes these appends as a round of their own, while the round
            await asyncio.sleep(0)  # before it may still be syncing (~1 ms a syncfs) on the other path
    assert [await r for r in rounds] == [[None] * SYNCFS_MIN_PARTITIONS] * 4
    assert writer.rounds == 5
    assert [name[0] for name in order] == sorted(name[0] for name in order)  # round by round
    points = [read_recovery_point(t.log.directory) for t in rolling]
    assert all(p is not None and p.offset >= 2 for p in points), points
    await close_all(writer, plain + rolling)


async def test_a_failed_syncfs_on_the_thread_fences_the_round_and_the_filesystem_falls_back(tmp_path: Path) -> None:
    targets = open_targets(tmp_path, SYSTEM_IO, 2 * SYNCFS_MIN_PARTITIONS)
    writer = GroupCommitWriter(ALWAYS, "test")
    assert await submit_all(writer, targets) == [None] * len(targets)  # new files: the Python path
    device = targets[0].log.device
    good = writer._syncfs_fds[device]
    writer._syncfs_fds[device] = BAD_FD  # the thread's syncfs fails, as on a lost write-back
    results = await submit_all(writer, targets[:SYNCFS_MIN_PARTITIONS])
    assert all(isinstance(e, StorageError) and e.errno == errno.EBADF and "syncfs covering" in str(e)
               for e in results), results
    writer._syncfs_fds[device] = good
    for t in targets[:SYNCFS_MIN_PARTITIONS]:  # fenced until a restart
        with pytest.raises(StorageError, match="until the server restarts"):
            writer.submit(t, functools.partial(write_one, t.log), lambda appended: None)
    # The partitions the failed round did not cover still take appends, fsynced one by one from now on.
    assert await submit_all(writer, targets[SYNCFS_MIN_PARTITIONS:]) == [None] * SYNCFS_MIN_PARTITIONS
    assert device in writer._syncfs_failed
    await writer.close([])
    for t in targets:
        t.log.close()


async def test_a_filesystem_whose_thread_cannot_start_keeps_the_python_path(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    class Refused:
        def __init__(self, fd: int) -> None:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(group_commit, "SyncfsThread", Refused)
    targets = open_targets(tmp_path, SYSTEM_IO, SYNCFS_MIN_PARTITIONS)
    writer = GroupCommitWriter(ALWAYS, "test")
    for _ in range(3):
        assert await submit_all(writer, targets) == [None] * SYNCFS_MIN_PARTITIONS
    assert writer._syncfs_threads == {targets[0].log.device: None}
    await close_all(writer, targets)
