"""repair-log on real damaged logs: bit flips, a bad length, a batch cut short, a corrupt middle segment."""
from __future__ import annotations

import argparse
import fcntl
import os
import struct
from pathlib import Path

import pytest

from coordinator_server.storage import CorruptLogError, PartitionLog
from coordinator_server.tools.repair_log import add_arguments, main, repair_log

P = 3
NOW_MS = 1_700_000_000_000


def pdir(tmp_path: Path) -> Path:
    return tmp_path / f"__consumer_offsets-{P}"


def build(tmp_path: Path, n: int = 6, segment_bytes: int = 100_000) -> list[tuple[Path, int, int]]:
    """n one-record batches; returns each batch's (segment, start, end). Closed as after a crash."""
    log = PartitionLog.open(tmp_path, P, segment_bytes)
    spans = []
    for i in range(n):
        log.append([(b"key-%d" % i, b"v" * 40)], 1_000 + i)
        seg = log.segments[-1]
        end = seg.stat().st_size
        spans.append((seg, end - _last_batch_size(seg), end))
    log.sync()
    log.close(clean=False)
    return spans


def _last_batch_size(seg: Path) -> int:
    data, pos, size = seg.read_bytes(), 0, 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        pos += size
    return size


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir()}


def test_good_log_reports_nothing_and_changes_nothing(tmp_path: Path) -> None:
    build(tmp_path)
    before = snapshot(pdir(tmp_path))
    report = repair_log(pdir(tmp_path), truncate=True)
    assert report.bad is None and report.batches_checked == 6 and not report.truncated
    assert snapshot(pdir(tmp_path)) == before


def test_bit_flip_in_the_middle_dry_run_reports_file_position_and_changes_nothing(tmp_path: Path) -> None:
    spans = build(tmp_path)
    seg, start, _ = spans[2]
    flip(seg, start + 40)
    before = snapshot(pdir(tmp_path))
    report = repair_log(pdir(tmp_path))
    assert report.bad is not None
    assert (report.bad.file, report.bad.position, report.bad.torn_tail) == (seg, start, False)
    assert "CRC32C mismatch" in report.bad.reason
    assert report.batches_checked == 2
    assert snapshot(pdir(tmp_path)) == before
    assert "dry run" in "\n".join(report.lines())


def test_truncate_backs_up_then_cuts_at_the_bad_batch_and_the_server_starts(tmp_path: Path) -> None:
    spans = build(tmp_path)
    seg, start, _ = spans[2]
    flip(seg, start + 40)
    original = seg.read_bytes()
    with pytest.raises(CorruptLogError):
        PartitionLog.open(tmp_path, P)
    report = repair_log(pdir(tmp_path), truncate=True, now_ms=NOW_MS)
    assert report.truncated
    backup = seg.with_name(seg.name + ".bak-20231114T221320")
    assert backup in report.backups and backup.read_bytes() == original
    assert seg.stat().st_size == start
    log = PartitionLog.open(tmp_path, P)
    assert [r.key for r in log.read()] == [b"key-0", b"key-1"]
    assert log.append([(b"after", b"repair")], 5) == 2
    log.close()


def test_bad_length_field(tmp_path: Path) -> None:
    spans = build(tmp_path)
    seg, start, _ = spans[1]
    data = bytearray(seg.read_bytes())
    struct.pack_into(">i", data, start + 8, 7)  # shorter than a batch header
    seg.write_bytes(bytes(data))
    report = repair_log(seg)  # a single segment works too
    assert report.bad is not None and report.bad.position == start and not report.bad.torn_tail
    assert "less than the minimum" in report.bad.reason


def test_batch_cut_mid_way_at_the_end_is_reported_as_a_torn_tail(tmp_path: Path) -> None:
    spans = build(tmp_path)
    seg, start, end = spans[-1]
    os.truncate(seg, end - 10)
    report = repair_log(pdir(tmp_path))
    assert report.bad is not None and (report.bad.position, report.bad.torn_tail) == (start, True)
    assert "torn tail" in "\n".join(report.lines())


def test_corrupt_middle_segment_truncates_there_and_removes_later_segments_with_backups(tmp_path: Path) -> None:
    spans = build(tmp_path, n=8, segment_bytes=250)
    segments = sorted({s for s, _, _ in spans})
    assert len(segments) >= 3
    middle = segments[1]
    start = next(st for s, st, _ in spans if s == middle)
    flip(middle, start + 30)
    report = repair_log(pdir(tmp_path), truncate=True, now_ms=NOW_MS)
    assert report.bad is not None and report.bad.file == middle
    assert report.removed == segments[2:]
    assert all(not s.exists() for s in segments[2:])
    assert {b.name for b in report.backups} >= {f"{s.name}.bak-20231114T221320" for s in segments[1:]}
    assert not (pdir(tmp_path) / "recovery-point.checkpoint").exists()
    log = PartitionLog.open(tmp_path, P, 250)
    keys = [r.key for r in log.read()]
    assert keys == [b"key-%d" % i for i in range(len(keys))] and 0 < len(keys) < 8
    log.close()


def test_refuses_to_truncate_while_a_server_holds_the_lock(tmp_path: Path) -> None:
    spans = build(tmp_path)
    flip(spans[2][0], spans[2][1] + 40)
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(OSError, match="stop the coordinator-server"):
            repair_log(pdir(tmp_path), truncate=True)
    finally:
        os.close(fd)


def test_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    spans = build(tmp_path)
    assert main(parser.parse_args([str(pdir(tmp_path))])) == 0
    flip(spans[2][0], spans[2][1] + 40)
    assert main(parser.parse_args([str(pdir(tmp_path))])) == 1
    out = capsys.readouterr().out
    assert f"first bad batch: {spans[2][0]} at byte position {spans[2][1]}" in out
    assert main(parser.parse_args([str(pdir(tmp_path)), "--truncate"])) == 0
    assert main(parser.parse_args([str(tmp_path / "missing")])) == 2
