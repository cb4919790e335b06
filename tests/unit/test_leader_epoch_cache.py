"""LeaderEpochCache: each of Kafka's LeaderEpochFileCache rules, and its checkpoint file."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_server.replication.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    CheckpointCorrupted,
    EpochEntry,
    LeaderEpochCache,
    format_checkpoint,
    parse_checkpoint,
)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries()]


def test_assign_appends_a_new_epoch() -> None:
    cache = cache_of((0, 0))
    assert cache.assign(2, 10)
    assert pairs(cache) == [(0, 0), (2, 10)]
    assert cache.latest_epoch() == 2


def test_assign_of_the_latest_epoch_at_a_later_offset_is_no_change() -> None:
    cache = cache_of((0, 0), (2, 10))
    assert not cache.assign(2, 15)
    assert pairs(cache) == [(0, 0), (2, 10)]


def test_assign_of_the_latest_epoch_at_an_earlier_offset_moves_its_start() -> None:
    cache = cache_of((0, 0), (2, 10))
    assert cache.assign(2, 8)
    assert pairs(cache) == [(0, 0), (2, 8)]


def test_assign_drops_entries_not_older_in_both_epoch_and_offset() -> None:
    # A lower epoch arriving at a later offset replaces what is not strictly before it (Kafka's
    # maybeTruncateNonMonotonicEntries), keeping the cache monotonic in both.
    cache = cache_of((0, 0), (2, 10), (4, 20))
    assert cache.assign(3, 15)
    assert pairs(cache) == [(0, 0), (2, 10), (3, 15)]
    cache = cache_of((0, 0), (2, 10), (4, 20))
    assert cache.assign(5, 10)
    assert pairs(cache) == [(0, 0), (5, 10)]


def test_assign_rejects_negative_values() -> None:
    with pytest.raises(ValueError):
        cache_of().assign(-1, 0)
    with pytest.raises(ValueError):
        cache_of().assign(0, -1)


def test_end_offset_for_undefined_epoch_is_undefined() -> None:
    assert cache_of((0, 0)).end_offset_for(UNDEFINED_EPOCH, 50) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_end_offset_for_the_latest_epoch_is_the_log_end_offset() -> None:
    assert cache_of((0, 0), (3, 10)).end_offset_for(3, 42) == (3, 42)


def test_end_offset_for_an_epoch_in_between_is_the_next_epochs_start() -> None:
    cache = cache_of((0, 0), (3, 10), (5, 20))
    assert cache.end_offset_for(0, 42) == (0, 10)
    # Epoch 4 is unknown: the largest epoch below it is 3, which ended where 5 started.
    assert cache.end_offset_for(4, 42) == (3, 20)
    assert cache.end_offset_for(3, 42) == (3, 20)


def test_end_offset_for_an_epoch_older_than_every_entry_is_the_first_start() -> None:
    assert cache_of((3, 10), (5, 20)).end_offset_for(1, 42) == (1, 10)


def test_end_offset_for_an_epoch_newer_than_every_entry_is_undefined() -> None:
    assert cache_of((0, 0), (3, 10)).end_offset_for(7, 42) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache_of().end_offset_for(0, 42) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_offset() -> None:
    cache = cache_of((0, 0), (3, 10), (5, 20))
    cache.truncate_from_end(20)
    assert pairs(cache) == [(0, 0), (3, 10)]
    cache.truncate_from_end(11)
    assert pairs(cache) == [(0, 0), (3, 10)]
    cache.truncate_from_end(5)
    assert pairs(cache) == [(0, 0)]
    cache.truncate_from_end(-1)  # an undefined offset changes nothing
    assert pairs(cache) == [(0, 0)]


def test_truncate_from_start_keeps_the_epoch_covering_the_new_start() -> None:
    cache = cache_of((0, 0), (3, 10), (5, 20))
    cache.truncate_from_start(15)
    assert pairs(cache) == [(3, 15), (5, 20)]
    cache.truncate_from_start(20)
    assert pairs(cache) == [(5, 20)]
    cache.truncate_from_start(3)  # before the first entry: nothing to remove
    assert pairs(cache) == [(5, 20)]


def test_epoch_for_offset() -> None:
    cache = cache_of((0, 0), (3, 10))
    assert cache.epoch_for_offset(9) == 0
    assert cache.epoch_for_offset(10) == 3
    assert cache_of((3, 10)).epoch_for_offset(5) is None


def test_checkpoint_text_is_kafkas_format() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(3, 1042)]
    assert format_checkpoint(entries) == "0\n2\n0 0\n3 1042\n"
    assert parse_checkpoint("0\n2\n0 0\n3 1042\n") == entries
    assert format_checkpoint([]) == "0\n0\n"


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\n0 x\n", "x\n0\n"])
def test_a_malformed_checkpoint_is_refused(text: str) -> None:
    with pytest.raises(CheckpointCorrupted):
        parse_checkpoint(text, Path("leader-epoch-checkpoint"))


def test_every_change_is_flushed_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache.load(path)
    assert cache.entries() == [] and not path.exists()
    cache.assign(0, 0)
    cache.assign(2, 7)
    assert path.read_text() == "0\n2\n0 0\n2 7\n"
    cache.truncate_from_end(7)
    assert path.read_text() == "0\n1\n0 0\n"
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()
    assert LeaderEpochCache.load(path).entries() == [EpochEntry(0, 0)]


def test_load_assigns_each_entry_so_the_cache_is_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n0 0\n4 20\n2 10\n")
    cache = LeaderEpochCache.load(path)
    assert pairs(cache) == [(0, 0), (2, 10)]
    assert path.read_text() == "0\n3\n0 0\n4 20\n2 10\n"  # loading does not rewrite the file
    path.write_text("0\n1\n-1 0\n")
    with pytest.raises(CheckpointCorrupted):
        LeaderEpochCache.load(path)
