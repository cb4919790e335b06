"""The data plane's oldest and newest versions over real sockets: Produce v0-2 and Fetch v0-3 in the old
message formats (kafka-go 0.2.1 speaks nothing newer), Fetch v13 with topics named by id (@platformatic/kafka
speaks nothing older)."""
from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.errors import Errors
from tests.integration.test_topics import Client, produce_raw

from .conftest import ServerFactory

pytestmark = pytest.mark.integration


def message_set(magic: int, values: list[bytes]) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + i if magic else None, key=None, value=v)
    return bytes(b.build())


def fetch(c: Client, version: int, topic: str | None = None, topic_id: uuid.UUID | None = None,
          partition: int = 0, offset: int = 0) -> Any:
    F = FetchRequest.FetchTopic
    req = FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[F(topic=topic, topic_id=topic_id, partitions=[F.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20)])])
    return c.send(req).responses[0]


def read_all(raw: bytes) -> list[tuple[int, int, bytes | None]]:
    records, out = MemoryRecords(raw), []
    while (batch := records.next_batch()) is not None:
        out += [(batch.magic, r.offset, r.value) for r in batch]
    return out


def test_old_message_formats_in_and_out_and_topics_by_id(server_factory: ServerFactory) -> None:
    srv = server_factory(topic=["old:1"])
    c = Client(srv)
    try:
        for version, magic in ((0, 0), (2, 1)):
            r = produce_raw(c, "old", 0, message_set(magic, [b"v%d-a" % version, b"v%d-b" % version]),
                            version=version)
            assert (r.error_code, r.base_offset) == (0, 0 if version == 0 else 2)
        r = produce_raw(c, "old", 0, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10garbage", version=1)
        assert r.error_code == Errors.CORRUPT_MESSAGE
        values = [b"v0-a", b"v0-b", b"v2-a", b"v2-b"]
        # Fetch v0-1 answer in magic 0, v2-3 in magic 1, with the offsets the log gave.
        for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
            p = fetch(c, version, topic="old").partitions[0]
            assert (p.error_code, p.high_watermark) == (0, 4)
            assert read_all(p.records) == [(magic, i, v) for i, v in enumerate(values)]
        [meta] = c.send(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="old", topic_id=None)],
                                            allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False)).topics
        by_id = fetch(c, 13, topic_id=meta.topic_id, offset=2)
        assert by_id.topic_id == meta.topic_id
        assert read_all(by_id.partitions[0].records) == [(2, 2, b"v2-a"), (2, 3, b"v2-b")]
        unknown = fetch(c, 13, topic_id=uuid.uuid4())
        assert unknown.partitions[0].error_code == Errors.UNKNOWN_TOPIC_ID
        assert fetch(c, 12, topic="old").partitions[0].error_code == 0  # the connection still serves
    finally:
        c.close()
