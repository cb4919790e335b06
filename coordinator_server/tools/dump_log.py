"""`coordinator-server dump-log PATH...`: Kafka's `kafka-dump-log.sh` (with `--offsets-decoder`) for our segments.

A PATH is a segment file (`%020d.log`) or a partition directory (all its segments, in offset order). A
segment under `__consumer_offsets-<p>/` has its records decoded with `storage.codec.decode`, the one
decoder of that topic, which the server itself replays with: group metadata (members, and for consumer groups their subscriptions and
assignments decoded with kafka-python's consumer-protocol classes), offset commits, the KIP-848 consumer
group records (`consumer_group_*`, topic ids as UUIDs), tombstones. A segment under
`__transaction_state-<p>/` has its records decoded with the transaction coordinator's own codec
(`txn.records`, Kafka's `--transaction-log-decoder`): each transactional id's metadata (producer id and
epoch, state, timeout, partitions) or its tombstone. Any other segment is a topic partition: one line per
batch header, and with `--print-records` its keys and values.

Read-only and independent of recovery: the server's `PartitionLog.open` would truncate a torn tail and
needs the data directory's lock, and an operator points this tool at a damaged segment precisely to see
the damage. So the walk here never writes, and a bad batch is reported with its byte position instead of
raising: a batch whose CRC fails but whose length fits is shown (`crc_valid: false`) and the walk goes on;
one whose header cannot be trusted (bad magic, impossible length, cut short) ends the walk of that file,
since there is no trustworthy way to find the next batch. Exit 1 if anything was bad, so scripts can ask
"is this segment healthy?".
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator_server.group.consumer.records import CONSUMER_GROUP_RECORD_TYPES
from coordinator_server.group.records import GroupMetadataValue, OffsetCommitRecord
from coordinator_server.storage.codec import OtherRecord, RecordDecodeError, decode_or_error
from coordinator_server.storage.log import HEADER_SIZE
from coordinator_server.tools.output import EXIT_OK, ToolError, run_tool
from coordinator_server.topics.registry import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from coordinator_server.txn.records import UnknownRecord, decode_key, decode_value

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
    from kafka.record.default_records import DefaultRecordBatch

PROG = "coordinator-server dump-log"
OFFSETS_DIR_PREFIX = f"{OFFSETS_TOPIC}-"
TRANSACTIONS_DIR_PREFIX = f"{TRANSACTION_STATE_TOPIC}-"
_LOG_OVERHEAD = 12  # BaseOffset int64 + Length int32: the bytes Length does not count
_MIN_LENGTH = HEADER_SIZE - _LOG_OVERHEAD
_MAGIC_POS = 16
_LENGTH = struct.Struct(">i")
_COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass
class Counts:
    batches: int = 0
    records: int = 0
    bad: int = 0  # corrupt batches, CRC failures and records that do not decode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Decode log segments: __consumer_offsets records "
                                     "(like kafka-dump-log.sh --offsets-decoder) or topic batch headers.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a segment file or a partition directory")
    parser.add_argument("--print-records", action="store_true",
                        help="topic segments: also print each record's key, value and headers")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode every segment as __consumer_offsets (default: only under __consumer_offsets-N/)")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode every segment as __transaction_state (default: only under __transaction_state-N/)")
    parser.add_argument("--json", action="store_true", help="JSON Lines: one object per batch or corruption")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool(PROG, lambda: dump(args))


def segment_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            segments = sorted(path.glob("*.log"))
            if not segments:
                raise ToolError(f"{path}: a directory with no .log segments")
            files += segments
        elif path.is_file():
            files.append(path)
        else:
            raise ToolError(f"{path}: no such file or directory")
    return files


def is_offsets_segment(path: Path) -> bool:
    return path.resolve().parent.name.startswith(OFFSETS_DIR_PREFIX)


def is_transaction_segment(path: Path) -> bool:
    return path.resolve().parent.name.startswith(TRANSACTIONS_DIR_PREFIX)


def dump(args: argparse.Namespace) -> int:
    counts = Counts()
    out = sys.stdout
    for path in segment_files(args.paths):
        decoder: Decoder | None = None
        if args.offsets_decoder or (not args.transaction_log_decoder and is_offsets_segment(path)):
            decoder = decode_offsets_record
        elif args.transaction_log_decoder or is_transaction_segment(path):
            decoder = decode_transaction_record
        if not args.json:
            out.write(f"Dumping {path}\n")
        for item in walk_segment(path, decoder, with_records=decoder is not None or args.print_records):
            _count(item, counts)
            out.write(json.dumps({"file": str(path), **item}) + "\n" if args.json else format_item(item))
    if counts.bad:
        raise ToolError(f"{counts.bad} problem(s) found (corrupt batches, CRC failures or records that do "
                        f"not decode) in {counts.batches} batch(es); see the output")
    return EXIT_OK


def _count(item: dict[str, Any], counts: Counts) -> None:
    if item["type"] == "corrupt":
        counts.bad += 1
        return
    counts.batches += 1
    counts.records += item["count"]
    counts.bad += (not item["crc_valid"]) + (item.get("records_error") is not None)
    counts.bad += sum(1 for r in item.get("records") or [] if r.get("error"))


# ------------------------------------------------------------------------------------------ the walk


# How a coordinator log's (key, value) becomes the fields of its line: None for a topic's records.
Decoder = Callable[[bytes | None, bytes | None], dict[str, Any]]


def walk_segment(path: Path, decoder: Decoder | None, with_records: bool) -> Iterator[dict[str, Any]]:
    """One dict per batch (`type: batch`), or a final `type: corrupt` naming the byte position."""
    try:
        expected = int(path.name.split(".")[0])  # a segment is named after its first offset
    except ValueError:
        expected = None
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        pos = 0
        while pos < size:
            f.seek(pos)
            header = f.read(HEADER_SIZE)
            reason = _header_problem(header, pos, size)
            if reason is not None:
                yield {"type": "corrupt", "position": pos, "error": reason}
                return
            length = _LENGTH.unpack_from(header, 8)[0]
            buf = header + f.read(_LOG_OVERHEAD + length - HEADER_SIZE)
            batch = describe_batch(buf, pos, expected)
            if with_records:
                _add_records(batch, buf, decoder)
            yield batch
            expected = batch["last_offset"] + 1
            pos += len(buf)


def _header_problem(header: bytes, pos: int, size: int) -> str | None:
    left = size - pos
    if left < HEADER_SIZE:
        return f"{left} trailing bytes, less than a batch header ({HEADER_SIZE}): a torn write?"
    magic = header[_MAGIC_POS]
    if magic != 2:
        zeros = " (zeros: a torn or preallocated tail?)" if not any(header) else ""
        return f"magic {magic}, expected 2{zeros}"
    length = _LENGTH.unpack_from(header, 8)[0]
    if length < _MIN_LENGTH:
        return f"batch length {length} is less than the minimum {_MIN_LENGTH}"
    if _LOG_OVERHEAD + length > left:
        return f"batch of {_LOG_OVERHEAD + length} bytes runs past the end of the file ({left} bytes left)"
    return None


def describe_batch(buf: bytes, position: int, expected_offset: int | None) -> dict[str, Any]:
    b = DefaultRecordBatch(buf)
    info: dict[str, Any] = {
        "type": "batch", "position": position, "size": len(buf),
        "base_offset": b.base_offset, "last_offset": b.last_offset, "count": b.records_count,
        "first_timestamp": b.first_timestamp, "max_timestamp": b.max_timestamp,
        "timestamp_type": "LogAppendTime" if b.timestamp_type else "CreateTime",
        "producer_id": b.producer_id, "producer_epoch": b.producer_epoch,
        "base_sequence": b.base_sequence, "last_sequence": b.last_sequence,
        "partition_leader_epoch": b.leader_epoch, "is_transactional": b.is_transactional,
        "is_control": b.is_control_batch, "magic": b.magic,
        "compression": _COMPRESSION.get(b.compression_type, f"unknown({b.compression_type})"),
        "crc": b.crc, "crc_valid": b.validate_crc(),
    }
    if expected_offset is not None and b.base_offset != expected_offset:
        # BaseOffset is outside the CRC: a gap or overlap means a damaged header or a hand-edited log.
        info["offset_warning"] = f"base offset {b.base_offset}, expected {expected_offset}"
    return info


def _add_records(info: dict[str, Any], buf: bytes, decoder: Decoder | None) -> None:
    records: list[dict[str, Any]] = []
    info["records"], info["records_error"] = records, None
    try:
        for r in DefaultRecordBatch(buf):
            rec: dict[str, Any] = {"offset": r.offset, "timestamp": r.timestamp,
                                   "key_size": _size(r.key), "value_size": _size(r.value)}
            if decoder is not None:
                rec.update(decoder(r.key, r.value))
            else:
                rec.update(_bytes_field("key", r.key))
                rec.update(_bytes_field("value", r.value))
                rec["headers"] = [{"key": k, **_bytes_field("value", v)} for k, v in r.headers]
            records.append(rec)
    except Exception as e:  # any failure of the record parser or a decompressor is damage to report
        info["records_error"] = f"records do not parse after {len(records)}: {type(e).__name__}: {e}"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _bytes_field(name: str, data: bytes | None) -> dict[str, Any]:
    """UTF-8 text under `name`, or hex under `name_hex` when the bytes are not text."""
    if data is None:
        return {name: None}
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return {f"{name}_hex": bytes(data).hex()}
    return {name: text}


# ----------------------------------------------------------------------------- __consumer_offsets


def decode_offsets_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    rec = decode_or_error(key, value)
    if isinstance(rec, RecordDecodeError):
        return {"record_type": "unknown", "error": str(rec)}
    if isinstance(rec, OtherRecord):
        # Share-group / streams-group record types: the server skips them on replay, so do we.
        return {"record_type": "unknown", "key_version": rec.key_version}
    if isinstance(rec, OffsetCommitRecord):
        v = rec.value
        return {"record_type": "offset_commit", "group_id": rec.group_id, "topic": rec.topic,
                "partition": rec.partition, "tombstone": v is None,
                "value": None if v is None else {
                    "offset": v.offset, "leader_epoch": v.leader_epoch, "metadata": v.metadata,
                    "commit_timestamp": v.commit_timestamp_ms, "expire_timestamp": v.expire_timestamp_ms}}
    if isinstance(rec, CONSUMER_GROUP_RECORD_TYPES):
        return _consumer_group_record(rec)
    return {"record_type": "group_metadata", "group_id": rec.group_id, "tombstone": rec.value is None,
            "value": None if rec.value is None else _group_value(rec.value)}


# ---------------------------------------------------------------------------- __transaction_state


def decode_transaction_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    if key is None:
        return {"record_type": "unknown", "error": "record has no key"}
    try:
        transactional_id = decode_key(key)
    except UnknownRecord as e:  # a later key version: the server skips it on load, so do we
        return {"record_type": "unknown", "key_version": int.from_bytes(key[:2], "big", signed=True),
                "note": str(e)}
    except Exception as e:
        return {"record_type": "unknown", "error": f"key does not decode: {type(e).__name__}: {e}"}
    try:
        transit = decode_value(value)
    except Exception as e:
        return {"record_type": "transaction_metadata", "transactional_id": transactional_id,
                "error": f"value does not decode: {type(e).__name__}: {e}"}
    out: dict[str, Any] = {"record_type": "transaction_metadata", "transactional_id": transactional_id,
                           "tombstone": transit is None, "value": None}
    if transit is not None:
        out["value"] = {
            "producer_id": transit.producer_id, "producer_epoch": transit.producer_epoch,
            "previous_producer_id": transit.previous_producer_id, "next_producer_id": transit.next_producer_id,
            "state": transit.state.display_name, "transaction_timeout_ms": transit.txn_timeout_ms,
            "partitions": sorted(f"{topic}-{partition}" for topic, partition in transit.partitions),
            "transaction_start_timestamp": transit.txn_start_timestamp_ms,
            "transaction_last_update_timestamp": transit.txn_last_update_timestamp_ms,
            "client_transaction_version": transit.client_transaction_version}
    return out


_CONSUMER_KEY_FIELDS = ("group_id", "member_id", "regex")


def _consumer_group_record(rec: Any) -> dict[str, Any]:
    """A KIP-848 record: its key fields, and its value as plain JSON (sets sorted, UUIDs as strings)."""
    kind = type(rec).__name__.removesuffix("Record")
    name = "consumer_group_" + "".join(f"_{c.lower()}" if c.isupper() else c for c in kind.removeprefix("ConsumerGroup")).lstrip("_")
    fields = {f: getattr(rec, f) for f in _CONSUMER_KEY_FIELDS if hasattr(rec, f)}
    value_field = next(f for f in rec.__dataclass_fields__ if f not in _CONSUMER_KEY_FIELDS)
    value = getattr(rec, value_field)
    plain = _plain(value)
    if value is not None and not hasattr(value, "__dataclass_fields__"):
        plain = {value_field: plain}  # an epoch, the topics, an assignment: named as in the record
    return {"record_type": name, **fields, "tombstone": value is None, "value": None if value is None else plain}


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {f: _plain(getattr(value, f)) for f in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (frozenset, set)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def _group_value(v: GroupMetadataValue) -> dict[str, Any]:
    consumer = v.protocol_type == "consumer"
    return {
        "protocol_type": v.protocol_type, "generation": v.generation, "protocol": v.protocol,
        "leader": v.leader, "current_state_timestamp": v.current_state_timestamp_ms,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "session_timeout_ms": m.session_timeout_ms,
            "subscription": _consumer_bytes(m.subscription, ConsumerProtocolSubscription, consumer),
            "assignment": _consumer_bytes(m.assignment, ConsumerProtocolAssignment, consumer),
        } for m in v.members],
    }


def _consumer_bytes(data: bytes, cls: Any, consumer: bool) -> Any:
    """A consumer group's subscription/assignment decoded; other protocols' bytes only by size."""
    if not consumer or not data:
        return {"bytes": len(data)}
    try:
        decoded = cls.decode(data).to_dict()
    except Exception as e:  # kafka-python's decoder raises assorted errors on bad bytes
        return {"bytes": len(data), "error": f"does not decode: {type(e).__name__}: {e}"}
    if "assigned_partitions" in decoded:
        return {t["topic"]: t["partitions"] for t in decoded["assigned_partitions"]}
    return {"topics": decoded.get("topics", [])}


# ---------------------------------------------------------------------------------------- text form


def format_item(item: dict[str, Any]) -> str:
    if item["type"] == "corrupt":
        return f"CORRUPT at position: {item['position']}: {item['error']}\n"
    b = item
    line = (f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['count']} "
            f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} producerId: {b['producer_id']} "
            f"producerEpoch: {b['producer_epoch']} partitionLeaderEpoch: {b['partition_leader_epoch']} "
            f"isTransactional: {_b(b['is_transactional'])} isControl: {_b(b['is_control'])} "
            f"position: {b['position']} {b['timestamp_type']}: {b['max_timestamp']} "
            f"firstTimestamp: {b['first_timestamp']} size: {b['size']} magic: {b['magic']} "
            f"compresscodec: {b['compression']} crc: {b['crc']} isvalid: {_b(b['crc_valid'])}\n")
    if "offset_warning" in b:
        line += f"WARNING: {b['offset_warning']}\n"
    for r in b.get("records") or []:
        line += f"| offset: {r['offset']} {b['timestamp_type']}: {r['timestamp']} keySize: {r['key_size']} " \
                f"valueSize: {r['value_size']} {_record_text(r)}\n"
    if b.get("records_error"):
        line += f"CORRUPT records at position: {b['position']}: {b['records_error']}\n"
    return line


def _text(r: dict[str, Any], name: str) -> str:
    if name not in r:
        return "hex:" + str(r[f"{name}_hex"])
    return "null" if r[name] is None else str(r[name])


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def _record_text(r: dict[str, Any]) -> str:
    kind = r.get("record_type")
    if kind is None:  # a topic record
        key, value = _text(r, "key"), _text(r, "value")
        headers = json.dumps({h["key"]: h.get("value", h.get("value_hex")) for h in r["headers"]})
        return f"headers: {headers} key: {key} payload: {value}"
    if kind == "unknown":
        return f"key: unknown record type {r.get('key_version', '?')}" + (f" ERROR: {r['error']}" if "error" in r else "")
    if kind == "offset_commit":
        key = f"offset_commit::group={r['group_id']},partition={r['topic']}-{r['partition']}"
    elif kind == "transaction_metadata":
        key = f"transaction_metadata::transactionalId={r['transactional_id']}"
        if "error" in r:
            return f"key: {key} ERROR: {r['error']}"
    elif kind.startswith("consumer_group"):
        extra = "".join(f",{f}={r[f]}" for f in ("member_id", "regex") if f in r)
        key = f"{kind}::group={r['group_id']}{extra}"
    else:
        key = f"group_metadata::group={r['group_id']}"
    payload = "<DELETE>" if r["tombstone"] else json.dumps(r["value"], separators=(",", ":"))
    return f"key: {key} payload: {payload}"
