"""Start-up replay (`storage.replay`, `CoordinatorLog.replay_latest`): the hand-written decoders it uses
(the batch walker here, the fast key and offset value paths of `storage.codec`) agree with kafka-python's
on generated input, and replaying the last record per key rebuilds exactly the state (dict
orders included) that applying every record in log order does."""
from __future__ import annotations

import asyncio
import struct
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from coordinator_server.config import FsyncPolicy
from coordinator_server.group.loader import GroupLoader
from coordinator_server.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage import CoordinatorLog, PartitionLog, RecordDecodeError, codec
from coordinator_server.storage import replay as fast
from coordinator_server.storage.batch import batch_records, build_batch
from coordinator_server.storage.codec import encode_record
from coordinator_server.storage.coordinator_log import META_FILE, CleanerConfig, _write_meta
from protocol import coordinator_records as schema

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

ALWAYS = FsyncPolicy("always")
OFF = CleanerConfig(enabled=False)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["g", "t", "é", "😀"]))


def outcome(f: Any, *args: Any) -> Any:
    """What f returns, or ("raises", type) when it raises (RecordDecodeError, BadBatch; a damaged
    compressed batch raises the decompressor's own error, the same from both)."""
    try:
        return f(*args)
    except Exception as e:
        return ("raises", type(e))


# -- keys and values: the hand-written decoders against kafka-python's -------------------------------

def reference_key(key: bytes) -> Any:
    return codec.slow_decode_key(key)  # kafka-python's classes


def reference_offset_value(value: bytes) -> Any:
    return codec.slow_decode_offset_value(value)


def mutations(data: bytes) -> st.SearchStrategy[bytes]:
    """The bytes (half the time), cut short, with bytes appended, or with one byte changed (lengths,
    nulls, UTF-8)."""
    return st.one_of(
        st.just(data), st.just(data), st.just(data),
        st.integers(0, max(0, len(data) - 1)).map(lambda n: data[:n]),
        st.binary(min_size=1, max_size=3).map(lambda extra: data + extra),
        st.tuples(st.integers(0, max(0, len(data) - 1)), st.sampled_from([0x00, 0x7F, 0x80, 0xC3, 0xFF]))
        .map(lambda iv: data[:iv[0]] + bytes([iv[1]]) + data[iv[0] + 1:] if data else data),
    )


@st.composite
def keys(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["offset0", "offset1", "group", "unknown", "random"]))
    if kind.startswith("offset"):
        key: bytes = schema.OffsetCommitKey(group=draw(TEXT), topic=draw(TEXT), partition=draw(INT32)).encode(
            version=int(kind[-1]), header=True)
    elif kind == "group":
        key = schema.GroupMetadataKey(group=draw(TEXT)).encode(version=2, header=True)
    elif kind == "unknown":
        key = draw(st.integers(3, 40)).to_bytes(2, "big") + draw(st.binary(max_size=8))
    else:
        key = draw(st.binary(max_size=24))
    return draw(mutations(key))


@st.composite
def offset_values(draw: st.DrawFn) -> bytes:
    version = draw(st.integers(0, 4))
    value: bytes = schema.OffsetCommitValue(
        offset=draw(INT64), leader_epoch=draw(INT32), metadata=draw(TEXT), commit_timestamp=draw(INT64),
        expire_timestamp=draw(INT64)).encode(version=version, header=True)
    return draw(mutations(value)) if draw(st.integers(0, 5)) else draw(st.binary(max_size=40))


@settings(max_examples=1500, deadline=None)
@given(keys())
def test_key_decoder_agrees_with_kafka_python(key: bytes) -> None:
    assert outcome(codec.decode_key, key) == outcome(reference_key, key)


@settings(max_examples=1500, deadline=None)
@given(offset_values())
def test_offset_value_decoder_agrees_with_kafka_python(value: bytes) -> None:
    assert outcome(codec.decode_offset_value, value) == outcome(reference_offset_value, value)


@pytest.mark.parametrize("value", [
    # metadata written as a null string (non-nullable): refused, as the reference does.
    b"\x00\x03" + bytes(8) + b"\x00\x00\x00\x01" + b"\xff\xff" + bytes(8),
    # metadata that is not UTF-8
    b"\x00\x03" + bytes(8) + b"\x00\x00\x00\x01" + b"\x00\x01\xff" + bytes(8),
    b"\x00\x05" + bytes(20),  # unknown version
])
def test_damaged_offset_values_raise_like_the_reference(value: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        reference_offset_value(value)
    with pytest.raises(RecordDecodeError):
        codec.decode_offset_value(value)


# -- records of a batch: the hand-written parser against kafka-python's ------------------------------

NULLABLE_BYTES = st.one_of(st.none(), st.binary(max_size=200))


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, bool]:
    records = draw(st.lists(st.tuples(NULLABLE_BYTES, NULLABLE_BYTES), min_size=1, max_size=8))
    gaps = draw(st.booleans())
    deltas = None
    if gaps:
        steps = draw(st.lists(st.integers(1, 300), min_size=len(records) - 1, max_size=len(records) - 1))
        deltas = [0]
        for s in steps:
            deltas.append(deltas[-1] + s)
    timestamps = draw(st.one_of(st.none(), st.lists(INT32.map(lambda t: 1_700_000_000_000 + t),
                                                    min_size=len(records), max_size=len(records))))
    headers = draw(st.booleans()) and draw(st.integers(0, 5)) == 0
    compression = draw(st.sampled_from([0, 0, 0, 0, 1]))  # 1: gzip
    if headers or compression:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 30)
        for i, (k, v) in enumerate(records):
            builder.append(i if deltas is None else deltas[i], timestamp=1_000, key=k, value=v,
                           headers=[("h", b"x")] if headers else [])
        raw = bytes(builder.build())
    else:
        raw = build_batch(records, draw(st.integers(0, 2**40)), 1_000, deltas, timestamps)
    if draw(st.integers(0, 2)) == 0:
        # Damage inside the record section (the CRC is not what is tested here): a byte changed, the
        # record count or the last offset delta changed.
        what = draw(st.sampled_from(["byte", "count", "delta"]))
        buf = bytearray(raw)
        if what == "byte" and len(buf) > 61:
            i = draw(st.integers(61, len(buf) - 1))
            buf[i] = draw(st.integers(0, 255))
        elif what == "count":
            struct.pack_into(">i", buf, 57, draw(st.integers(-1, 10)))
        else:
            struct.pack_into(">i", buf, 23, draw(st.integers(-1, 2000)))
        raw = bytes(buf)
    return raw, gaps


def reference_records(raw: bytes, gaps: bool) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in batch_records(DefaultRecordBatch(raw), gaps)]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_record_parser_agrees_with_kafka_python(batch: tuple[bytes, bool]) -> None:
    raw, gaps = batch
    assert outcome(fast._records, raw, gaps) == outcome(reference_records, raw, gaps)


# -- replay_latest against replaying every record -----------------------------------------------------

def loader_state(records: Any) -> tuple[list[Any], list[Any]]:
    """The loader's state as lists, so that dict order counts."""
    loader = GroupLoader()
    for r in records:
        loader.apply(r)
    return list(loader.group_values.items()), [(g, list(o.items())) for g, o in loader.offsets.items()]


GROUPS = st.sampled_from(["a", "b", "c", "d"])
MEMBER = MemberRecord("m", None, "c", "/h", 10, 10, b"s", b"a")


@st.composite
def raw_records(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """A record as key/value bytes: offset commits with v0 or v1 keys (the same logical key), group
    records, tombstones, and now and then a record type this server does not read."""
    kind = draw(st.sampled_from(["offset", "offset", "offset", "group", "unknown"]))
    group = draw(GROUPS)
    if kind == "offset":
        # Few keys per group, so that groups get emptied by tombstones and committed to again.
        topic, partition = draw(st.sampled_from(["t", "t", "u"])), draw(st.integers(0, 1))
        key: bytes = schema.OffsetCommitKey(group=group, topic=topic, partition=partition).encode(
            version=draw(st.integers(0, 1)), header=True)
        if draw(st.integers(0, 2)) == 0:
            return key, None
        v = OffsetCommitValue(draw(st.integers(0, 10**6)), draw(st.integers(-1, 5)), draw(st.sampled_from(["", "m"])),
                              draw(st.integers(0, 10**6)), draw(st.sampled_from([-1, -1, 77])))
        value = encode_record(OffsetCommitRecord(group, topic, partition, v))[1]
        if draw(st.booleans()):  # an older value version
            value = schema.OffsetCommitValue(offset=v.offset, leader_epoch=-1, metadata=v.metadata,
                                             commit_timestamp=v.commit_timestamp_ms,
                                             expire_timestamp=-1).encode(version=draw(st.sampled_from([0, 2, 4])),
                                                                         header=True)
        return key, value
    if kind == "group":
        key, value = encode_record(GroupMetadataRecord(group, GroupMetadataValue(
            "consumer", draw(st.integers(0, 9)), "range", "m", 5, draw(st.sampled_from([(), (MEMBER,)])))))
        return key, None if draw(st.integers(0, 3)) == 0 else value
    return b"\x00\x0a" + group.encode(), b"anything"


def write_raw(data_dir: Path, batches: list[list[tuple[bytes, bytes | None]]], segment_bytes: int) -> None:
    _write_meta(data_dir / META_FILE, 1)  # one partition, as CoordinatorLog.open would record it
    plog = PartitionLog.open(data_dir, 0, segment_bytes=segment_bytes)
    for batch in batches:
        plog.append(batch, 1_000)
    plog.sync()
    plog.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(raw_records(), min_size=1, max_size=4), min_size=1, max_size=40),
       segment_bytes=st.sampled_from([300, 2_000, 1 << 20]), compact=st.booleans())
def test_replay_latest_rebuilds_exactly_the_state_of_a_full_replay(
        batches: list[list[tuple[bytes, bytes | None]]], segment_bytes: int, compact: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        write_raw(data_dir, batches, segment_bytes)

        async def check() -> None:
            log = CoordinatorLog.open(data_dir, 1, ALWAYS, cleaner=OFF, segment_bytes=segment_bytes)
            try:
                if compact:
                    await log.compact_now(0, now_ms=1_000)
                with capture_logs():
                    assert loader_state(log.replay_latest(0)) == loader_state(log.replay(0))
            finally:
                await log.close()

        asyncio.run(check())


def offset_key(group: str, partition: int = 0) -> bytes:
    return encode_record(OffsetCommitRecord(group, "t", partition, None))[0]


def offset_value(offset: int) -> bytes:
    value = encode_record(OffsetCommitRecord("g", "t", 0, OffsetCommitValue(offset, -1, "", 1, -1)))[1]
    assert value is not None
    return value


async def test_a_superseded_value_is_not_decoded_a_surviving_one_is(tmp_path: Path) -> None:
    bad = b"\x00\x03\x00"  # an OffsetCommitValue v3 cut short
    write_raw(tmp_path, [[(offset_key("g"), bad)], [(offset_key("g"), offset_value(7))],
                         [(offset_key("h"), offset_value(1))], [(offset_key("h"), bad)]], 1 << 20)
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, cleaner=OFF)
    with pytest.raises(RecordDecodeError, match=r"__consumer_offsets-0 offset 3: OffsetCommitValue v3"):
        list(log.replay_latest(0))
    await log.close()


async def test_a_key_that_does_not_decode_refuses_even_when_superseded(tmp_path: Path) -> None:
    write_raw(tmp_path, [[(offset_key("g"), offset_value(1))], [(b"\x00\x01\x00", offset_value(2))],
                         [(offset_key("g"), offset_value(3))]], 1 << 20)
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, cleaner=OFF)
    with pytest.raises(RecordDecodeError, match=r"__consumer_offsets-0 offset 1: OffsetCommitKey"):
        list(log.replay_latest(0))
    await log.close()


async def test_a_record_without_a_key_refuses(tmp_path: Path) -> None:
    write_raw(tmp_path, [[(offset_key("g"), offset_value(1)), (None, offset_value(2))]], 1 << 20)  # type: ignore[list-item]
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, cleaner=OFF)
    with pytest.raises(RecordDecodeError, match="offset 1: record has no key"):
        list(log.replay_latest(0))
    await log.close()


async def test_unknown_record_types_are_logged_each_time_and_skipped(tmp_path: Path) -> None:
    unknown = b"\x00\x0aabc"  # a KIP-932 share group record
    write_raw(tmp_path, [[(unknown, b"x"), (offset_key("g"), offset_value(1))], [(unknown, b"y")]], 1 << 20)
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, cleaner=OFF)
    with capture_logs() as logs:
        records = list(log.replay_latest(0))
    assert records == [OffsetCommitRecord("g", "t", 0, OffsetCommitValue(1, -1, "", 1, -1))]
    skipped = [e for e in logs if e["event"] == "unknown_record_type_skipped"]
    assert [(e["offset"], e["key_version"]) for e in skipped] == [(0, 10), (2, 10)]
    assert {e["record_type"] for e in skipped} == {"ShareGroupMemberMetadata"}
    await log.close()


async def test_tombstones_and_dict_orders_match_the_loader(tmp_path: Path) -> None:
    # a/0 is written, then b, then a/0 again: the loader keeps a before b (first insertion); a group whose
    # offsets were all tombstoned and then committed again moves to the end, as in the loader.
    write_raw(tmp_path, [
        [(offset_key("a"), offset_value(1)), (offset_key("b"), offset_value(2))],
        [(offset_key("a"), offset_value(3)), (offset_key("c"), offset_value(4))],
        [(offset_key("a"), None)], [(offset_key("a", 1), offset_value(5))],
        [(offset_key("c", 1), offset_value(6)), (offset_key("c"), None)],
    ], 1 << 20)
    log = CoordinatorLog.open(tmp_path, 1, ALWAYS, cleaner=OFF)
    assert loader_state(log.replay_latest(0)) == loader_state(log.replay(0))
    got = [(r.group_id, r.partition, r.value.offset) for r in log.replay_latest(0)
           if isinstance(r, OffsetCommitRecord) and r.value is not None]
    assert got == [("b", 0, 2), ("c", 1, 6), ("a", 1, 5)]
    await log.close()



def test_a_group_value_decodes_through_the_codec() -> None:
    value = GroupMetadataValue("consumer", 3, "range", "m", 5, (MEMBER,))
    raw = encode_record(GroupMetadataRecord("g", value))[1]
    assert raw is not None
    assert codec.decode_group_value(raw) == value
    assert codec.slow_decode_group_value(raw) == value
