"""One partition of a topic: its segment log, its idempotent-producer state, and produce validation.

Synchronous and clock-free. A produce is checked completely (framing, size, CRC, header sanity,
producer sequence: `prepare`) before a byte is written, so an invalid batch never reaches the log; then
the batch is written as the client sent it (compressed or not) with only its base offset and leader
epoch rewritten (`write`). The network handler hands `write` to the group-commit writer
(`storage.group_commit`), which runs it at once on the caller's thread: offset assignment, the sequence
check and the write must be one step (a retry arriving mid-append must see the first attempt), and a
page-cache write of at most message.max.bytes is short. Only the fsync, which can take milliseconds,
waits for the writer's round. `append` is prepare + write without the writer (tools and tests).
"""
from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

from coordinator_server import metrics
from coordinator_server.storage.group_commit import Target
from coordinator_server.storage.log import HEADER_SIZE, BatchInfo, FileIO, PartitionLog
from coordinator_server.topics.producer_state import NO_PRODUCER_ID, ProducerStateManager
from coordinator_server.topics.transactions import BadMarker, PartitionTransactions, parse_marker
from protocol.errors import Errors, KafkaError

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.errors import KafkaError as KafkaClientError
    from kafka.record.default_records import DefaultRecordBatch

_LOG_OVERHEAD = 12
_MIN_LENGTH = HEADER_SIZE - _LOG_OVERHEAD
_MAGIC_POS = 16
_LENGTH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A produced batch that passed every check, ready to be written."""

    info: BatchInfo
    batch: bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: Errors = Errors.NONE
    base_offset: int = -1
    message: str | None = None
    duplicate: bool = False
    log_start_offset: int = -1


def validate_batch(records: bytes | None, max_message_bytes: int) -> tuple[BatchInfo, bytes]:
    """Check the records of one produce partition; returns the one batch's header and bytes.

    Raises KafkaError with Kafka's code: INVALID_RECORD (v3+ wants exactly one batch, base offset
    0, consistent counts, no transactional/control batch here), UNSUPPORTED_FOR_MESSAGE_FORMAT (magic
    0/1), MESSAGE_TOO_LARGE, CORRUPT_MESSAGE (short, bad length, bad CRC).
    """
    if not records:
        raise KafkaError(Errors.INVALID_RECORD, "produce v3+ must carry exactly one record batch")
    if len(records) <= _MAGIC_POS:
        raise KafkaError(Errors.CORRUPT_MESSAGE, f"{len(records)} bytes is too short for a batch")
    magic = records[_MAGIC_POS]
    if magic < 2:
        raise KafkaError(Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                              f"message format v{magic} is not supported; use record batches (v2)")
    if magic > 2:
        raise KafkaError(Errors.CORRUPT_MESSAGE, f"unknown magic {magic}")
    if len(records) < HEADER_SIZE:
        raise KafkaError(Errors.CORRUPT_MESSAGE, f"{len(records)} bytes is too short for a batch")
    length = _LENGTH.unpack_from(records, 8)[0]
    size = _LOG_OVERHEAD + length
    if length < _MIN_LENGTH or size > len(records):
        raise KafkaError(Errors.CORRUPT_MESSAGE, f"batch length {length} does not fit the "
                              f"{len(records)} bytes sent")
    if size < len(records):
        raise KafkaError(Errors.INVALID_RECORD, "produce v3+ must carry exactly one record batch")
    if size > max_message_bytes:
        raise KafkaError(Errors.MESSAGE_TOO_LARGE,
                              f"batch of {size} bytes exceeds message.max.bytes {max_message_bytes}")
    batch = DefaultRecordBatch(records)
    if not batch.validate_crc():
        raise KafkaError(Errors.CORRUPT_MESSAGE, "record batch CRC32C mismatch")
    if _BASE_OFFSET.unpack_from(records, 0)[0] != 0:
        raise KafkaError(Errors.INVALID_RECORD, "a produced batch must have base offset 0")
    count = batch.records_count
    if count < 1 or batch.last_offset_delta != count - 1:
        raise KafkaError(Errors.INVALID_RECORD,
                              f"{count} records with last offset delta {batch.last_offset_delta}")
    if batch.is_control_batch:
        # Markers are the transaction coordinator's to write (WriteTxnMarkers), never a producer's.
        raise KafkaError(Errors.INVALID_RECORD, "a producer may not write control batches")
    info = BatchInfo.parse(records)
    if batch.is_transactional and info.producer_id == NO_PRODUCER_ID:
        raise KafkaError(Errors.INVALID_RECORD, "a transactional batch without a producer id")
    if info.producer_id != NO_PRODUCER_ID and (info.base_sequence < 0 or info.producer_epoch < 0):
        raise KafkaError(Errors.INVALID_RECORD, "idempotent batch without a sequence or epoch")
    return info, bytes(records)


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.producers = ProducerStateManager()
        self.transactions = PartitionTransactions()
        # What the group-commit writer knows of this partition; its fence is set when an fsync failed:
        # the kernel may have dropped the pages, so no more appends until a restart re-reads what is
        # really on disk (the same rule as the coordinator log's).
        self.target = Target(f"{topic}-{index}", log, kind="topic_partition",
                             fields={"topic": topic, "partition": index}, fsync_seconds=metrics.LOG_FSYNC_TOPICS)

    @classmethod
    def open(cls, topic: str, index: int, pdir: Path, segment_bytes: int, file_io: FileIO | None = None
             ) -> Partition:
        part = cls(topic, index, PartitionLog.open_dir(pdir, index, segment_bytes, file_io, deep=False))
        part.rebuild_producer_state()
        return part

    def rebuild_producer_state(self) -> None:
        """Producer state and transactions from the batches in the log (at open, and after a truncation cut
        some), through the same calls as live appends make. A marker's type is read from its record."""
        self.producers = ProducerStateManager()
        self.transactions = PartitionTransactions()
        for info in self.log.batch_infos():
            self._on_batch(info, info.base_offset)

    def _on_batch(self, info: BatchInfo, base: int) -> None:
        if not info.is_control:
            self.producers.on_appended(info, base)
            if info.is_transactional:
                self.transactions.on_transactional_batch(info.producer_id, base)
            return
        raw = self.log.batch_at(base)
        try:
            record = next(iter(DefaultRecordBatch(raw))) if raw is not None else None
            commit, coordinator_epoch = parse_marker(record.key if record else None, record.value if record else None)
        except (BadMarker, StopIteration, KafkaClientError, ValueError):
            return  # not a marker this server can read: it ends nothing (Kafka skips unknown control types)
        self.producers.on_marker(info.producer_id, info.producer_epoch, coordinator_epoch, info.max_timestamp)
        self.transactions.on_marker(info.producer_id, base, commit)

    @property
    def failed(self) -> str | None:
        """Why the partition takes no appends until a restart (a failed fsync), or None."""
        return None if self.target.fenced is None else str(self.target.fenced)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.next_offset

    def prepare(self, records: bytes | None, max_message_bytes: int) -> PreparedBatch | AppendResult:
        """Check one produce partition's records: the batch to write, or the answer without writing
        (an error, or a duplicate of a batch already written)."""
        try:
            info, batch = validate_batch(records, max_message_bytes)
        except KafkaError as e:
            return AppendResult(e.code, message=e.message, log_start_offset=self.log_start_offset)
        if self.failed is not None:
            return AppendResult(Errors.KAFKA_STORAGE_ERROR, message=self.failed)
        check = self.producers.check(info)
        if check.duplicate_of is not None:
            return AppendResult(base_offset=check.duplicate_of, duplicate=True,
                                log_start_offset=self.log_start_offset)
        if check.error != Errors.NONE:
            return AppendResult(check.error, message=check.error.message, log_start_offset=self.log_start_offset)
        return PreparedBatch(info, batch)

    def write(self, prepared: PreparedBatch, leader_epoch: int = 0) -> tuple[int, int]:
        """Write a prepared batch stamped with `leader_epoch` and record its producer's sequence; its
        (base, last) offsets. Raises OSError when the write failed (then nothing was recorded)."""
        base = self.log.append_batches([prepared.batch], leader_epoch)[0]
        self.producers.on_appended(prepared.info, base)
        if prepared.info.is_transactional:
            self.transactions.on_transactional_batch(prepared.info.producer_id, base)
        return base, self.log.next_offset - 1

    def write_marker(self, batch: bytes, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     commit: bool, timestamp_ms: int, leader_epoch: int = 0) -> tuple[int, int]:
        """Write a COMMIT or ABORT control batch (checked by the caller with `producers.check_marker`): the
        producer's transaction here ends at its offset. Raises OSError when the write failed."""
        base = self.log.append_batches([batch], leader_epoch)[0]
        self.producers.on_marker(producer_id, producer_epoch, coordinator_epoch, timestamp_ms)
        self.transactions.on_marker(producer_id, base, commit)
        return base, base

    def last_stable_offset(self, high_watermark: int) -> int:
        """What a read_committed consumer may read below: the first offset of the oldest transaction not
        yet decided and replicated, or the high watermark."""
        if self.transactions.idle:  # every partition without transactions: one check per fetch
            return high_watermark
        self.transactions.on_high_watermark(high_watermark)
        return self.transactions.last_stable_offset(high_watermark)

    def append(self, records: bytes | None, max_message_bytes: int, leader_epoch: int = 0) -> AppendResult:
        """Validate and append one produce partition's records without the writer (not yet durable)."""
        prepared = self.prepare(records, max_message_bytes)
        if isinstance(prepared, AppendResult):
            return prepared
        try:
            base, _ = self.write(prepared, leader_epoch)
        except OSError as e:
            return AppendResult(Errors.KAFKA_STORAGE_ERROR, message=f"append failed: {e}")
        return AppendResult(base_offset=base, log_start_offset=self.log_start_offset)

    def write_as_follower(self, batches: list[bytes]) -> list[tuple[int, int]]:
        """Write batches fetched from the partition's leader as they are (their offsets, epochs and
        producer sequences), recording each producer's sequence so a follower that becomes leader
        still recognises a retried batch; (leader epoch, base offset) per batch."""
        written = self.log.append_as_follower(batches)
        for batch in batches:
            info = BatchInfo.parse(batch)
            self._on_batch(info, info.base_offset)
        return written

    def truncate_to(self, offset: int) -> int:
        """`PartitionLog.truncate_to`, then the producer state rebuilt from the batches that stay (Kafka
        reloads it on truncation too); returns the new log end offset."""
        end = self.log.truncate_to(offset)
        self.rebuild_producer_state()
        return end

    def read(self, offset: int, max_bytes: int, min_one: bool, max_offset: int | None = None) -> bytes:
        return self.log.read_batches(offset, max_bytes, min_one, max_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= timestamp_ms (Kafka's
        fetchOffsetByTimestamp): the batch index finds the batch, its records give the exact one."""
        base = self.log.first_batch_with_timestamp(timestamp_ms)
        if base is None:
            return None
        return self._first_record_at_or_after(base, timestamp_ms)

    def offset_for_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the log's largest timestamp (ListOffsets -3)."""
        found = self.log.max_timestamp_offset()
        return None if found is None else self._first_record_at_or_after(found[0], found[1])

    def _first_record_at_or_after(self, base: int, timestamp_ms: int) -> tuple[int, int] | None:
        raw = self.log.batch_at(base)
        if raw is None:
            return None
        try:
            for rec in DefaultRecordBatch(raw):
                if rec.timestamp >= timestamp_ms:
                    return rec.offset, rec.timestamp
        except (KafkaClientError, ValueError):
            pass  # e.g. a codec not installed here: the batch's base offset is still a valid answer
        info = BatchInfo.parse(raw)
        return info.base_offset, info.max_timestamp

    def close(self) -> None:
        self.log.close()
