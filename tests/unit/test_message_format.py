"""The old message formats (protocol/message_format.py): Produce v0-2 up-conversion, Fetch v0-3
down-conversion, as Kafka 3.x brokers convert them."""
from __future__ import annotations

import struct
import sys

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.message_format import MessageFormatError, down_convert, fetch_magic, up_convert


def message_set(magic: int, codec: int, values: list[bytes]) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_000 + i if magic else None, key=b"k" + v, value=v)
    return bytes(b.build())


def v2_batch(base_offset: int, values: list[bytes], codec: int = 0, control: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=control, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=5_000 + i, key=None, value=v, headers=[("h", b"x")])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base_offset)
    if control:  # the control bit (0x20) of the attributes; the CRC is not checked on this path
        struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | 0x20)
    return bytes(raw)


def read_all(raw: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None, int]]:
    records, out = MemoryRecords(raw), []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.timestamp, r.key, r.value, batch.magic) for r in batch]
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1])  # none, gzip (a wrapper message around the messages)
def test_a_produced_message_set_becomes_one_v2_batch(magic: int, codec: int) -> None:
    got = read_all(up_convert(message_set(magic, codec, [b"a", b"b", b"c"])))
    # Magic 0 has no timestamps (-1 in v2); magic 1 keeps each message's.
    times = [1_000, 1_001, 1_002] if magic else [-1, -1, -1]
    assert got == [(i, t, b"k" + v, v, 2) for i, (t, v) in enumerate(zip(times, [b"a", b"b", b"c"], strict=True))]


@pytest.mark.parametrize("bad", [b"", b"\x00" * 7, v2_batch(0, [b"x"])])
def test_what_is_not_a_message_set_is_refused(bad: bytes) -> None:
    with pytest.raises(MessageFormatError):
        up_convert(bad)


def test_a_message_with_a_bad_crc_is_refused() -> None:
    raw = bytearray(message_set(1, 0, [b"abc"]))
    raw[-1] ^= 0xFF
    with pytest.raises(MessageFormatError, match="CRC"):
        up_convert(bytes(raw))


@pytest.mark.parametrize("magic", [0, 1])
def test_fetched_batches_keep_their_offsets_and_lose_headers(magic: int) -> None:
    raw = v2_batch(40, [b"x", b"y"], codec=1) + v2_batch(42, [b"z"])
    got = read_all(down_convert(raw, magic))
    stamp = (lambda t: t) if magic else (lambda t: None)
    assert got == [(40, stamp(5_000), None, b"x", magic), (41, stamp(5_001), None, b"y", magic),
                   (42, stamp(5_000), None, b"z", magic)]


def test_control_batches_are_left_out_and_magic_2_is_unchanged() -> None:
    raw = v2_batch(0, [b"a"]) + v2_batch(1, [b"marker"], control=True)
    assert [r[0] for r in read_all(down_convert(raw, 1))] == [0]
    assert down_convert(raw, 2) == raw
    assert [fetch_magic(v) for v in (0, 1, 2, 3, 4, 13)] == [0, 0, 1, 1, 2, 2]
