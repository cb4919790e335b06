"""The topic store over real sockets: kafka-python's producer writes, raw Fetch / KafkaConsumer read."""
from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.codec import has_lz4
from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.apis import API_TABLE

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.integration


class Client:
    """One blocking connection speaking kafka-python's message classes."""

    def __init__(self, srv: ServerProcess) -> None:
        self.sock = socket.create_connection((srv.host, srv.port), timeout=15)
        self.cid = 0

    def send(self, req: ApiMessage, expect: bool = True) -> Any:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="test")
        self.sock.sendall(bytes(req.encode(header=True, framed=True)))
        if not expect:
            return None
        size = struct.unpack(">i", self._recv(4))[0]
        body = self._recv(size)
        return API_TABLE[req.API_KEY].response.decode(body, version=req.API_VERSION, header=True)

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def records_of(raw: bytes) -> list[tuple[int, bytes | None]]:
    out, pos = [], 0
    while pos < len(raw):
        size = 12 + struct.unpack_from(">i", raw, pos + 8)[0]
        out += [(r.offset, r.value) for r in DefaultRecordBatch(raw[pos:pos + size])]
        pos += size
    return out


def fetch(c: Client, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 0,
          max_bytes: int = 1 << 24, partition_max_bytes: int = 1 << 24, version: int = 12) -> Any:
    F = FetchRequest.FetchTopic
    req = FetchRequest[version](
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[F(topic=topic, partitions=[F.FetchPartition(partition=partition, current_leader_epoch=-1,
                                                                 fetch_offset=offset, last_fetched_epoch=-1,
                                                                 log_start_offset=-1,
                                                                 partition_max_bytes=partition_max_bytes)])],
        forgotten_topics_data=[], rack_id="")
    return c.send(req).responses[0].partitions[0]


def produce_raw(c: Client, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9) -> Any:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[version](transactional_id=None, acks=acks, timeout_ms=5000,
                                  topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition,
                                                                                                 records=records)])])
    resp = c.send(req, expect=acks != 0)
    return None if resp is None else resp.responses[0].partition_responses[0]


def a_batch(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=v, headers=[])
    return bytes(b.build())


def consume_all(srv: ServerProcess, topic: str, partition: int, expected: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=srv.address, consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, partition)])
        consumer.seek_to_beginning()
        out = []
        for m in consumer:
            out.append((m.offset, m.value))
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


COMPRESSIONS = [None, "gzip"] + (["lz4"] if has_lz4() else [])


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_idempotent_producer_then_consumer_and_restart(server_factory: ServerFactory, compression: str | None) -> None:
    srv = server_factory(topic=["orders:2"])
    producer = KafkaProducer(bootstrap_servers=srv.address, compression_type=compression, linger_ms=5)
    futures = [producer.send("orders", value=b"v%d" % i, partition=i % 2) for i in range(400)]
    producer.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    assert offsets[0::2] == list(range(200)) and offsets[1::2] == list(range(200))
    expected = [(i, b"v%d" % (2 * i)) for i in range(200)]
    assert consume_all(srv, "orders", 0, 200) == expected
    srv.restart()
    assert consume_all(srv, "orders", 0, 200) == expected
    c = Client(srv)
    p = fetch(c, "orders", 1, 0)
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (0, 200, 0)
    assert records_of(p.records)[:2] == [(0, b"v1"), (1, b"v3")]
    c.close()


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks_levels(server: ServerProcess, acks: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=server.address, acks=acks, enable_idempotence=acks == "all")
    for i in range(50):
        producer.send("acks-topic", value=b"%d" % i)
    producer.flush()
    producer.close()
    assert [v for _, v in consume_all(server, "acks-topic", 0, 50)] == [b"%d" % i for i in range(50)]


def test_raw_produce_errors_and_the_server_keeps_serving(server: ServerProcess) -> None:
    c = Client(server)
    good = a_batch([b"x"])
    bad_crc = good[:-1] + bytes([good[-1] ^ 0xFF])
    assert produce_raw(c, "nope", 0, good).error_code == 3
    create = CreateTopicsRequest[7](topics=[CreateTopicsRequest.CreatableTopic(
        name="raw2", num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=5000,
        validate_only=False)
    assert c.send(create).topics[0].error_code == 0
    assert c.send(create).topics[0].error_code == 36
    assert produce_raw(c, "raw2", 0, bad_crc).error_code == 2
    assert produce_raw(c, "raw2", 0, good[:40]).error_code == 2
    assert produce_raw(c, "raw2", 5, good).error_code == 3
    assert produce_raw(c, "raw2", 1, good).base_offset == 0
    assert fetch(c, "raw2", 0, 0).high_watermark == 0  # nothing of the bad ones was written
    assert fetch(c, "raw2", 1, 5).error_code == 1
    assert fetch(c, "raw2", 1, -1).error_code == 1
    assert produce_raw(c, "raw2", 1, good, acks=0) is None  # no response at all...
    assert fetch(c, "raw2", 1, 0).high_watermark == 2  # ...and the next response is the next request's
    L = ListOffsetsRequest.ListOffsetsTopic
    lo = c.send(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[L(name="raw2", partitions=[
        L.ListOffsetsPartition(partition_index=1, current_leader_epoch=-1, timestamp=t) for t in (-2, -1, 0)])]))
    assert [(p.offset, p.error_code) for p in lo.topics[0].partitions] == [(0, 0), (2, 0), (0, 0)]
    dt = c.send(DeleteTopicsRequest[6](topics=[DeleteTopicsRequest.DeleteTopicState(name="raw2"),
                                                DeleteTopicsRequest.DeleteTopicState(name="ghost")],
                                        timeout_ms=5000))
    assert [r.error_code for r in dt.responses] == [0, 3]
    assert fetch(c, "raw2", 1, 0).error_code == 3
    c.close()


def test_long_poll_fetch_returns_when_a_produce_arrives(server_factory: ServerFactory) -> None:
    srv = server_factory(topic=["poll:1"])
    waiter, writer = Client(srv), Client(srv)
    start = time.monotonic()
    req_done: dict[str, Any] = {}

    import threading

    def poll() -> None:
        req_done["p"] = fetch(waiter, "poll", 0, 0, max_wait_ms=5000, min_bytes=1)
        req_done["t"] = time.monotonic() - start

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)
    assert "p" not in req_done  # parked
    assert produce_raw(writer, "poll", 0, a_batch([b"wake"])).error_code == 0
    t.join(10)
    assert req_done["t"] < 4.0
    assert records_of(req_done["p"].records) == [(0, b"wake")]
    # With nothing arriving, max_wait_ms bounds the wait.
    t0 = time.monotonic()
    p = fetch(waiter, "poll", 0, 1, max_wait_ms=300, min_bytes=1)
    assert p.error_code == 0 and p.records in (b"", None) and time.monotonic() - t0 >= 0.25
    waiter.close()
    writer.close()


def test_fetch_limits_kip74(server_factory: ServerFactory) -> None:
    srv = server_factory(topic=["big:1"])
    c = Client(srv)
    for i in range(3):
        assert produce_raw(c, "big", 0, a_batch([b"%d" % i * 1000])).error_code == 0
    p = fetch(c, "big", 0, 0, max_bytes=10, partition_max_bytes=10)
    assert [o for o, _ in records_of(p.records)] == [0]  # one whole batch past the limits
    p = fetch(c, "big", 0, 0, max_bytes=-5)
    assert [o for o, _ in records_of(p.records)] == [0]
    assert fetch(c, "big", 0, 0, partition_max_bytes=-1).error_code == 4
    c.close()
