"""Compaction of __consumer_offsets: newest record per key, tombstone retention, the active segment left
alone, the swap protocol across crashes, appends during a cleaning, and replay equivalence."""
from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.config import FsyncPolicy
from coordinator_server.group.loader import GroupLoader
from coordinator_server.group.records import (
    CoordinatorRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage import CoordinatorLog, PartitionLog, encode_record
from coordinator_server.storage.compaction import clean, dirty_ratio, snapshot, swap_in
from coordinator_server.storage.coordinator_log import CleanerConfig
from coordinator_server.storage.segment import write_cleaner_offset

ALWAYS = FsyncPolicy("always")
DAY_MS = 86_400_000
NOW_MS = 1_700_000_000_000
OFF = CleanerConfig(enabled=False)


def commit(group: str, partition: int, offset: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(group, "t", partition, OffsetCommitValue(offset, -1, "", 1_000, -1))


def group_record(group: str, generation: int) -> GroupMetadataRecord:
    return GroupMetadataRecord(group, GroupMetadataValue("consumer", generation, "range", None, 5, ()))


def state(records: list[CoordinatorRecord]) -> tuple[dict[str, object], dict[str, object]]:
    loader = GroupLoader()
    for r in records:
        loader.apply(r)
    return dict(loader.group_values), {g: dict(o) for g, o in loader.offsets.items()}


async def open_log(tmp_path: Path, segment_bytes: int = 400) -> CoordinatorLog:
    return CoordinatorLog.open(tmp_path, 1, ALWAYS, segment_bytes=segment_bytes, cleaner=OFF,
                               wall_clock_ms=lambda: NOW_MS)


async def fill(log: CoordinatorLog, records: list[tuple[CoordinatorRecord, int]]) -> None:
    for rec, ts in records:
        await log.append(0, [rec], ts)


def segment_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "__consumer_offsets-0").glob("*.log"))


async def test_keeps_the_newest_record_per_key_with_its_offset_and_leaves_the_active_segment(tmp_path: Path) -> None:
    log = await open_log(tmp_path)
    records = [(commit(f"g{i % 3}", 0, i), NOW_MS) for i in range(60)]
    await fill(log, records)
    before = list(log.replay(0))
    active = segment_files(tmp_path)[-1]
    active_bytes = active.read_bytes()
    assert dirty_ratio(log._logs[0]) == 1.0
    assert await log.compact_now(0)
    assert active.read_bytes() == active_bytes  # the active segment is never touched
    assert dirty_ratio(log._logs[0]) == 0.0
    after = list(log.replay(0))
    assert state(after) == state(before)
    offsets = [r.offset for r in log._logs[0].read()]
    assert offsets == sorted(offsets) and len(offsets) < 60
    # Offsets keep their values: the survivors are the last commit of each key before the active segment.
    await log.append(0, [commit("g0", 0, 999)], NOW_MS)
    await log.close()
    log = await open_log(tmp_path)
    assert state(list(log.replay(0))) == state([*before, commit("g0", 0, 999)])
    assert log._logs[0].next_offset == 61
    await log.close()


async def test_tombstones_are_dropped_only_past_delete_retention(tmp_path: Path) -> None:
    log = await open_log(tmp_path)
    old, recent = NOW_MS - 2 * DAY_MS, NOW_MS - 1_000
    await fill(log, [
        (commit("a", 0, 1), old), (OffsetCommitRecord("a", "t", 0, None), old),
        (commit("b", 0, 1), old), (OffsetCommitRecord("b", "t", 0, None), recent),
        (group_record("c", 1), old), (GroupMetadataRecord("c", None), old),
        *[(commit("filler", p, p), NOW_MS) for p in range(20)],
    ])
    before = list(log.replay(0))
    assert await log.compact_now(0)
    keys = [rec for rec in log.replay(0) if rec.group_id in ("a", "b", "c")]
    assert keys == [OffsetCommitRecord("b", "t", 0, None)]  # the recent tombstone stays, for now
    assert state(list(log.replay(0))) == state(before)
    await log.close()


async def test_appends_continue_while_the_cleaner_runs(tmp_path: Path) -> None:
    log = await open_log(tmp_path, segment_bytes=2_000)
    await fill(log, [(commit(f"g{i % 5}", i % 7, i), NOW_MS) for i in range(400)])
    expected = list(log.replay(0))
    more = [commit("late", i % 3, i) for i in range(50)]
    cleaning = asyncio.create_task(log.compact_now(0))
    for rec in more:
        await log.append(0, [rec], NOW_MS)
    assert await cleaning
    await log.close()
    log = await open_log(tmp_path, segment_bytes=2_000)
    assert state(list(log.replay(0))) == state([*expected, *more])
    await log.close()


async def test_compact_if_needed_follows_the_dirty_ratio(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 2, ALWAYS, segment_bytes=400,
                              cleaner=CleanerConfig(enabled=False, min_cleanable_dirty_ratio=0.5))
    for i in range(60):
        await log.append(1, [commit("g", 0, i)], NOW_MS)
    assert await log.compact_if_needed() == 1  # partition 1 only: partition 0 has no sealed segment
    assert await log.compact_if_needed() == 0  # everything sealed is clean now
    await log.close()


async def test_background_cleaner_runs_and_close_stops_it(tmp_path: Path) -> None:
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, segment_bytes=400, cleaner=CleanerConfig(backoff_ms=1))
    for i in range(60):
        await log.append(0, [commit("g", 0, i)], NOW_MS)
    for _ in range(500):
        if dirty_ratio(log._logs[0]) < 0.5:
            break
        await asyncio.sleep(0.005)
    assert dirty_ratio(log._logs[0]) < 0.5
    await log.close()
    assert not list((tmp_path / "__consumer_offsets-0").glob("*.cleaned"))


# --- the swap protocol across crashes ---

def _plain_log(tmp_path: Path, n: int = 40) -> tuple[PartitionLog, list[tuple[int, bytes | None, bytes | None]]]:
    plog = PartitionLog.open(tmp_path, 0, 300)
    for i in range(n):
        plog.append([encode_record(commit(f"g{i % 4}", 0, i))], NOW_MS)
    plog.sync()
    return plog, [(r.offset, r.key, r.value) for r in plog.read()]


def _latest(records: list[tuple[int, bytes | None, bytes | None]], below: int) -> list[tuple[int, bytes | None,
                                                                                               bytes | None]]:
    newest = {k: o for o, k, _ in records if o < below}
    return [r for r in records if r[0] >= below or newest[r[1]] == r[0]]


def test_crash_before_the_swap_commit_rolls_back(tmp_path: Path) -> None:
    plog, records = _plain_log(tmp_path)
    snap = snapshot(plog)
    assert snap is not None
    clean(snap, NOW_MS, DAY_MS, plog.segment_bytes)
    assert list((tmp_path / "__consumer_offsets-0").glob("*.log.cleaned"))
    plog.close(clean=False)  # crash: .cleaned files left behind
    plog = PartitionLog.open(tmp_path, 0, 300)
    assert not list((tmp_path / "__consumer_offsets-0").glob("*.cleaned"))
    assert [(r.offset, r.key, r.value) for r in plog.read()] == records
    plog.close()


def test_crash_after_the_swap_commit_is_completed_by_recovery(tmp_path: Path) -> None:
    plog, records = _plain_log(tmp_path)
    snap = snapshot(plog)
    assert snap is not None
    result = clean(snap, NOW_MS, DAY_MS, plog.segment_bytes)
    pdir = tmp_path / "__consumer_offsets-0"
    # The commit, as swap_in does it, then a crash before the old segments are deleted.
    write_cleaner_offset(pdir, result.end_offset)
    for g in result.groups:
        os.replace(g.segment.index.path.with_name(g.segment.index.path.name + ".cleaned"),
                   g.segment.index.path.with_name(g.segment.index.path.name + ".swap"))
        os.replace(g.segment.path.with_name(g.segment.path.name + ".cleaned"),
                   g.segment.path.with_name(g.segment.path.name + ".swap"))
    plog.close(clean=False)
    plog = PartitionLog.open(tmp_path, 0, 300)
    assert not list(pdir.glob("*.swap"))
    assert [(r.offset, r.key, r.value) for r in plog.read()] == _latest(records, result.end_offset)
    plog.close()


def test_swap_in_then_restart_reads_the_cleaned_log(tmp_path: Path) -> None:
    plog, records = _plain_log(tmp_path)
    snap = snapshot(plog)
    assert snap is not None
    swap_in(plog, clean(snap, NOW_MS, DAY_MS, plog.segment_bytes))
    got = [(r.offset, r.key, r.value) for r in plog.read()]
    assert got == _latest(records, snap.end_offset)
    plog.append([encode_record(commit("new", 0, 1))], NOW_MS)
    plog.sync()
    plog.close(clean=False)  # after a crash the gaps in cleaned segments must still recover
    plog = PartitionLog.open(tmp_path, 0, 300)
    assert [(r.offset, r.key, r.value) for r in plog.read()][:-1] == got
    plog.close()


# --- replay equivalence ---

_records = st.lists(
    st.one_of(
        st.builds(lambda g, p, o: commit(f"g{g}", p, o), st.integers(0, 3), st.integers(0, 3), st.integers(0, 99)),
        st.builds(lambda g, p: OffsetCommitRecord(f"g{g}", "t", p, None), st.integers(0, 3), st.integers(0, 3)),
        st.builds(group_record, st.sampled_from(["g0", "g1", "g2", "g3"]), st.integers(0, 5)),
        st.builds(lambda g: GroupMetadataRecord(f"g{g}", None), st.integers(0, 3)),
    ).flatmap(lambda r: st.tuples(st.just(r), st.sampled_from([NOW_MS - 2 * DAY_MS, NOW_MS - 1_000]))),
    min_size=1, max_size=120,
)


@settings(max_examples=40, deadline=None)
@given(records=_records, segment_bytes=st.sampled_from([200, 500, 2_000]))
def test_replay_after_compaction_equals_replay_before(records: list[tuple[CoordinatorRecord, int]],
                                                       segment_bytes: int) -> None:
    # Tombstones past delete retention are dropped too: that is replay-equivalent, since every older
    # record of their key goes with them.
    async def run(d: Path) -> None:
        log = CoordinatorLog.open(d, 1, ALWAYS, segment_bytes=segment_bytes, cleaner=OFF,
                                  wall_clock_ms=lambda: NOW_MS)
        await fill(log, records)
        before = state(list(log.replay(0)))
        await log.compact_now(0)
        await log.compact_now(0)  # a second pass over already-cleaned segments changes nothing either
        assert state(list(log.replay(0))) == before
        await log.close()
        log = CoordinatorLog.open(d, 1, ALWAYS, segment_bytes=segment_bytes, cleaner=OFF)
        assert state(list(log.replay(0))) == before
        await log.close()

    with tempfile.TemporaryDirectory() as d:  # not tmp_path: hypothesis runs many examples per test
        asyncio.run(run(Path(d)))
