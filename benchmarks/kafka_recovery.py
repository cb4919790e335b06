"""Coordinator load after a restart, on Apache Kafka: the recovery scenario's `__consumer_offsets`, produced
into a real broker, then the broker restarted on that log.

The server's recovery scenario writes its log straight to disk (benchmarks/preload.py). Kafka has no such
path, but it takes the very same records over the wire: a Produce to `__consumer_offsets` is allowed from
the client id Kafka's own admin tools use (`__admin_client`), so `preload.commit_batches` — the same commits,
keys, batches of 10 and partitions — is produced as it is (acks=1, up to 50 partitions a request, a few
requests in flight). Kafka is then stopped cleanly and started again on the same log dir, and it is ready
when every partition of `__consumer_offsets` is loaded (tests/kafka/broker.py: a DescribeGroups of one
probe group per partition answers with no error); an OffsetFetch then checks that the last commit of a key
came back. Load time is that start-up minus the start-up of the same broker with an empty
`__consumer_offsets` (the JVM, KRaft and fifty empty partitions), as for the server.
"""
from __future__ import annotations

import socket
import statistics
import struct
import time
import warnings
from collections import defaultdict, deque
from typing import Any

from coordinator_server.storage.batch import build_batch
from coordinator_server.topics.registry import OFFSETS_TOPIC
from tests.kafka.broker import KafkaBroker, recv_exactly

from . import preload, wire

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import OffsetFetchResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

ADMIN_CLIENT_ID = "__admin_client"  # the client id Kafka lets write to its internal topics
PRODUCE_VERSION = 7
IN_FLIGHT = 8
BUFFERED_BATCHES = 5_000  # batches gathered before requests are cut, so each spans many partitions


class _Producer:
    """Produce requests over one connection, IN_FLIGHT at a time, every answer checked."""

    def __init__(self, kafka: KafkaBroker) -> None:
        self.sock = socket.create_connection((kafka.host, kafka.port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0
        self.outstanding = 0

    def send(self, batches: dict[int, bytes]) -> None:
        t = ProduceRequest.TopicProduceData
        self.correlation += 1
        request = ProduceRequest[PRODUCE_VERSION](transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
            t(name=OFFSETS_TOPIC, partition_data=[t.PartitionProduceData(index=p, records=b)
                                                  for p, b in batches.items()])])
        self.sock.sendall(wire.encode(request, self.correlation, client_id=ADMIN_CLIENT_ID))
        self.outstanding += 1
        if self.outstanding > IN_FLIGHT:
            self._read()

    def _read(self) -> None:
        size = struct.unpack(">i", recv_exactly(self.sock, 4))[0]
        response = ProduceResponse.decode(recv_exactly(self.sock, size), version=PRODUCE_VERSION, header=True)
        self.outstanding -= 1
        errors = {p.error_code for t in response.responses for p in t.partition_responses} - {0}
        if errors:
            raise RuntimeError(f"Kafka refused a produce to {OFFSETS_TOPIC}: error codes {sorted(errors)}")

    def close(self) -> None:
        while self.outstanding:
            self._read()
        self.sock.close()


def produce_commits(kafka: KafkaBroker, records: int, keys: int) -> dict[str, Any]:
    started = time.perf_counter()
    now = int(time.time() * 1000)
    producer = _Producer(kafka)
    # One batch per partition per request (Kafka takes no more), a partition's batches in their order.
    queues: defaultdict[int, deque[bytes]] = defaultdict(deque)

    def cut(final: bool) -> None:
        while queues and (final or len(queues) == preload.PARTITIONS):
            producer.send({p: q.popleft() for p, q in queues.items()})
            for p in [p for p, q in queues.items() if not q]:
                del queues[p]

    written = 0
    for partition, recs in preload.commit_batches(records, keys, now):
        queues[partition].append(build_batch(recs, 0, now))
        written += len(recs)
        if written % (BUFFERED_BATCHES * len(recs)) == 0:
            cut(final=False)
    cut(final=True)
    producer.close()
    return {"records": written, "keys": max(1, keys // 100) * 100, "produce_s": time.perf_counter() - started}


def _last_offset(kafka: KafkaBroker) -> int:
    """The committed offset of partition 0 of the first group, read back after the restart."""
    with socket.create_connection((kafka.host, kafka.port), timeout=30) as sock:
        sock.sendall(wire.fetch_offsets_frame(preload.group_id(0), preload.TOPIC))
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        response = OffsetFetchResponse.decode(recv_exactly(sock, size), version=wire.FETCH_OFFSETS_VERSION, header=True)
    return int(response.groups[0].topics[0].partitions[0].committed_offset)


def _restart(kafka: KafkaBroker) -> float:
    kafka.stop()
    kafka.start(fresh=False)
    return kafka.started_s


def run(kafka: KafkaBroker, records: int, keys: int, repeats: int) -> dict[str, Any]:
    """`kafka` freshly started, and nothing else run on it yet."""
    empties = [_restart(kafka) for _ in range(repeats)]
    produced = produce_commits(kafka, records, keys)
    loaded = [_restart(kafka) for _ in range(repeats)]
    # Key (group 0, partition 0) is the first of each round of `commit_batches`, its value round*1000.
    expected = (produced["records"] - 1) // produced["keys"] * 1000
    if (got := _last_offset(kafka)) != expected:
        raise RuntimeError(f"Kafka loaded offset {got} for the first key, not the last committed {expected}")
    startup, empty = statistics.median(loaded), statistics.median(empties)
    return produced | {
        "startup_s": startup, "startup_runs_s": loaded, "empty_startup_s": empty, "empty_startup_runs_s": empties,
        "records_per_s": produced["records"] / max(1e-3, startup - empty),
    }
