"""Recovery scans only what the recovery point does not cover; offset index lookups; time-based roll."""
from __future__ import annotations

import os
from pathlib import Path

from structlog.testing import capture_logs

from coordinator_server.storage import PartitionLog
from coordinator_server.storage.index import ENTRY

P = 0


def pdir(tmp_path: Path) -> Path:
    return tmp_path / f"__consumer_offsets-{P}"


def fill(tmp_path: Path, n: int, segment_bytes: int = 2_000, clean: bool = True) -> PartitionLog:
    log = PartitionLog.open(tmp_path, P, segment_bytes, index_interval_bytes=200)
    for i in range(n):
        log.append([(b"k%d" % i, b"v" * 30)], 1_000 + i)
    log.sync()
    log.close(clean=clean)
    return log


def test_clean_shutdown_trusts_every_segment(tmp_path: Path) -> None:
    fill(tmp_path, 100)
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert log.recovery_stats.scanned == 0 and log.recovery_stats.trusted == len(log.segments) > 3
    assert [r.offset for r in log.read()] == list(range(100))
    assert log.append([(b"x", b"y")], 5) == 100
    log.close()


def test_after_a_crash_only_segments_past_the_recovery_point_are_scanned(tmp_path: Path) -> None:
    fill(tmp_path, 100, clean=False)
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert log.recovery_stats.scanned == 1  # the active segment; the rolled ones were checkpointed
    assert [r.offset for r in log.read()] == list(range(100))
    log.close(clean=False)


def test_no_checkpoint_scans_everything_and_a_bad_index_is_rebuilt(tmp_path: Path) -> None:
    fill(tmp_path, 100)
    (pdir(tmp_path) / "recovery-point.checkpoint").unlink()
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert log.recovery_stats.trusted == 0
    log.close()
    index = sorted(pdir(tmp_path).glob("*.index"))[0]
    index.write_bytes(b"\x00" * (ENTRY.size * 3))  # torn: not strictly increasing
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert log.recovery_stats.scanned == 1 and len(index.read_bytes()) > ENTRY.size
    assert [r.offset for r in log.read()] == list(range(100))
    log.close()


def test_reads_at_any_offset_seek_through_the_index(tmp_path: Path) -> None:
    fill(tmp_path, 100)
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert all(os.path.getsize(p.with_suffix(".index")) > 0 for p in log.segments[:-1])
    for offset in (0, 1, 37, 38, 63, 99):
        batch = log.batch_at(offset)
        assert batch is not None and int.from_bytes(batch[:8], "big") == offset
        assert int.from_bytes(log.read_batches(offset, 1)[:8], "big") == offset  # min_one
    assert log.batch_at(100) is None and log.read_batches(100, 10_000) == b""
    assert log.first_batch_with_timestamp(1_050) == 50
    assert log.max_timestamp_offset() == (99, 1_099)
    log.close()


def test_sealed_segments_keep_no_index_in_memory(tmp_path: Path) -> None:
    fill(tmp_path, 100)
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert [s.index.in_memory for s in log._segments] == [False] * (len(log.segments) - 1) + [True]
    log.close()


def test_segment_rolls_by_time_from_its_first_batch(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, P, segment_ms=1_000)
    log.append([(b"a", b"1")], 10_000)
    log.append([(b"b", b"2")], 11_000)  # exactly segment_ms later: no roll yet
    log.append([(b"c", b"3")], 11_001)
    assert [p.name[:20] for p in log.segments] == [f"{0:020d}", f"{2:020d}"]
    log.close()


def test_torn_tail_after_a_clean_restart_and_more_appends_is_still_truncated(tmp_path: Path) -> None:
    fill(tmp_path, 10)
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    log.append([(b"more", b"x" * 30)], 9)
    log.sync()
    log.close(clean=False)
    last = log.segments[-1]
    os.truncate(last, last.stat().st_size - 3)
    with capture_logs() as logs:
        log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert [e["event"] for e in logs if e["event"] == "torn_tail_truncated"] == ["torn_tail_truncated"]
    assert log.next_offset == 10
    log.close()


def test_trusted_segments_are_not_read_at_open_only_at_replay(tmp_path: Path) -> None:
    from coordinator_server.storage import CorruptLogError

    fill(tmp_path, 100)
    first = sorted(pdir(tmp_path).glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[20] ^= 0x01  # the first batch's CRC, before the index's last entry: open must not look there
    first.write_bytes(bytes(data))
    log = PartitionLog.open(tmp_path, P, 2_000, index_interval_bytes=200)
    assert log.recovery_stats.scanned == 0
    try:
        list(log.read())
    except CorruptLogError as e:
        assert (e.path, e.position) == (first, 0)
    else:
        raise AssertionError("replay did not CRC-check the trusted segment")
    log.close()
