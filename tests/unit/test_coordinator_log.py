"""CoordinatorLog: group commit, fsync policies, failures, the data-directory lock and meta.properties."""
from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from coordinator_server.config import FsyncPolicy
from coordinator_server.group.records import (
    CoordinatorRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage import CoordinatorLog, CorruptLogError, FileIO, PartitionLog, StorageError

ALWAYS = FsyncPolicy("always")
NEVER = FsyncPolicy("never")


def commit(group: str, seq: int, topic: str = "t") -> OffsetCommitRecord:
    return OffsetCommitRecord(group, topic, 0, OffsetCommitValue(seq, -1, "", 1_000 + seq, -1))


class CountingIO(FileIO):
    """fsyncs counted (files and directories apart); optionally held at a gate, or failing."""

    def __init__(self) -> None:
        super().__init__(pwrite=self._pwrite, fsync=self._fsync)
        self.file_fsyncs = 0
        self.dir_fsyncs = 0
        self.gate: threading.Event | None = None
        self.in_fsync = threading.Event()
        self.fail_write_marker: bytes | None = None
        self.fail_fsync = False

    def _pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.fail_write_marker is not None and self.fail_write_marker in data:
            os.pwrite(fd, data[: len(data) // 2], offset)  # a partial batch, as on a full disk
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, offset)

    def _fsync(self, fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self.dir_fsyncs += 1
        else:
            self.file_fsyncs += 1
            self.in_fsync.set()
            if self.gate is not None:
                self.gate.wait(timeout=10)
            if self.fail_fsync:
                raise OSError(errno.EIO, "Input/output error")
        os.fsync(fd)


def replay_all(log: CoordinatorLog) -> dict[int, list[CoordinatorRecord]]:
    return {p: list(log.replay(p)) for p in range(log.partitions)}


async def test_group_commit_many_appends_few_fsyncs(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 4, ALWAYS, file_io=io)
    # Appends i go to partition i % 4; within a partition their call order is i's order.
    await asyncio.gather(*(log.append(i % 4, [commit(f"g{i % 4}", i)], 10_000 + i) for i in range(100)))
    assert io.file_fsyncs <= 8, io.file_fsyncs  # far fewer than 100
    await log.close()

    log = CoordinatorLog.open(tmp_path, 4, ALWAYS)
    for p, recs in replay_all(log).items():
        assert [r.value.offset for r in recs if isinstance(r, OffsetCommitRecord) and r.value] == \
            list(range(p, 100, 4))
    await log.close()


async def test_appends_arriving_during_a_fsync_share_the_next_one(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, file_io=io)
    io.gate = threading.Event()
    first = asyncio.create_task(log.append(0, [commit("g", 0)], 1))
    while not io.in_fsync.is_set():  # round 1 is now inside its fsync
        await asyncio.sleep(0.001)
    rest = [asyncio.create_task(log.append(0, [commit("g", i)], 1)) for i in range(1, 51)]
    await asyncio.sleep(0.01)
    assert not first.done() and not any(t.done() for t in rest)  # `always`: nobody resolved before fsync
    io.gate.set()
    await asyncio.gather(first, *rest)
    assert io.file_fsyncs == 2  # one for the first append, one for the 50 queued behind it
    await log.close()
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    assert [r.value.offset for r in log.replay(0) if isinstance(r, OffsetCommitRecord) and r.value] == \
        list(range(51))
    await log.close()


async def test_failed_write_fails_only_its_callers_and_log_stays_readable(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS, file_io=io)
    io.fail_write_marker = b"doomed"
    results = await asyncio.gather(
        *(log.append(i % 2, [commit("doomed" if i % 5 == 0 else "ok", i)], 1) for i in range(20)),
        return_exceptions=True,
    )
    failed = [i for i, r in enumerate(results) if r is not None]
    assert failed == [0, 5, 10, 15]
    for i in failed:
        err = results[i]
        assert isinstance(err, StorageError)
        assert err.errno == errno.ENOSPC
    io.fail_write_marker = None
    await log.append(0, [commit("after", 99)], 2)
    await log.close()

    with capture_logs() as logs:
        log = CoordinatorLog.open(tmp_path, 2, ALWAYS)
    assert not [e for e in logs if e["event"] == "torn_tail_truncated"]  # nothing partial was left
    got = replay_all(log)
    assert [r.value.offset for r in got[0] if isinstance(r, OffsetCommitRecord) and r.value] == \
        [2, 4, 6, 8, 12, 14, 16, 18, 99]
    assert [r.value.offset for r in got[1] if isinstance(r, OffsetCommitRecord) and r.value] == \
        [1, 3, 7, 9, 11, 13, 17, 19]
    await log.close()


async def test_failed_fsync_fails_callers_and_stops_that_partition(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS, file_io=io)
    await log.append(0, [commit("g", 0)], 1)
    io.fail_fsync = True
    with pytest.raises(StorageError) as info:
        await log.append(0, [commit("g", 1)], 1)
    assert info.value.errno == errno.EIO
    io.fail_fsync = False
    with pytest.raises(StorageError, match="until the server restarts"):
        await log.append(0, [commit("g", 2)], 1)
    await log.append(1, [commit("g", 3)], 1)  # other partitions carry on
    with pytest.raises(StorageError):
        await log.close()  # close reports that partition 0 was never made durable
    await CoordinatorLog.open(tmp_path, 2, ALWAYS).close()  # and the lock was released all the same


async def test_policy_never_does_not_fsync_until_close(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 3, NEVER, file_io=io)
    for i in range(10):
        await log.append(i % 3, [commit("g", i)], 1)
    assert io.file_fsyncs == 0
    await log.close()
    assert io.file_fsyncs == 3  # close fsyncs everything


async def test_policy_interval_resolves_before_fsync_then_fsyncs_in_background(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 2, FsyncPolicy("interval", 5), file_io=io)
    io.gate = threading.Event()  # any fsync would block: the append must not wait for one
    await log.append(0, [commit("g", 0)], 1)
    await log.append(0, [commit("g", 1)], 1)
    assert io.file_fsyncs == 0
    io.gate.set()
    for _ in range(1000):
        if io.file_fsyncs:
            break
        await asyncio.sleep(0.005)
    assert io.file_fsyncs == 1  # the one dirty partition, once
    await log.close()


async def test_close_waits_for_queued_appends(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    tasks = [asyncio.create_task(log.append(0, [commit("g", i)], 1)) for i in range(10)]
    await asyncio.sleep(0)  # let them queue
    await log.close()
    assert all(t.done() and t.exception() is None for t in tasks)
    with pytest.raises(StorageError, match="closed"):
        await log.append(0, [commit("g", 99)], 1)
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    assert len(list(log.replay(0))) == 10
    await log.close()


async def test_tombstones_and_group_records_replay(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    recs: list[CoordinatorRecord] = [
        GroupMetadataRecord("g", GroupMetadataValue("consumer", 1, "range", None, 5, ())),
        commit("g", 7),
        OffsetCommitRecord("g", "t", 0, None),
        GroupMetadataRecord("g", None),
    ]
    await log.append(0, recs[:2], 1)
    await log.append(0, recs[2:], 2)
    await log.close()
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    assert list(log.replay(0)) == recs
    await log.close()


async def test_unknown_record_types_are_skipped_with_a_warning(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    await log.append(0, [commit("g", 1)], 1)
    await log.close()
    plog = PartitionLog.open(tmp_path, 0)
    plog.append([(b"\x00\x0a\x00\x01x", b"\x00\x00")], 2)  # a KIP-932 share group record (key version 10)
    plog.close()
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    with capture_logs() as logs:
        assert list(log.replay(0)) == [commit("g", 1)]
    assert [(e["event"], e["partition"], e["offset"], e["key_version"]) for e in logs] == \
        [("unknown_record_type_skipped", 0, 1, 10)]
    assert logs[0]["record_type"] == "ShareGroupMemberMetadata"
    await log.close()


async def test_lock_prevents_a_second_open(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    with pytest.raises(StorageError, match="in use by another coordinator-server") as info:
        CoordinatorLog.open(tmp_path, 1, ALWAYS)
    assert str(os.getpid()) in str(info.value)
    await log.close()
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    await log.close()


async def test_recorded_partition_count_wins(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 4, ALWAYS)
    assert log.partitions == 4
    await log.close()
    assert "offsets.topic.num.partitions=4" in (tmp_path / "meta.properties").read_text()
    with capture_logs() as logs:
        log = CoordinatorLog.open(tmp_path, 8, ALWAYS)
    assert log.partitions == 4
    assert [(e["event"], e["configured"], e["recorded"]) for e in logs] == \
        [("offsets_partitions_flag_ignored", 8, 4)]
    with pytest.raises(ValueError):
        await log.append(4, [commit("g", 1)], 1)
    await log.close()
    assert sorted(p.name for p in tmp_path.glob("__consumer_offsets-*")) == [
        f"__consumer_offsets-{p}" for p in range(4)]


async def test_missing_meta_with_existing_partitions_refuses_to_guess(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS)
    await log.close()
    (tmp_path / "meta.properties").unlink()
    with pytest.raises(StorageError, match=r"meta\.properties is missing"):
        CoordinatorLog.open(tmp_path, 2, ALWAYS)
    (tmp_path / "meta.properties").write_text("offsets.topic.num.partitions=2\n")
    await CoordinatorLog.open(tmp_path, 2, ALWAYS).close()  # the failed open released the lock


async def test_corrupt_partition_refuses_to_open_and_releases_the_lock(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS)
    for i in range(3):
        await log.append(1, [commit("g", i)], 1)
    await log.close()
    segment = tmp_path / "__consumer_offsets-1" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's CRC-covered bytes; two good batches follow
    segment.write_bytes(bytes(data))
    (segment.parent / "recovery-point.checkpoint").unlink()  # as after a crash: the segment is scanned
    with pytest.raises(CorruptLogError) as info:
        CoordinatorLog.open(tmp_path, 2, ALWAYS)
    assert info.value.path == segment and info.value.position == 0
    with pytest.raises(CorruptLogError):  # not "in use": the failed open released the lock
        CoordinatorLog.open(tmp_path, 2, ALWAYS)


@pytest.mark.parametrize("replay", ["replay", "replay_latest"])
async def test_corruption_in_a_trusted_segment_fails_replay_naming_file_and_position(tmp_path: Path,
                                                                                      replay: str) -> None:
    # After a clean shutdown open trusts the segment and does not read it; replay CRC-checks each batch
    # it reads from a trusted segment, so damage there still refuses the start, at replay (both the full
    # replay and start-up's last-record-per-key one).
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    for i in range(3):
        await log.append(0, [commit("g", i)], 1)
    await log.close()
    segment = tmp_path / "__consumer_offsets-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = int.from_bytes(data[8:12], "big") + 12
    data[second + 70] ^= 0xFF
    segment.write_bytes(bytes(data))
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    with pytest.raises(CorruptLogError, match="CRC32C mismatch") as info:
        list(getattr(log, replay)(0))
    assert (info.value.path, info.value.position) == (segment, second)
    await log.close()


async def test_batch_over_message_max_bytes_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    from coordinator_server.group.records import GroupMetadataValue, MemberRecord
    from coordinator_server.storage import RecordTooLargeError

    clog = CoordinatorLog.open(tmp_path, 1, FsyncPolicy("always"), max_batch_bytes=10_000)
    member = MemberRecord("m", None, "c", "/127.0.0.1", 1000, 1000, b"", b"\x00" * 20_000)
    huge = GroupMetadataRecord("g", GroupMetadataValue("consumer", 1, "range", "m", -1, (member,)))
    with pytest.raises(RecordTooLargeError):
        await clog.append(0, [huge], 1)
    await clog.append(0, [commit("g", 1)], 1)  # the partition keeps working
    await clog.close()
    reopened = CoordinatorLog.open(tmp_path, 1, FsyncPolicy("always"))
    assert list(reopened.replay(0)) == [commit("g", 1)]
    await reopened.close()


class ConcurrentFsyncIO(FileIO):
    """Counts how many file fsyncs run at once; each waits (up to 5 s) for `expected` of them to be in."""

    def __init__(self, expected: int, fail_partition: int | None = None) -> None:
        super().__init__(fsync=self._fsync)
        self.expected = expected
        self.fail_partition = fail_partition
        self.active = 0
        self.most = 0
        self.cond = threading.Condition()

    def _fsync(self, fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.fsync(fd)
            return
        with self.cond:
            self.active += 1
            self.most = max(self.most, self.active)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.most >= self.expected, timeout=5)
        try:
            if self.fail_partition is not None and \
                    f"__consumer_offsets-{self.fail_partition}/" in os.readlink(f"/proc/self/fd/{fd}"):
                raise OSError(errno.EIO, "Input/output error")
            os.fsync(fd)
        finally:
            with self.cond:
                self.active -= 1


async def test_a_rounds_partitions_are_fsynced_at_once(tmp_path: Path) -> None:
    io = ConcurrentFsyncIO(expected=4)
    log = CoordinatorLog.open(tmp_path, 4, ALWAYS, file_io=io)
    # Queued in one loop iteration: one round, four partitions.
    await asyncio.gather(*(log.append(p, [commit(f"g{p}", p)], 1) for p in range(4)))
    assert io.most == 4
    await log.close()


async def test_a_failed_fsync_in_a_concurrent_round_fails_only_that_partitions_appends(tmp_path: Path) -> None:
    io = ConcurrentFsyncIO(expected=3, fail_partition=1)
    log = CoordinatorLog.open(tmp_path, 3, ALWAYS, file_io=io)
    results = await asyncio.gather(*(log.append(i % 3, [commit("g", i)], 1) for i in range(9)),
                                   return_exceptions=True)
    assert io.most == 3
    assert [i for i, r in enumerate(results) if isinstance(r, StorageError)] == [1, 4, 7]
    assert all(r is None for i, r in enumerate(results) if i % 3 != 1)
    with pytest.raises(StorageError, match="until the server restarts"):
        await log.append(1, [commit("g", 10)], 1)
    with pytest.raises(StorageError):
        await log.close()  # partition 1 was never made durable


async def test_submit_calls_back_in_order_once_durable_and_survives_a_failing_callback(tmp_path: Path) -> None:
    io = CountingIO()
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS, file_io=io)
    calls: list[tuple[int, StorageError | None, int]] = []

    def on_done(i: int) -> Callable[[StorageError | None], None]:
        def done(error: StorageError | None) -> None:
            calls.append((i, error, io.file_fsyncs))
            if i == 1:
                raise RuntimeError("a bug in a caller")
        return done

    with capture_logs() as logs:
        assert [log.submit(i % 2, [commit("g", i)], 1, on_done(i)) for i in range(4)] == [True] * 4
        assert log.submit(0, [], 1, on_done(99)) is False  # nothing to write: never called back
        while len(calls) < 4:
            await asyncio.sleep(0.001)
    assert [(i, e) for i, e, _ in calls] == [(0, None), (1, None), (2, None), (3, None)]
    assert all(fsyncs == 2 for _, _, fsyncs in calls)  # after both partitions' fsyncs, not before
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["coordinator_log_append_callback_failed"]
    await log.close()
    with pytest.raises(StorageError, match="closed"):
        log.submit(0, [commit("g", 5)], 1, on_done(5))


class WriteCountingIO(CountingIO):
    def __init__(self) -> None:
        super().__init__()
        self.pwrites = 0
        self._count = self._pwrite
        object.__setattr__(self, "pwrite", self._counting_pwrite)

    def _counting_pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.pwrites += 1
        return self._count(fd, data, offset)


async def wait_until(cond: Callable[[], bool]) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition not reached")


async def test_the_next_round_is_written_while_a_round_is_fsynced_and_completes_after_it(tmp_path: Path) -> None:
    io = WriteCountingIO()
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS, file_io=io)
    io.gate = threading.Event()
    first = asyncio.create_task(log.append(0, [commit("g", 0)], 1))
    await wait_until(io.in_fsync.is_set)  # round 1 is inside its fsync
    second = asyncio.create_task(log.append(0, [commit("g", 1)], 1))
    other = asyncio.create_task(log.append(1, [commit("h", 2)], 1))
    await wait_until(lambda: io.pwrites == 3)  # round 2 is written meanwhile...
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done() and not other.done()  # ...and nothing resolved early
    io.gate.set()
    await asyncio.gather(first, second, other)
    assert io.file_fsyncs == 3  # round 1: partition 0; round 2: partitions 0 and 1
    await log.close()


async def test_a_failed_fsync_fails_the_next_round_already_written_to_that_partition(tmp_path: Path) -> None:
    io = WriteCountingIO()
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS, file_io=io)
    io.gate = threading.Event()
    first = asyncio.create_task(log.append(0, [commit("g", 0)], 1))
    await wait_until(io.in_fsync.is_set)
    second = asyncio.create_task(log.append(0, [commit("g", 1)], 1))
    await wait_until(lambda: io.pwrites == 2)  # written before round 1's fsync fails
    io.fail_fsync = True
    io.gate.set()
    with pytest.raises(StorageError) as info:
        await first
    assert info.value.errno == errno.EIO
    fsyncs = io.file_fsyncs
    with pytest.raises(StorageError, match="until the server restarts"):
        await second  # its own fsync would not prove anything: not trusted
    assert io.file_fsyncs == fsyncs  # and not even tried
    io.fail_fsync = False
    await log.append(1, [commit("h", 2)], 1)  # other partitions carry on
    with pytest.raises(StorageError):
        await log.close()
