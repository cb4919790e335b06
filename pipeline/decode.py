"""Segment bytes -> plain rows, the generic way, with no Spark in sight: the topic segments' batch headers,
and the reference and fallback of `pipeline.columns`, which decodes `__consumer_offsets` in the Spark
tasks column-wise and hands this module every batch and record it does not take itself.

The format work is all borrowed: kafka-python's `DefaultRecordBatch` walks and CRC-checks the v2 batches,
`coordinator_server.storage.codec.decode` — the one decoder of `__consumer_offsets`, which the server
replays its own log with and `dump-log` prints with — reads the keys and values (record types the server
does not load come back as `OtherRecord`), and kafka-python's `ConsumerProtocolSubscription` /
`ConsumerProtocolAssignment` read a consumer group's member bytes. This module only maps their objects
to rows.

A damaged segment does not fail the job: analytics over a log copied off a crashed node must still run.
A batch whose CRC fails is reported as one `error` row and skipped (its length is trusted to find the
next batch, as `dump-log` does); a header that cannot be trusted (bad magic, impossible length, a torn
tail) ends that file (or byte range, the last of its file) with one `error` row, since there is no
trustworthy way to find the next batch.
The jobs drop error rows; the CLI counts them (docs/pipeline.md).
"""
from __future__ import annotations

import re
import struct
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

from coordinator_server.group.consumer.records import (
    Assignment,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRegularExpressionRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
)
from coordinator_server.group.records import GroupMetadataRecord, GroupMetadataValue, OffsetCommitRecord
from coordinator_server.storage.codec import (
    OtherRecord,
    RecordDecodeError,
    decode_or_error,
    record_key_version,
)

# kafka-python 3.0.12 reads its JSON specs with importlib.resources functions deprecated since 3.11.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
    from kafka.record.default_records import DefaultRecordBatch

_HEADER = DefaultRecordBatch.HEADER_STRUCT
_HEADER_SIZE = _HEADER.size  # 61: BaseOffset .. RecordsCount
_LOG_OVERHEAD = 12  # BaseOffset int64 + Length int32, not counted by Length
MIN_BATCH_LENGTH = _HEADER_SIZE - _LOG_OVERHEAD  # the shortest Length a batch header fits in
_MAGIC_POS = 16
_LENGTH = struct.Struct(">i")
# `<anything>/<partition dir>/<20 digits>.log`; a partition dir is `<topic>-<n>` (Kafka's naming). Deleted
# topics' `<topic>-<n>.<hex>-delete` directories do not match and are skipped.
_SEGMENT_PATH = re.compile(r"^(?P<node>.*)/(?P<topic>[^/]+)-(?P<partition>\d+)/(?P<base>\d{20})\.log$")


class SegmentPath(NamedTuple):
    node: str  # the data directory (as the URI Spark listed it): one per server whose log this is
    topic: str
    partition: int
    base_offset: int


def parse_segment_path(path: str) -> SegmentPath | None:
    """Where a segment sits, from its path; None for anything that is not a partition's segment."""
    m = _SEGMENT_PATH.match(path)
    if m is None:
        return None
    return SegmentPath(m["node"], m["topic"], int(m["partition"]), int(m["base"]))


# ----------------------------------------------------------------------------------------- batches


def walk_batches(content: bytes, start: int = 0, end: int | None = None,
                 ) -> Iterator[tuple[int, DefaultRecordBatch | None, str | None]]:
    """(position, batch, None) per good batch, (position, None, error) per bad one; a bad header ends it.

    `[start, end)` is a byte range of whole batches (`pipeline.segments` cuts a large segment into
    ranges at batch boundaries); positions stay those in the segment, and the range's end is where a
    header is checked against, so the last range of a segment reports a torn tail as the whole would.
    """
    pos, size = start, len(content) if end is None else end
    while pos < size:
        problem = header_problem(content, pos, size)
        if problem is not None:
            yield pos, None, problem
            return
        batch_end = pos + _LOG_OVERHEAD + _LENGTH.unpack_from(content, pos + 8)[0]
        batch = DefaultRecordBatch(content[pos:batch_end])
        if batch.validate_crc():
            yield pos, batch, None
        else:
            yield pos, None, f"CRC32C mismatch in the batch at byte {pos}"
        pos = batch_end


def header_problem(content: bytes, pos: int, size: int) -> str | None:
    left = size - pos
    if left < _HEADER_SIZE:
        return f"{left} trailing bytes at byte {pos}, less than a batch header: a torn write?"
    magic = content[pos + _MAGIC_POS]
    if magic != 2:
        return f"magic {magic} at byte {pos}, expected 2"
    length = _LENGTH.unpack_from(content, pos + 8)[0]
    if length < MIN_BATCH_LENGTH or _LOG_OVERHEAD + length > left:
        return f"batch length {length} at byte {pos} does not fit the {left} bytes left: a torn write?"
    return None


# ------------------------------------------------------------------------------ __consumer_offsets


def offsets_rows(where: SegmentPath, content: bytes, start: int = 0, end: int | None = None,
                 ) -> Iterator[dict[str, Any]]:
    """One row per record of a `__consumer_offsets` segment (see `reader.RECORD_SCHEMA`): the generic
    decoding, row by row. The Spark tasks run `pipeline.columns`, which gives the same rows column-wise
    and falls back to `batch_rows` for any batch it does not take."""
    base = segment_base(where)
    for pos, batch, error in walk_batches(content, start, end):
        if batch is None:
            yield {**base, "offset": None, "position": pos, "record_type": "error", "error": error}
        else:
            yield from batch_rows(base, pos, batch)


def segment_base(where: SegmentPath) -> dict[str, Any]:
    """The columns every row of a segment shares."""
    return {"node": where.node, "log_partition": where.partition, "segment": where.base_offset}


def batch_rows(base: dict[str, Any], pos: int, batch: DefaultRecordBatch) -> Iterator[dict[str, Any]]:
    """The rows of one CRC-checked batch at byte `pos`, through kafka-python's record parser."""
    if batch.is_control_batch or batch.is_transactional:
        # The server never writes these and skips nothing silently; neither do we.
        yield {**base, "offset": batch.base_offset, "position": pos, "record_type": "error",
               "error": "transactional or control batch, not read"}
        return
    try:
        records = [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    except Exception as e:  # kafka-python's record parser or a decompressor: damage to report
        yield {**base, "offset": batch.base_offset, "position": pos, "record_type": "error",
               "error": f"records do not parse: {type(e).__name__}: {e}"}
        return
    for offset, timestamp, key, value in records:
        row = {**base, "offset": offset, "position": pos, "timestamp": timestamp}
        row.update(offsets_record(key, value))
        yield row


def offsets_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    match decode_or_error(key, value):
        case RecordDecodeError() as e:
            return {"record_type": "error", "error": str(e)}
        case OtherRecord(key_version=version):
            # Share / streams group records: the server skips them on replay, and so do the jobs.
            return {"record_type": "other", "key_version": version}
        case rec if (consumer_row := _consumer_group_row(rec)) is not None:
            # KIP-848 consumer group records: rows of their own; the jobs count them, as they count the
            # types they skip (docs/pipeline.md).
            return {**consumer_row, "key_version": record_key_version(bytes(key or b""))}
        case OffsetCommitRecord() as commit:
            return _offset_commit_row(commit)
        case GroupMetadataRecord(group_id=group, value=group_value):
            row: dict[str, Any] = {"record_type": "group_metadata", "group": group,
                                   "tombstone": group_value is None}
            if group_value is not None:
                row.update(_group_value(group_value))
            return row
    raise AssertionError("decode_or_error returns one of the four")


def _consumer_group_row(rec: object) -> dict[str, Any] | None:
    """A KIP-848 record as a `consumer_group` row: which record (`consumer_record`), its key (group, member,
    regex) and what the jobs could use of its value: an epoch, a member's subscription and type, an
    assignment by topic id, the subscribed topics. None for any other record."""
    row: dict[str, Any]
    match rec:
        case ConsumerGroupMetadataRecord(group_id=g, epoch=epoch):
            row = {"consumer_record": "metadata", "group": g, "tombstone": epoch is None, "epoch": epoch}
        case ConsumerGroupPartitionMetadataRecord(group_id=g, topics=topics):
            row = {"consumer_record": "partition_metadata", "group": g, "tombstone": topics is None,
                   "subscribed_topics": None if topics is None else sorted(t.name for t in topics)}
        case ConsumerGroupMemberMetadataRecord(group_id=g, member_id=m, value=v):
            row = {"consumer_record": "member_metadata", "group": g, "member_id": m, "tombstone": v is None}
            if v is not None:
                row.update(subscribed_topics=sorted(v.subscribed_topic_names), regex=v.subscribed_topic_regex,
                           member_type="consumer" if v.classic_member_metadata is None else "classic",
                           client_id=v.client_id, client_host=v.client_host, group_instance_id=v.instance_id)
        case ConsumerGroupTargetAssignmentMetadataRecord(group_id=g, assignment_epoch=epoch):
            row = {"consumer_record": "target_assignment_metadata", "group": g, "tombstone": epoch is None,
                   "epoch": epoch}
        case ConsumerGroupTargetAssignmentMemberRecord(group_id=g, member_id=m, partitions=partitions):
            row = {"consumer_record": "target_assignment_member", "group": g, "member_id": m,
                   "tombstone": partitions is None, "consumer_assignment": _by_topic_id(partitions)}
        case ConsumerGroupCurrentMemberAssignmentRecord(group_id=g, member_id=m, value=v):
            row = {"consumer_record": "current_member_assignment", "group": g, "member_id": m, "tombstone": v is None}
            if v is not None:
                row.update(epoch=v.member_epoch, consumer_assignment=_by_topic_id(v.assigned_partitions))
        case ConsumerGroupRegularExpressionRecord(group_id=g, regex=regex, value=v):
            row = {"consumer_record": "regular_expression", "group": g, "regex": regex, "tombstone": v is None,
                   "subscribed_topics": None if v is None else sorted(v.topics)}
        case _:
            return None
    return {"record_type": "consumer_group", **row}


def _by_topic_id(assignment: Assignment | None) -> list[dict[str, Any]] | None:
    if assignment is None:
        return None
    return [{"topic_id": str(t), "partitions": sorted(p)} for t, p in sorted(assignment.items(), key=lambda kv: str(kv[0]))]


def _offset_commit_row(rec: OffsetCommitRecord) -> dict[str, Any]:
    v = rec.value
    row: dict[str, Any] = {"record_type": "offset_commit", "group": rec.group_id, "topic": rec.topic,
                           "partition": rec.partition, "tombstone": v is None}
    if v is not None:
        row.update(committed_offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata,
                   commit_timestamp=v.commit_timestamp_ms,
                   expire_timestamp=None if v.expire_timestamp_ms < 0 else v.expire_timestamp_ms)
    return row


def _group_value(v: GroupMetadataValue) -> dict[str, Any]:
    consumer = v.protocol_type == "consumer"
    members = []
    for m in v.members:
        topics, assignment, error = None, None, None
        if consumer:
            topics, assignment, error = _consumer_protocol(m.subscription, m.assignment)
        members.append({
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "session_timeout_ms": m.session_timeout_ms, "subscribed_topics": topics, "assignment": assignment,
            "protocol_error": error,
        })
    return {"protocol_type": v.protocol_type, "generation": v.generation, "protocol": v.protocol,
            "leader": v.leader,
            "state_timestamp": None if v.current_state_timestamp_ms < 0 else v.current_state_timestamp_ms,
            "members": members}


def _consumer_protocol(subscription: bytes, assignment: bytes) -> tuple[Any, Any, str | None]:
    """(subscribed topics, [{topic, partitions}], error) of a consumer group member's bytes. Empty bytes
    are "nothing yet" (a member recorded before its first SyncGroup), not an error."""
    topics: list[str] | None = None
    assigned: list[dict[str, Any]] | None = None
    try:
        if subscription:
            topics = sorted(t for t in ConsumerProtocolSubscription.decode(bytes(subscription)).topics if t)
        if assignment:
            decoded = ConsumerProtocolAssignment.decode(bytes(assignment)).to_dict()
            assigned = [{"topic": t["topic"], "partitions": sorted(t["partitions"])}
                        for t in sorted(decoded["assigned_partitions"], key=lambda t: t["topic"])]
        else:
            assigned = []
    except Exception as e:  # kafka-python raises assorted errors on malformed bytes
        return topics, assigned, f"consumer protocol bytes do not decode: {type(e).__name__}: {e}"
    return topics, assigned, None


# ---------------------------------------------------------------------------------------- topics


def topic_batch_rows(where: SegmentPath, content: bytes, start: int = 0, end: int | None = None,
                     ) -> Iterator[dict[str, Any]]:
    """One row per batch header of a topic segment: enough for log-end offsets over time, and no record is
    parsed (topic data can be large and the jobs need none of it)."""
    base = {"node": where.node, "topic": where.topic, "partition": where.partition}
    for pos, batch, error in walk_batches(content, start, end):
        if batch is None:
            yield {**base, "position": pos, "error": error}
            continue
        yield {**base, "position": pos, "base_offset": batch.base_offset, "last_offset": batch.last_offset,
               "records": batch.records_count, "first_timestamp": batch.first_timestamp,
               "max_timestamp": batch.max_timestamp, "is_control": batch.is_control_batch}
