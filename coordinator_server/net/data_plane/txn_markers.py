"""COMMIT and ABORT markers written to topic partitions: what the transaction coordinator asks of a
partition leader once a transaction is decided (in process on one node; the same write a WriteTxnMarkers
request asks for).

A marker is a control batch of one record (the producer's id and epoch, base sequence -1, the control and
transactional attribute bits; key: version and type, value: version and coordinator epoch). It is checked
against the partition's producer state (a marker from an epoch older than the producer's, or from a deposed
coordinator, is refused with Kafka's code), written through the same group-commit writer as a Produce, and
acknowledged by the same rule: once durable. Writing it ends the producer's transaction on the partition,
which moves the last stable offset, so read_committed long polls are woken.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from coordinator_server.net.data_plane.partitions import TimerHost
from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.storage.batch import CONTROL_BIT
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.group_commit import Appended, GroupCommitWriter
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.leadership import Leadership
from coordinator_server.topics.store import TopicStore
from coordinator_server.topics.transactions import marker_key, marker_value
from protocol.errors import Errors

_ATTRIBUTES_POS = 21  # the CRC32C covers the batch from Attributes on
_CRC_POS = 17

MarkerAnswer = Callable[[dict[tuple[str, int], Errors]], None]


def control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                  timestamp_ms: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=timestamp_ms, key=marker_key(commit), value=marker_value(coordinator_epoch),
                   headers=[])
    buf = bytearray(builder.build())
    attributes = int.from_bytes(buf[_ATTRIBUTES_POS:_ATTRIBUTES_POS + 2], "big") | CONTROL_BIT
    buf[_ATTRIBUTES_POS:_ATTRIBUTES_POS + 2] = attributes.to_bytes(2, "big")
    buf[_CRC_POS:_CRC_POS + 4] = calc_crc32c(bytes(buf[_ATTRIBUTES_POS:])).to_bytes(4, "big")
    return bytes(buf)


class TopicTxnMarkers:
    def __init__(self, store: TopicStore, writer: GroupCommitWriter, leadership: Leadership,
                 fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], runtime: TimerHost) -> None:
        self.store = store
        self.writer = writer
        self.leadership = leadership
        self.fetch_purgatory = fetch_purgatory
        self.runtime = runtime

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          partitions: Sequence[tuple[str, int]], on_done: MarkerAnswer) -> None:
        """One marker per partition; `on_done` once, with each partition's answer, when all are durable or
        refused."""
        answers: dict[tuple[str, int], Errors] = {}
        waiting: set[tuple[str, int]] = set()
        finished = False

        def settle(key: tuple[str, int], error: Errors) -> None:
            answers[key] = error
            waiting.discard(key)
            if finished and not waiting:
                on_done(answers)

        now_ms = time.time_ns() // 1_000_000
        for key in dict.fromkeys(partitions):
            part = self.store.partition(*key)
            if part is None:
                answers[key] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            refusal, leader_epoch = self.leadership.append_check(part, -1)
            if refusal == Errors.NOT_ENOUGH_REPLICAS:
                refusal = Errors.NONE  # markers are written whatever the ISR; acks wait for the HW below
            if refusal == Errors.NONE:
                refusal = part.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            if refusal != Errors.NONE:
                answers[key] = refusal
                continue
            batch = control_batch(producer_id, producer_epoch, coordinator_epoch, commit, now_ms)

            def durable(appended: Appended, key: tuple[str, int] = key) -> None:
                settle(key, Errors.NONE if appended.error is None else Errors.KAFKA_STORAGE_ERROR)

            waiting.add(key)
            try:
                self.writer.submit(part.target, lambda part=part, batch=batch, le=leader_epoch: part.write_marker(  # type: ignore[misc]
                    batch, producer_id, producer_epoch, coordinator_epoch, commit, now_ms, le), durable)
            except StorageError:
                waiting.discard(key)
                answers[key] = Errors.KAFKA_STORAGE_ERROR
                continue
            self.leadership.appended(part)
            self.fetch_purgatory.check_and_complete(key)
        self.runtime.rearm_timer()
        finished = True
        if not waiting:
            on_done(answers)
