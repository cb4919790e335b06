"""The topic store without a loop: raw batches in, offsets assigned, validation, idempotence, restart,
retention, list offsets by timestamp and fetch limits."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from coordinator_server.config import TopicSpec
from coordinator_server.storage.log import DefaultRecordBatch
from coordinator_server.topics.store import PARTITION_METADATA, StoreConfig, TopicStore
from protocol.errors import Errors, KafkaError
from protocol.kafka_uuid import parse_kafka_uuid


def batch(values: list[bytes], *, ts: int = 1_000, pid: int = -1, epoch: int = -1, seq: int = -1,
          compression: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=ts + i, key=None, value=v, headers=[])
    return bytes(b.build())


def open_store(tmp_path: Path, **kw: object) -> TopicStore:
    return TopicStore.open(StoreConfig(data_dir=tmp_path, **kw), 50)  # type: ignore[arg-type]


def values_from(raw: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(raw):
        size = 12 + struct.unpack_from(">i", raw, pos + 8)[0]
        out += [(r.offset, r.value) for r in DefaultRecordBatch(raw[pos:pos + size])]
        pos += size
    return out


def test_appends_assign_base_offsets_and_store_the_batch_as_sent(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 2)
    p = store.partition("t", 1)
    assert p is not None
    assert p.append(batch([b"a", b"b"]), 1 << 20).base_offset == 0
    gz = batch([b"c", b"d", b"e"], compression=1)
    assert p.append(gz, 1 << 20).base_offset == 2
    raw = p.read(0, 1 << 20, True)
    assert values_from(raw) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert raw.endswith(gz[8:])  # compressed batch stored byte for byte; only the base offset differs
    assert (p.log_start_offset, p.log_end_offset) == (0, 5)
    store.close()


@pytest.mark.parametrize(("mangle", "code"), [
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), Errors.CORRUPT_MESSAGE),  # CRC
    (lambda b: b[:30], Errors.CORRUPT_MESSAGE),  # truncated header
    (lambda b: b[:-3], Errors.CORRUPT_MESSAGE),  # length runs past the end
    (lambda b: b[:16] + b"\x01" + b[17:], Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT),  # magic 1
    (lambda b: b + b, Errors.INVALID_RECORD),  # two batches
    (lambda b: b"", Errors.INVALID_RECORD),
])
def test_invalid_batches_never_reach_the_log(tmp_path: Path, mangle: object, code: Errors) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    r = p.append(mangle(batch([b"x"])), 1 << 20)  # type: ignore[operator]
    assert r.error == code
    assert p.log_end_offset == 0 and p.log.size_bytes == 0
    assert p.append(batch([b"ok"]), 1 << 20).base_offset == 0  # and the partition keeps serving
    store.close()


def test_message_too_large(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    assert p.append(batch([b"x" * 500]), 400).error == Errors.MESSAGE_TOO_LARGE
    store.close()


def test_idempotent_retry_is_answered_with_the_original_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    first = batch([b"a", b"b"], pid=7, epoch=0, seq=0)
    assert p.append(first, 1 << 20).base_offset == 0
    assert p.append(batch([b"c"], pid=7, epoch=0, seq=2), 1 << 20).base_offset == 2
    retry = p.append(first, 1 << 20)
    assert (retry.error, retry.base_offset, retry.duplicate) == (Errors.NONE, 0, True)
    assert p.log_end_offset == 3
    assert p.append(batch([b"z"], pid=7, epoch=0, seq=9), 1 << 20).error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.log_end_offset == 3
    store.close()
    # Producer state is rebuilt from the batch headers: the retry is still recognised after a restart.
    store = open_store(tmp_path)
    p = store.partition("t", 0)
    assert p is not None
    assert p.append(first, 1 << 20).base_offset == 0
    assert p.append(batch([b"d"], pid=7, epoch=0, seq=3), 1 << 20).base_offset == 3
    store.close()


def test_restart_recovers_topics_ids_offsets_and_producer_ids(tmp_path: Path) -> None:
    store = TopicStore.open(StoreConfig(data_dir=tmp_path), 50, [TopicSpec("a", 3)])
    store.create_topic("b", 2)
    ids = {t.name: t.topic_id for t in store.all()}
    pa = store.partition("a", 2)
    assert pa is not None
    pa.append(batch([b"1", b"2"]), 1 << 20)
    pids = [store.next_producer_id() for _ in range(3)]
    store.close()
    meta = (tmp_path / "a-2" / PARTITION_METADATA).read_text()
    assert meta.startswith("version: 0\ntopic_id: ")
    assert parse_kafka_uuid(meta.split("topic_id: ")[1].strip()) == ids["a"]
    store = TopicStore.open(StoreConfig(data_dir=tmp_path), 50, [TopicSpec("a", 5)])  # exists: not changed
    assert {t.name: t.topic_id for t in store.all()} == ids
    assert [store.get(n).partitions for n in ("a", "b")] == [3, 2]  # type: ignore[union-attr]
    assert store.partition("a", 2).log_end_offset == 2  # type: ignore[union-attr]
    assert store.next_producer_id() > max(pids)
    store.close()


def test_admin_errors(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1)
    cases = [
        (lambda: store.create_topic("t", 1), Errors.TOPIC_ALREADY_EXISTS),
        (lambda: store.create_topic("__consumer_offsets", 1), Errors.TOPIC_ALREADY_EXISTS),
        (lambda: store.create_topic("bad/name", 1), Errors.INVALID_TOPIC_EXCEPTION),
        (lambda: store.create_topic("u", 0), Errors.INVALID_PARTITIONS),
        (lambda: store.create_topic("u", 1, replication_factor=3), Errors.INVALID_REPLICATION_FACTOR),
        (lambda: store.create_partitions("t", 1), Errors.INVALID_PARTITIONS),
        (lambda: store.create_partitions("nope", 3), Errors.UNKNOWN_TOPIC_OR_PARTITION),
        (lambda: store.delete_topic("nope"), Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    for call, code in cases:
        with pytest.raises(KafkaError) as info:
            call()
        assert info.value.code == code
    assert store.get("u") is None
    store.create_partitions("t", 3)
    assert store.get("t").partitions == 3  # type: ignore[union-attr]
    _, dirs = store.delete_topic("t")
    assert all(d.name.endswith("-delete") for d in dirs)
    assert not (tmp_path / "t-0").exists()
    store.close()
    store = open_store(tmp_path)  # leftovers of the delete are removed at start
    assert store.get("t") is None and not any(d.name.endswith("-delete") for d in tmp_path.iterdir())
    store.close()


def test_retention_deletes_whole_old_segments_never_the_active_one(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=200, retention_ms=10_000, retention_bytes=-1)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    for i in range(6):
        p.append(batch([b"v" * 100], ts=1_000 + i * 1_000), 1 << 20)
    assert len(p.log.segments) == 6
    assert store.apply_retention(now_wall_ms=12_500) == 2  # batches at 1000 and 2000 are > 10 s old
    assert p.log_start_offset == 2
    assert store.apply_retention(now_wall_ms=10**9) == 3  # everything old, but the active one stays
    assert p.log_start_offset == 5 and len(p.log.segments) == 1
    store.close()


def test_retention_by_size(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=200, retention_ms=-1, retention_bytes=400)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    for _ in range(6):
        p.append(batch([b"v" * 100]), 1 << 20)
    segment = p.log.size_bytes // 6
    store.apply_retention(now_wall_ms=0)
    # Kafka's rule: delete the oldest while the log stays at or above retention.bytes without it.
    assert 400 <= p.log.size_bytes < 400 + segment
    assert p.log_end_offset == 6 and p.log_start_offset == 3
    store.close()


def test_list_offsets_by_timestamp(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    p.append(batch([b"a", b"b", b"c"], ts=100), 1 << 20)  # 100, 101, 102
    p.append(batch([b"d"], ts=500, compression=1), 1 << 20)
    assert p.offset_for_timestamp(0) == (0, 100)
    assert p.offset_for_timestamp(101) == (1, 101)
    assert p.offset_for_timestamp(103) == (3, 500)
    assert p.offset_for_timestamp(501) is None
    assert p.offset_for_max_timestamp() == (3, 500)
    store.close()


def test_fetch_limits_return_whole_batches_and_at_least_one(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1)
    p = store.partition("t", 0)
    assert p is not None
    sizes = []
    for i in range(4):
        b = batch([b"%d" % i * 50, b"y"])
        sizes.append(len(b))
        p.append(b, 1 << 20)
    assert values_from(p.read(3, 1, min_one=True))[0][0] == 2  # the batch holding offset 3, whole
    assert p.read(3, 1, min_one=False) == b""
    assert len(p.read(0, sizes[0] + sizes[1] + 5, min_one=False)) == sizes[0] + sizes[1]
    assert p.read(8, 1 << 20, True) == b""  # at the end
    store.close()
