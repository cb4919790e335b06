"""The one group-commit writer (storage/group_commit.py): offsets in completions, leader epochs stamped
into batch headers, one failure semantics for topic partitions as for `__consumer_offsets`."""
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
from kafka.record.default_records import DefaultRecordBatchBuilder

from coordinator_server.config import FsyncPolicy
from coordinator_server.group.records import OffsetCommitRecord, OffsetCommitValue
from coordinator_server.storage import CoordinatorLog, FileIO, StorageError
from coordinator_server.storage.batch import BatchInfo
from coordinator_server.storage.group_commit import Appended, GroupCommitWriter, Target
from coordinator_server.storage.log import DefaultRecordBatch, PartitionLog
from coordinator_server.storage.segment import RECOVERY_POINT_FILE
from coordinator_server.topics.partition import AppendResult, Partition

ALWAYS = FsyncPolicy("always")


def commit(group: str, seq: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(group, "t", 0, OffsetCommitValue(seq, -1, "", 1_000 + seq, -1))


def produced(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def headers(plog: PartitionLog) -> list[BatchInfo]:
    return list(plog.batch_infos())


class FailingFsyncIO(FileIO):
    def __init__(self) -> None:
        super().__init__(fsync=self._fsync)
        self.fail = False
        self.file_fsyncs = 0

    def _fsync(self, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            self.file_fsyncs += 1
            if self.fail:
                raise OSError(errno.EIO, "Input/output error")
        os.fsync(fd)


async def test_coordinator_log_completions_report_each_batchs_offsets(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS)
    done: list[tuple[int, Appended]] = []
    sizes = [1, 3, 2, 1]
    for i, n in enumerate(sizes):
        assert log.submit_batch(i % 2, [commit("g", i * 10 + k) for k in range(n)], 1,
                                lambda a, i=i: done.append((i, a)))
    while len(done) < len(sizes):
        await asyncio.sleep(0.001)
    # Partition 0 got batches 0 and 2 (1 then 2 records), partition 1 batches 1 and 3 (3 then 1).
    assert done == [(0, Appended(0, 0)), (1, Appended(0, 2)), (2, Appended(1, 2)), (3, Appended(3, 3))]
    await log.close()


async def test_coordinator_batches_carry_the_leader_epoch_and_stay_valid(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    await log.append(0, [commit("g", 0)], 1)  # the default: epoch 0, as every batch before epochs
    await log.append(0, [commit("g", 1), commit("g", 2)], 2, leader_epoch=7)
    await log.close()
    # Without a recovery point the next open scans the whole partition: every CRC and record checked.
    (tmp_path / "__consumer_offsets-0" / RECOVERY_POINT_FILE).unlink()
    plog = PartitionLog.open(tmp_path, 0)
    assert [(h.base_offset, h.last_offset, h.leader_epoch) for h in headers(plog)] == [(0, 0, 0), (1, 2, 7)]
    plog.close()
    reopened = CoordinatorLog.open(tmp_path, 1, ALWAYS)
    assert [r.value.offset for r in reopened.replay(0) if isinstance(r, OffsetCommitRecord) and r.value] == [0, 1, 2]
    await reopened.close()


def test_topic_batches_are_stamped_with_the_epoch_outside_the_crc(tmp_path: Path) -> None:
    part = Partition.open("t", 0, tmp_path / "t-0", 1 << 20)
    assert part.append(produced([b"a", b"b"]), 1 << 20).base_offset == 0
    assert part.append(produced([b"c"]), 1 << 20, leader_epoch=12).base_offset == 2
    raws = [part.log.batch_at(0), part.log.batch_at(2)]
    assert [BatchInfo.parse(r).leader_epoch for r in raws if r is not None] == [0, 12]
    assert all(r is not None and DefaultRecordBatch(r).validate_crc() for r in raws)
    part.close()
    (tmp_path / "t-0" / RECOVERY_POINT_FILE).unlink()  # so recovery scans and checks every CRC
    again = Partition.open("t", 0, tmp_path / "t-0", 1 << 20)
    assert [h.leader_epoch for h in headers(again.log)] == [0, 12]
    again.close()


async def test_topic_appends_through_the_writer_report_offsets_and_complete_after_the_fsync(tmp_path: Path) -> None:
    io = FailingFsyncIO()
    part = Partition.open("t", 0, tmp_path / "t-0", 1 << 20, io)
    writer = GroupCommitWriter(ALWAYS, "test_writer")
    results: list[Appended] = []
    prepared = [part.prepare(produced([b"x"] * n), 1 << 20) for n in (2, 1, 3)]
    offsets = []
    for p in prepared:
        assert not isinstance(p, AppendResult)
        offsets.append(writer.submit(part.target, lambda p=p: part.write(p, leader_epoch=3), results.append))
    assert offsets == [(0, 1), (2, 2), (3, 5)]  # known at once: written on submit
    assert io.file_fsyncs == 0 and not results  # durable only after the round's fsync
    while len(results) < 3:
        await asyncio.sleep(0.001)
    assert results == [Appended(0, 1), Appended(2, 2), Appended(3, 5)]
    assert io.file_fsyncs == 1  # one round, one fsync
    assert {h.leader_epoch for h in headers(part.log)} == {3}
    await writer.close([part.target])
    part.close()


async def test_a_failed_topic_fsync_fences_the_partition_as_the_coordinator_log_does(tmp_path: Path) -> None:
    io = FailingFsyncIO()
    part = Partition.open("t", 0, tmp_path / "t-0", 1 << 20, io)
    writer = GroupCommitWriter(ALWAYS, "test_writer")
    got: list[Appended] = []
    p = part.prepare(produced([b"a"]), 1 << 20)
    assert not isinstance(p, AppendResult)
    io.fail = True
    assert writer.submit(part.target, lambda: part.write(p), got.append) == (0, 0)
    while not got:
        await asyncio.sleep(0.001)
    assert got[0].base_offset == 0 and got[0].error is not None and got[0].error.errno == errno.EIO
    assert part.failed is not None and "until the server restarts" in part.failed
    io.fail = False
    with pytest.raises(StorageError, match="until the server restarts"):
        writer.submit(part.target, lambda: part.write(p), got.append)
    assert part.append(produced([b"b"]), 1 << 20).error.name == "KAFKA_STORAGE_ERROR"
    results = await writer.close([part.target])
    assert results[part.target] is part.target.fenced  # not fsynced again: that could not be trusted
    part.close()


async def test_a_failed_write_raises_from_submit_and_queues_nothing(tmp_path: Path) -> None:
    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    part = Partition.open("t", 0, tmp_path / "t-0", 1 << 20, FileIO(pwrite=failing_pwrite))
    writer = GroupCommitWriter(ALWAYS, "test_writer")
    p = part.prepare(produced([b"a"]), 1 << 20)
    assert not isinstance(p, AppendResult)
    with pytest.raises(StorageError) as info:
        writer.submit(part.target, lambda: part.write(p), lambda a: pytest.fail("completed"))
    assert info.value.errno == errno.ENOSPC
    assert part.log_end_offset == 0 and part.target.fenced is None  # the partition itself is fine
    await writer.close([part.target])
    part.close()


class GatedFsyncIO(FileIO):
    """File fsyncs wait at a gate (set from the test) so one can be held in flight."""

    def __init__(self) -> None:
        super().__init__(fsync=self._fsync)
        self.gate = threading.Event()
        self.in_fsync = threading.Event()

    def _fsync(self, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            self.in_fsync.set()
            self.gate.wait(timeout=10)
        os.fsync(fd)


async def test_a_truncation_waits_for_queued_fsyncs_so_none_undoes_it(tmp_path: Path) -> None:
    io = GatedFsyncIO()
    plog = PartitionLog.open(tmp_path, 0, segment_bytes=300, file_io=io)
    target = Target("__consumer_offsets-0", plog, kind="log", fields={"partition": 0})
    writer = GroupCommitWriter(ALWAYS, "test_writer")
    done: list[Appended] = []
    for i in range(12):  # rolls several segments: the round's plan carries a recovery-point checkpoint
        writer.submit(target, functools.partial(_append, plog, i), done.append)
    while not io.in_fsync.is_set():  # the round's fsync is in flight, its checkpoint not yet written
        await asyncio.sleep(0.001)
    truncation = asyncio.create_task(writer.truncate(target, 1))
    await asyncio.sleep(0.02)
    assert not truncation.done()  # waits for the fsync queued before it
    io.gate.set()
    assert await truncation == 1
    assert [a.error for a in done] == [None] * 12
    lines = (tmp_path / "__consumer_offsets-0" / RECOVERY_POINT_FILE).read_text().split()
    assert int(lines[1]) == 0  # the round's checkpoint ran before the cut, not after it
    await writer.close([target])
    plog.close(clean=False)
    again = PartitionLog.open(tmp_path, 0, segment_bytes=300)
    assert again.next_offset == 1 and len(again.segments) == 1
    again.close()


def _append(plog: PartitionLog, i: int) -> tuple[int, int]:
    base = plog.append([(b"k%d" % i, b"v" * 60)], 1)
    return base, plog.next_offset - 1
