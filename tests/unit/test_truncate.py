"""PartitionLog.truncate_to (Kafka's Log.truncateTo, for a follower whose log diverged): segments,
index entries and the cut are gone, durably, and the log carries on at the new end."""
from __future__ import annotations

import sys
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from coordinator_server.storage.log import PartitionLog
from coordinator_server.storage.segment import RECOVERY_POINT_FILE
from coordinator_server.topics.partition import Partition

P = 3


def pdir(tmp_path: Path) -> Path:
    return tmp_path / f"__consumer_offsets-{P}"


def fill(plog: PartitionLog, batches: int, per_batch: int = 2, start: int = 0) -> None:
    for i in range(start, start + batches):
        plog.append([(b"k%d-%d" % (i, j), b"v" * 40) for j in range(per_batch)], timestamp_ms=1_000 + i)


def keys(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.key) for r in plog.read()]


def segment_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in pdir(tmp_path).iterdir() if p.suffix in (".log", ".index"))


def test_truncate_drops_later_segments_and_cuts_the_one_holding_the_offset(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, P, segment_bytes=600, index_interval_bytes=100)
    fill(plog, 30)  # 60 records over several segments
    assert len(plog.segments) >= 4
    before = keys(plog)
    bases = [int(p.stem) for p in plog.segments]
    offset = bases[1] + 4  # a batch boundary (2 records per batch) inside the second segment
    assert plog.truncate_to(offset) == offset
    assert plog.next_offset == offset
    assert [int(p.stem) for p in plog.segments] == bases[:2]
    assert segment_files(tmp_path) == sorted([f"{bases[0]:020d}.index", f"{bases[0]:020d}.log",
                                              f"{bases[1]:020d}.log"])  # the active index lives in memory
    assert keys(plog) == before[:offset]
    # Reads through the rebuilt index still find every batch that stayed, and nothing past the cut.
    assert plog.batch_at(offset - 1) is not None and plog.batch_at(offset) is None
    fill(plog, 3, start=100)  # appends carry on at the new end
    assert [o for o, _ in keys(plog)] == list(range(offset + 6))
    plog.close()
    reopened = PartitionLog.open(tmp_path, P, segment_bytes=600, index_interval_bytes=100)
    assert keys(reopened) == keys(plog) and reopened.next_offset == offset + 6
    reopened.close()


def test_a_batch_holding_the_offset_goes_whole(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, P)
    fill(plog, 5, per_batch=3)  # batches at 0, 3, 6, 9, 12
    assert plog.truncate_to(7) == 6  # the batch 6..8 holds 7: all of it goes, the log ends at 6
    assert [o for o, _ in keys(plog)] == list(range(6))
    plog.close()


def test_truncating_at_or_past_the_end_changes_nothing(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, P)
    fill(plog, 3)
    before = keys(plog)
    assert plog.truncate_to(6) == 6
    assert plog.truncate_to(100) == 6
    assert keys(plog) == before
    plog.close()


def test_truncating_to_the_log_start_empties_the_log_and_restarts_at_the_offset(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, P, segment_bytes=600)
    fill(plog, 20)
    assert plog.truncate_to(0) == 0
    assert keys(plog) == [] and plog.segments == [pdir(tmp_path) / f"{0:020d}.log"]
    fill(plog, 1)
    assert [o for o, _ in keys(plog)] == [0, 1]
    plog.close()


def test_a_truncation_is_durable_without_a_clean_shutdown(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, P, segment_bytes=600)
    fill(plog, 20)
    plog.sync()
    plog.close()  # a clean mark: the next open would trust every segment...
    plog = PartitionLog.open(tmp_path, P, segment_bytes=600)
    plog.truncate_to(10)
    lines = (pdir(tmp_path) / RECOVERY_POINT_FILE).read_text().split()
    assert "clean" not in lines and int(lines[1]) <= 10  # ...but the truncation dropped the mark
    plog.close(clean=False)  # as after a crash right after the truncation
    again = PartitionLog.open(tmp_path, P, segment_bytes=600)
    assert again.next_offset == 10 and [o for o, _ in keys(again)] == list(range(10))
    again.close()


def test_a_topic_partition_truncation_forgets_the_producer_sequences_it_cut(tmp_path: Path) -> None:
    def batch(seq: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=7,
                                      producer_epoch=0, base_sequence=seq, batch_size=sys.maxsize)
        b.append(0, timestamp=1_000, key=None, value=b"v%d" % seq, headers=[])
        return bytes(b.build())

    part = Partition.open("t", 0, tmp_path / "t-0", 1 << 20)
    assert [part.append(batch(s), 1 << 20).base_offset for s in range(3)] == [0, 1, 2]
    assert part.append(batch(2), 1 << 20).duplicate  # a retry of the last batch
    assert part.truncate_to(2) == 2
    retry = part.append(batch(2), 1 << 20)  # the cut batch is gone: no longer a duplicate
    assert not retry.duplicate and retry.base_offset == 2
    part.close()
