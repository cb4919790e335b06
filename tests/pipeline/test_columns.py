"""`pipeline.columns` (the column-wise decoder the Spark tasks run) against `pipeline.decode.offsets_rows`
(the generic one, through kafka-python) on generated segments, and byte ranges against whole segments.

The generated logs mix what the hand parser takes (uncompressed batches of offset commits) with what it
hands to the generic path: gzip batches, transactional batches, records with headers, group metadata,
KIP-848 and unknown record types, keys and values that do not decode, records without a key; then damage
(a flipped byte: CRC failure; a truncation: a torn tail; a bad magic). Both decoders must give the same
rows, as sets (the column-wise one puts a chunk's offset commits first).
"""
from __future__ import annotations

import itertools
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_server.group.consumer.records import ConsumerGroupMetadataRecord
from coordinator_server.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage.batch import build_batch
from coordinator_server.storage.codec import encode_record
from pipeline import columns, segments
from pipeline.decode import SegmentPath, offsets_rows
from pipeline.reader import RECORD_SCHEMA, _to_arrow

WHERE = SegmentPath("file:/data/node-1", "__consumer_offsets", 7, 0)

with warnings.catch_warnings():  # kafka-python's importlib.resources calls (see storage/batch.py)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_offset_values = st.one_of(
    st.none(),  # tombstone
    st.builds(OffsetCommitValue, st.integers(-1, 2**62), st.integers(-1, 2**30), st.just(""),
              st.integers(0, 2**45), st.just(-1)),  # v3, empty metadata: the one-unpack path
    st.builds(OffsetCommitValue, st.integers(0, 2**62), st.integers(-1, 9), _names, st.integers(0, 2**45),
              st.just(-1)),  # v3 with metadata
    st.builds(OffsetCommitValue, st.integers(0, 2**62), st.just(-1), _names, st.integers(0, 2**45),
              st.integers(0, 2**45)),  # v1: an explicit expire timestamp
)
_commit = st.builds(lambda g, t, p, v: encode_record(OffsetCommitRecord(g, t, p, v)),
                    st.sampled_from(["g1", "g2", "ü-group", "a-group-name-long-enough-for-two-byte-record-lengths"]),
                    st.sampled_from(["orders", "t"]),
                    st.integers(0, 3), _offset_values)
_group = st.builds(lambda g, gen: encode_record(GroupMetadataRecord(g, GroupMetadataValue(
    "consumer", gen, "range", "m1", 1_700_000_000_000,
    (MemberRecord("m1", None, "c", "/h", 300, 100, b"", b""),)))), st.sampled_from(["g1", "g2"]),
    st.integers(0, 5))
_other = st.one_of(
    st.builds(lambda g: encode_record(ConsumerGroupMetadataRecord(g, 3)), st.just("cg")),
    st.tuples(st.binary(max_size=12), st.one_of(st.none(), st.binary(max_size=30))),  # junk: error rows
    st.tuples(st.none(), st.binary(max_size=4)),  # no key
    st.tuples(st.just(struct.pack(">h", 11) + b"share"), st.none()),  # a share group record: "other"
    st.tuples(st.just(encode_record(OffsetCommitRecord("g1", "t", 0, None))[0]), st.binary(max_size=30)),
)
_record = st.one_of(_commit, _commit, _commit, _group, _other)


@st.composite
def _batches(draw: Any) -> bytes:
    """A segment: batches of generated records, some built another way than the server's (compressed,
    transactional, with headers, timestamps apart), then maybe damaged."""
    out = bytearray()
    offset = 0
    for _ in range(draw(st.integers(0, 6))):
        records = draw(st.lists(_record, min_size=1, max_size=6))
        kind = draw(st.sampled_from(["server", "server", "gzip", "headers", "transactional", "timestamps"]))
        if kind == "server":
            out += build_batch(records, offset, 1_700_000_000_000)
        else:
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=1 if kind == "gzip" else 0,
                                                is_transactional=kind == "transactional", producer_id=-1,
                                                producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize)
            for i, (key, value) in enumerate(records):
                ts = 1_700_000_000_000 + (draw(st.integers(-300, 10**6)) if kind == "timestamps" else 0)
                builder.append(i, timestamp=ts, key=key, value=value,
                               headers=[("h", b"v")] if kind == "headers" else [])
            buf = builder.build()
            struct.pack_into(">q", buf, 0, offset)  # BaseOffset lies before the CRC's bytes
            out += buf
        offset += len(records)
    damage = draw(st.sampled_from(["none", "none", "flip", "truncate", "magic"]))
    if out and damage == "flip":
        out[draw(st.integers(21, len(out) - 1))] ^= 0xFF
    elif out and damage == "truncate":
        del out[draw(st.integers(1, len(out) - 1)):]
    elif len(out) > 16 and damage == "magic":
        out[16] = 1
    return bytes(out)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["position"], r["offset"] if r["offset"] is not None else -1, repr(r)))


def _generic(content: bytes, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
    return _sorted(pa.Table.from_batches(list(_to_arrow(offsets_rows(WHERE, content, start, end), RECORD_SCHEMA)),
                                         schema=columns.record_arrow_schema()).to_pylist())


def _columnar(content: Any, start: int = 0, end: int | None = None, rows_per_batch: int = 5,
              lockstep_min: int = columns.LOCKSTEP_MIN_BATCHES) -> list[dict[str, Any]]:
    batches = list(columns.offsets_batches(WHERE, content, start, end, rows_per_batch=rows_per_batch,
                                           lockstep_min=lockstep_min))
    assert all(b.schema == columns.record_arrow_schema() for b in batches)
    return _sorted(pa.Table.from_batches(batches, schema=columns.record_arrow_schema()).to_pylist())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches())
def test_columns_give_the_generic_rows(content: bytes) -> None:
    assert _columnar(content) == _generic(content)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches(), st.integers(1, 40))
def test_the_lockstep_parser_gives_the_generic_rows(content: bytes, rows_per_batch: int) -> None:
    # Every step of pipeline.lockstep taken, however few batches are left (the default leaves a small
    # log's batches to the per-record parser), over chunks of any size.
    assert _columnar(content, rows_per_batch=rows_per_batch, lockstep_min=1) == _generic(content)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches(), st.integers(1, 400))
def test_a_segment_cut_into_ranges_decodes_to_the_rows_of_the_whole(content: bytes, every: int) -> None:
    path = Path(f"/tmp/test-columns-{id(content)}.log")  # batch_cuts walks a file, as the driver does
    path.write_bytes(content)
    try:
        ranges = segments.segment_ranges(segments.Segment("file:" + str(path), len(content)), every)
    finally:
        path.unlink()
    assert ranges[0].start == 0 and ranges[-1].end == len(content)
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    pieces = [row for r in ranges for row in _columnar(content, r.start, r.end)]
    assert _sorted(pieces) == _generic(content)


def test_plan_tasks_makes_two_even_tasks_a_core() -> None:
    many = [segments.Segment(f"file:/d/__consumer_offsets-{i}/00000000000000000000.log", 400_000)
            for i in range(100)]
    tasks = segments.plan_tasks(many, parallelism=2, max_partition_bytes=128 << 20)
    # Small segments whole, packed into 2 x 2 tasks (each range also counts its open cost).
    assert sorted(r.uri for t in tasks for r in t) == sorted(s.uri for s in many)
    assert all(r.start == 0 and r.end == 400_000 for t in tasks for r in t)
    assert len(tasks) in (4, 5) and max(len(t) for t in tasks) - min(len(t) for t in tasks[:4]) <= 1
    assert len(segments.plan_tasks(many, parallelism=2, max_partition_bytes=4 << 20)) >= 10  # the cap
    remote = [segments.Segment("hdfs://nn/d/__consumer_offsets-0/00000000000000000000.log", 10)]
    assert segments.plan_tasks(remote, 2, 128 << 20) == []  # read whole through binaryFile
    assert segments.local_path("file:/d/x.log") == "/d/x.log" and segments.local_path("s3a://b/x.log") is None


def test_local_globs_are_listed_in_python(tmp_path: Path) -> None:
    """Local globs need no JVM (the session is not touched: None here), and match what Spark would list."""
    for d in ("node-1/__consumer_offsets-0", "node-1/orders-0", "node-2/__consumer_offsets-3"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "00000000000000000000.log").write_bytes(b"x" * 7)
    (tmp_path / "node-1" / "__consumer_offsets-0" / "00000000000000000000.index").touch()
    found = segments.list_segments(None, [f"{tmp_path}/node-*/__consumer_offsets-*/*.log",  # type: ignore[arg-type]
                                          f"file:{tmp_path}/nothing-*/*/*.log", f"{tmp_path}/missing/x.log"])
    assert found == [segments.Segment(f"file:{tmp_path}/node-1/__consumer_offsets-0/00000000000000000000.log", 7),
                     segments.Segment(f"file:{tmp_path}/node-2/__consumer_offsets-3/00000000000000000000.log", 7)]
