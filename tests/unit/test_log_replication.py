"""What replication needs of a partition's log: batches stamped with the writer's leader epoch, a
follower's append that keeps the leader's offsets and epochs, and a durable truncate_to (Kafka's
Log.truncateTo) that survives a reopen."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_server.storage.batch import LEADER_EPOCH, LEADER_EPOCH_POS, BatchInfo
from coordinator_server.storage.log import PartitionLog


def _epochs(plog: PartitionLog) -> list[tuple[int, int]]:
    out = []
    offset = plog.log_start_offset
    while offset < plog.next_offset:
        batch = plog.batch_at(offset)
        assert batch is not None
        info = BatchInfo.parse(batch)
        out.append((info.base_offset, LEADER_EPOCH.unpack_from(batch, LEADER_EPOCH_POS)[0]))
        offset = info.last_offset + 1
    return out


def test_appends_carry_the_leader_epoch(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, 0)
    plog.append([(b"k", b"v")], 1, leader_epoch=3)
    plog.append([(b"k", b"v"), (b"k2", b"v")], 2, leader_epoch=4)
    assert _epochs(plog) == [(0, 3), (1, 4)]


def test_a_follower_appends_the_leaders_batches_as_they_are(tmp_path: Path) -> None:
    leader = PartitionLog.open(tmp_path / "leader", 0)
    leader.append([(b"a", b"1")], 1, leader_epoch=2)
    leader.append([(b"b", b"2"), (b"c", b"3")], 1, leader_epoch=5)
    raw = leader.read_batches(0, 1 << 20)
    follower = PartitionLog.open(tmp_path / "follower", 0)
    first = raw[:BatchInfo.parse(raw).size]
    assert follower.append_as_follower([first, raw[len(first):]]) == [(2, 0), (5, 1)]
    assert follower.next_offset == 3 and _epochs(follower) == [(0, 2), (1, 5)]
    with pytest.raises(ValueError):
        follower.append_as_follower([first])  # starts at 0, the follower's log ends at 3


def test_truncate_to_drops_later_segments_and_batches_durably(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, 0, segment_bytes=200)
    for i in range(30):
        plog.append([(f"k{i}".encode(), b"x" * 40)], i, leader_epoch=i // 10)
    plog.sync()
    assert len(plog.segments) > 3
    plog.truncate_to(12)
    assert plog.next_offset == 12
    assert [o for o, _ in _epochs(plog)] == list(range(12))
    plog.append([(b"after", b"y")], 99, leader_epoch=7)  # the log goes on from there
    plog.sync()
    plog.close()
    reopened = PartitionLog.open(tmp_path, 0, segment_bytes=200)
    assert reopened.next_offset == 13
    assert _epochs(reopened)[-1] == (12, 7)
    assert [r.offset for r in reopened.read()] == list(range(13))


def test_truncate_to_the_end_or_past_it_changes_nothing(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, 0)
    plog.append([(b"k", b"v")], 1)
    plog.truncate_to(5)
    plog.truncate_to(1)
    assert plog.next_offset == 1


def test_a_read_bounded_by_the_high_watermark_stops_before_it(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path, 0)
    plog.append([(b"a", b"1")], 1)  # offset 0
    plog.append([(b"b", b"2"), (b"c", b"3")], 1)  # offsets 1-2
    plog.append([(b"d", b"4")], 1)  # offset 3
    everything = plog.read_batches(0, 1 << 20)

    def bases(raw: bytes) -> list[int]:
        out, pos = [], 0
        while pos < len(raw):
            info = BatchInfo.parse(raw[pos:])
            out.append(info.base_offset)
            pos += info.size
        return out

    assert bases(everything) == [0, 1, 3]
    assert bases(plog.read_batches(0, 1 << 20, max_offset=3)) == [0, 1]  # a consumer sees below the HW only
    assert bases(plog.read_batches(1, 1 << 20, max_offset=3)) == [1]
    assert plog.read_batches(3, 1 << 20, max_offset=3) == b""  # at the HW: nothing, even with min_one
    assert plog.read_batches(0, 1, min_one=True, max_offset=0) == b""
    assert bases(plog.read_batches(0, 1, min_one=True, max_offset=3)) == [0]  # KIP-74 still holds below it
