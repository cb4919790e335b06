"""PartitionLog: Kafka segment layout, round trip across rolls, and recovery (torn tail vs corruption)."""
from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from coordinator_server.storage.errors import CorruptLogError
from coordinator_server.storage.log import DefaultRecordBatch, FileIO, LogRecord, PartitionLog

P = 7


def pdir(tmp_path: Path) -> Path:
    return tmp_path / f"__consumer_offsets-{P}"


def seg(tmp_path: Path, base: int = 0) -> Path:
    return pdir(tmp_path) / f"{base:020d}.log"


def write_batches(tmp_path: Path, n: int, segment_bytes: int = 104_857_600) -> list[tuple[int, int]]:
    """n batches of 2 records each; returns each batch's (start, end) byte positions in segment 0."""
    log = PartitionLog.open(tmp_path, P, segment_bytes)
    spans = []
    for i in range(n):
        start = os.path.getsize(seg(tmp_path))
        log.append([(b"k%d" % i, b"value-%d" % i), (b"t%d" % i, None)], timestamp_ms=1_000 + i)
        spans.append((start, os.path.getsize(seg(tmp_path))))
    log.sync()
    log.close(clean=False)  # as after a crash: the next open scans the segment
    return spans


def read_all(tmp_path: Path, segment_bytes: int = 104_857_600) -> list[LogRecord]:
    log = PartitionLog.open(tmp_path, P, segment_bytes)
    try:
        return list(log.read())
    finally:
        log.close()


def expected_records(n: int) -> list[LogRecord]:
    out = []
    for i in range(n):
        out.append(LogRecord(2 * i, 1_000 + i, b"k%d" % i, b"value-%d" % i))
        out.append(LogRecord(2 * i + 1, 1_000 + i, b"t%d" % i, None))
    return out


def test_new_log_is_one_empty_kafka_named_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P)
    assert log.next_offset == 0
    assert list(log.read()) == []
    log.close()
    assert sorted(p.name for p in pdir(tmp_path).iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log", "recovery-point.checkpoint"]


def test_batches_are_kafka_v2_batches(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P)
    assert log.append([(b"a", b"1")], timestamp_ms=5) == 0
    assert log.append([(b"b", b"2"), (b"c", None)], timestamp_ms=6) == 1
    log.close()
    data = seg(tmp_path).read_bytes()
    first_len = struct.unpack_from(">i", data, 8)[0] + 12
    second = DefaultRecordBatch(data[first_len:])
    assert second.base_offset == 1  # set by the log: the builder leaves 0
    assert second.magic == 2
    assert second.validate_crc()
    assert (second.producer_id, second.is_transactional, second.compression_type) == (-1, False, 0)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in second] == [(1, 6, b"b", b"2"), (2, 6, b"c", None)]


def test_round_trip_across_segment_roll_and_reopen(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P, segment_bytes=300)
    bases = [log.append([(b"k%d" % i, b"v" * 40), (b"t%d" % i, None)], 1_000 + i) for i in range(10)]
    assert bases == list(range(0, 20, 2))
    log.sync()
    log.close()
    names = sorted(p.name for p in pdir(tmp_path).glob("*.log"))
    assert len(names) > 2
    assert names[0] == "00000000000000000000.log"
    # Each segment is named after the offset of its first batch, and none grows past segment_bytes.
    for name in names:
        path = pdir(tmp_path) / name
        assert path.stat().st_size <= 300
        if path.stat().st_size:
            assert DefaultRecordBatch(path.read_bytes()).base_offset == int(name[:20])

    log = PartitionLog.open(tmp_path, P, segment_bytes=300)
    assert log.next_offset == 20
    recs = list(log.read())
    assert [r.offset for r in recs] == list(range(20))
    assert recs[1] == LogRecord(1, 1_000, b"t0", None)  # tombstone keeps its null value
    assert log.append([(b"more", b"x")], 2_000) == 20
    log.close()
    assert read_all(tmp_path, 300)[-1] == LogRecord(20, 2_000, b"more", b"x")


def test_tombstone_survives_round_trip(tmp_path: Path) -> None:
    write_batches(tmp_path, 3)
    assert read_all(tmp_path) == expected_records(3)


def test_empty_append_is_refused(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P)
    with pytest.raises(ValueError):
        log.append([], 0)
    log.close()


# --- torn tails: truncated with a warning, and the log goes on ---

def _assert_torn_tail_recovered(tmp_path: Path, good_end: int, torn_bytes: int, batches: int) -> None:
    with capture_logs() as logs:
        log = PartitionLog.open(tmp_path, P)
    warnings = [e for e in logs if e["event"] == "torn_tail_truncated"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["file"] == str(seg(tmp_path))
    assert warnings[0]["position"] == good_end
    assert warnings[0]["bytes"] == torn_bytes
    assert os.path.getsize(seg(tmp_path)) == good_end
    assert log.next_offset == 2 * batches
    assert log.append([(b"after", b"recovery")], 9_999) == 2 * batches
    log.close()
    assert read_all(tmp_path) == [*expected_records(batches), LogRecord(2 * batches, 9_999, b"after", b"recovery")]


@pytest.mark.parametrize("cut", [1, 12, 60, 61, -1])
def test_torn_tail_cut_mid_batch(tmp_path: Path, cut: int) -> None:
    spans = write_batches(tmp_path, 3)
    start, end = spans[-1]
    keep = start + cut if cut > 0 else end + cut
    os.truncate(seg(tmp_path), keep)
    _assert_torn_tail_recovered(tmp_path, good_end=start, torn_bytes=keep - start, batches=2)


def test_torn_tail_garbage_appended(tmp_path: Path) -> None:
    spans = write_batches(tmp_path, 3)
    garbage = bytes((i * 37 + 11) % 256 for i in range(500))
    with open(seg(tmp_path), "ab") as f:
        f.write(garbage)
    _assert_torn_tail_recovered(tmp_path, good_end=spans[-1][1], torn_bytes=500, batches=3)


@pytest.mark.parametrize("zeros", [1, 61, 4096])
def test_torn_tail_zero_filled(tmp_path: Path, zeros: int) -> None:
    spans = write_batches(tmp_path, 3)
    with open(seg(tmp_path), "ab") as f:
        f.write(b"\x00" * zeros)
    _assert_torn_tail_recovered(tmp_path, good_end=spans[-1][1], torn_bytes=zeros, batches=3)


def test_torn_tail_last_batch_fails_crc(tmp_path: Path) -> None:
    spans = write_batches(tmp_path, 3)
    start, end = spans[-1]
    _flip_byte(seg(tmp_path), end - 3)
    _assert_torn_tail_recovered(tmp_path, good_end=start, torn_bytes=end - start, batches=2)


def test_torn_tail_in_last_of_several_segments(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P, segment_bytes=200)
    for i in range(6):
        log.append([(b"k%d" % i, b"v" * 40)], i)
    log.close(clean=False)
    last = sorted(pdir(tmp_path).glob("*.log"))[-1]
    size = last.stat().st_size
    os.truncate(last, size - 5)
    with capture_logs() as logs:
        log = PartitionLog.open(tmp_path, P, segment_bytes=200)
    assert [e["file"] for e in logs if e["event"] == "torn_tail_truncated"] == [str(last)]
    assert [r.key for r in log.read()] == [b"k%d" % i for i in range(5)]
    log.close()


# --- corruption: refuse to open, name the file and position, change nothing ---

def _flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


def _assert_corrupt(tmp_path: Path, path: Path, position: int, segment_bytes: int = 104_857_600) -> None:
    before = {p: p.read_bytes() for p in pdir(tmp_path).iterdir()}
    with pytest.raises(CorruptLogError) as info:
        PartitionLog.open(tmp_path, P, segment_bytes)
    err = info.value
    assert (err.path, err.position) == (path, position)
    assert str(path) in str(err)
    assert f"byte position {position}" in str(err)
    assert "Nothing was changed" in str(err)
    assert "move the segment aside" in str(err)
    assert {p: p.read_bytes() for p in pdir(tmp_path).iterdir()} == before


def test_corrupt_middle_batch_crc(tmp_path: Path) -> None:
    spans = write_batches(tmp_path, 3)
    start, _ = spans[1]
    _flip_byte(seg(tmp_path), start + 70)  # inside the CRC-covered part of batch 2, batch 3 is good
    _assert_corrupt(tmp_path, seg(tmp_path), start)


def test_corrupt_middle_batch_length_looks_torn_but_is_not(tmp_path: Path) -> None:
    # A damaged Length that runs past the end of the file: only the valid batch after it tells it apart
    # from a torn write.
    spans = write_batches(tmp_path, 3)
    start, _ = spans[1]
    data = bytearray(seg(tmp_path).read_bytes())
    struct.pack_into(">i", data, start + 8, 10_000)
    seg(tmp_path).write_bytes(bytes(data))
    _assert_corrupt(tmp_path, seg(tmp_path), start)


def test_corrupt_middle_magic(tmp_path: Path) -> None:
    spans = write_batches(tmp_path, 3)
    start, _ = spans[0]
    data = bytearray(seg(tmp_path).read_bytes())
    data[start + 16] = 1
    seg(tmp_path).write_bytes(bytes(data))
    _assert_corrupt(tmp_path, seg(tmp_path), start)


def test_base_offset_out_of_sequence_is_corruption(tmp_path: Path) -> None:
    # BaseOffset is outside the CRC, so only the offset check catches damage there, even at the tail.
    spans = write_batches(tmp_path, 3)
    start, _ = spans[2]
    data = bytearray(seg(tmp_path).read_bytes())
    struct.pack_into(">q", data, start, 77)
    seg(tmp_path).write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="base offset 77, expected 4"):
        PartitionLog.open(tmp_path, P)


def test_bad_batch_in_a_non_last_segment_is_corruption_even_at_its_end(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P, segment_bytes=200)
    for i in range(6):
        log.append([(b"k%d" % i, b"v" * 40)], i)
    log.close()
    first = seg(tmp_path)
    size = first.stat().st_size
    os.truncate(first, size - 5)  # would be a torn tail if it were the last segment
    last_start = size - struct.unpack_from(">i", first.read_bytes(), 8)[0] - 12
    _assert_corrupt(tmp_path, first, last_start if last_start > 0 else 0, segment_bytes=200)


def test_overlapping_segments_are_corruption(tmp_path: Path) -> None:
    write_batches(tmp_path, 2)
    (pdir(tmp_path) / f"{1:020d}.log").write_bytes(b"")
    with pytest.raises(CorruptLogError, match="before the end"):
        PartitionLog.open(tmp_path, P)


def test_segment_moved_aside_leaves_a_gap_that_still_opens(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P, segment_bytes=200)
    for i in range(6):
        log.append([(b"k%d" % i, b"v" * 40)], i)
    log.close()
    segments = sorted(pdir(tmp_path).glob("*.log"))
    assert len(segments) >= 3
    segments[1].rename(tmp_path / "aside.log")
    log = PartitionLog.open(tmp_path, P, segment_bytes=200)
    offsets = [r.offset for r in log.read()]
    assert offsets == sorted(offsets) and offsets[-1] == 5 and len(offsets) < 6
    log.close()


# --- failed writes leave no partial batch ---

class FailingIO(FileIO):
    """Writes half the batch, then fails like a full disk."""

    def __init__(self) -> None:
        super().__init__(pwrite=self._pwrite)
        object.__setattr__(self, "fail", False)

    def _pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.fail:  # type: ignore[attr-defined]
            os.pwrite(fd, data[: len(data) // 2], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, offset)


def test_failed_write_is_truncated_away(tmp_path: Path) -> None:
    io = FailingIO()
    log = PartitionLog.open(tmp_path, P, file_io=io)
    log.append([(b"a", b"1")], 1)
    size = os.path.getsize(seg(tmp_path))
    object.__setattr__(io, "fail", True)
    with pytest.raises(OSError) as info:
        log.append([(b"b", b"2" * 100)], 2)
    assert info.value.errno == errno.ENOSPC
    assert os.path.getsize(seg(tmp_path)) == size
    object.__setattr__(io, "fail", False)
    assert log.append([(b"c", b"3")], 3) == 1
    log.close()
    with capture_logs() as logs:
        assert read_all(tmp_path) == [LogRecord(0, 1, b"a", b"1"), LogRecord(1, 3, b"c", b"3")]
    assert not [e for e in logs if e["event"] == "torn_tail_truncated"]


def test_sync_fsyncs_rolled_segment_file_and_directories(tmp_path: Path) -> None:
    synced: list[str] = []

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)

    log = PartitionLog.open(tmp_path, P, segment_bytes=120, file_io=FileIO(fsync=fsync))
    log.append([(b"k", b"v" * 40)], 1)
    log.sync()
    assert set(synced) == {str(seg(tmp_path)), str(pdir(tmp_path)), str(tmp_path)}
    synced.clear()
    log.append([(b"k", b"v" * 40)], 2)  # rolls
    log.sync()
    assert synced == [str(seg(tmp_path)), str(seg(tmp_path, 1)), str(pdir(tmp_path))]
    synced.clear()
    log.sync()
    assert synced == [str(seg(tmp_path, 1))]
    log.close()
