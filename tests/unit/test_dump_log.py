"""`coordinator-server dump-log` on segments written by the real storage code: the coordinator's
`__consumer_offsets` records decoded, topic batch headers and records, and damage reported by position."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.record.default_records import DefaultRecordBatchBuilder

from coordinator_server.cli import main as cli_main
from coordinator_server.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage.codec import encode_record
from coordinator_server.storage.log import PartitionLog
from coordinator_server.topics.store import StoreConfig, TopicStore
from coordinator_server.txn.metadata import TxnTransit
from coordinator_server.txn.records import encode_key, encode_value
from coordinator_server.txn.state import TransactionState

TP = ConsumerProtocolAssignment.TopicPartition


def consumer_member(member_id: str, partitions: list[int]) -> MemberRecord:
    subscription = ConsumerProtocolSubscription(version=0, topics=["orders"], user_data=b"").encode()
    assignment = ConsumerProtocolAssignment(version=0, assigned_partitions=[TP(topic="orders", partitions=partitions)],
                                            user_data=b"").encode()
    return MemberRecord(member_id, "static-1", "client-a", "/10.0.0.1", 300_000, 45_000,
                        bytes(subscription), bytes(assignment))


def write_offsets_log(data_dir: Path, partition: int = 3) -> Path:
    log = PartitionLog.open(data_dir, partition)
    group = GroupMetadataValue("consumer", 4, "range", "m-1", 1_700_000_000_000,
                               (consumer_member("m-1", [0, 2]),))
    log.append([encode_record(GroupMetadataRecord("g1", group))], 1_000)
    log.append([encode_record(OffsetCommitRecord("g1", "orders", 0, OffsetCommitValue(42, 5, "meta", 1_001, -1))),
                encode_record(OffsetCommitRecord("g1", "orders", 2, OffsetCommitValue(7, -1, "", 1_001, 9_999)))],
               1_001)
    log.append([encode_record(OffsetCommitRecord("g1", "orders", 2, None)),
                encode_record(GroupMetadataRecord("g1", None))], 1_002)
    log.sync()
    log.close()
    return data_dir / f"__consumer_offsets-{partition}" / f"{0:020d}.log"


def topic_batch(values: list[bytes], compression: int = 0, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=sys.maxsize)
    for i, v in enumerate(values):
        b.append(i, timestamp=5_000 + i, key=b"key-%d" % i, value=v, headers=[("h", b"\xff\x00")])
    return bytes(b.build())


def write_topic_log(data_dir: Path) -> Path:
    store = TopicStore.open(StoreConfig(data_dir=data_dir), 50)
    store.create_topic("orders", 1)
    p = store.partition("orders", 0)
    assert p is not None
    assert p.append(topic_batch([b"a", b"b"], pid=9, epoch=1, seq=0), 1 << 20).error == 0
    assert p.append(topic_batch([b"c" * 300, b"\xfe\xff", b"e"], compression=1), 1 << 20).error == 0
    store.close()
    return data_dir / "orders-0" / f"{0:020d}.log"


def dump_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    code = cli_main(["dump-log", "--json", *args])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_offsets_segment_is_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_offsets_log(tmp_path)
    code, items, err = dump_json(capsys, str(path))
    assert (code, err) == (0, "")
    assert [(b["base_offset"], b["last_offset"], b["count"], b["crc_valid"]) for b in items] == [
        (0, 0, 1, True), (1, 2, 2, True), (3, 4, 2, True)]
    group = items[0]["records"][0]
    assert (group["record_type"], group["group_id"], group["tombstone"]) == ("group_metadata", "g1", False)
    value = group["value"]
    assert (value["generation"], value["protocol"], value["leader"]) == (4, "range", "m-1")
    member = value["members"][0]
    assert member["assignment"] == {"orders": [0, 2]}
    assert member["subscription"] == {"topics": ["orders"]}
    assert (member["group_instance_id"], member["client_host"]) == ("static-1", "/10.0.0.1")
    commits = items[1]["records"]
    assert [(r["topic"], r["partition"], r["value"]["offset"]) for r in commits] == [("orders", 0, 42), ("orders", 2, 7)]
    assert commits[0]["value"]["leader_epoch"] == 5
    assert commits[1]["value"]["expire_timestamp"] == 9_999  # written as OffsetCommitValue v1
    assert [(r["record_type"], r["tombstone"]) for r in items[2]["records"]] == [
        ("offset_commit", True), ("group_metadata", True)]


def test_offsets_segment_text_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A partition directory is dumped segment by segment.
    path = write_offsets_log(tmp_path)
    assert cli_main(["dump-log", str(path.parent)]) == 0
    out = capsys.readouterr().out
    assert f"Dumping {path}" in out
    assert "baseOffset: 1 lastOffset: 2 count: 2" in out and "isvalid: true" in out
    assert "key: group_metadata::group=g1 payload: {" in out
    assert '"assignment":{"orders":[0,2]}' in out
    assert "key: offset_commit::group=g1,partition=orders-0 payload: {\"offset\":42" in out
    assert "key: offset_commit::group=g1,partition=orders-2 payload: <DELETE>" in out


def test_topic_segment_headers_and_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_topic_log(tmp_path)
    capsys.readouterr()  # the store's own log lines (structlog prints to stdout outside the server)
    code, items, _ = dump_json(capsys, str(path))
    assert code == 0
    first, second = items
    assert (first["base_offset"], first["last_offset"], first["count"]) == (0, 1, 2)
    assert (first["producer_id"], first["producer_epoch"], first["base_sequence"], first["last_sequence"]) == (9, 1, 0, 1)
    assert (first["first_timestamp"], first["max_timestamp"], first["compression"]) == (5_000, 5_001, "none")
    assert (second["base_offset"], second["compression"], second["crc_valid"]) == (2, "gzip", True)
    assert "records" not in first  # only with --print-records

    code, items, _ = dump_json(capsys, "--print-records", str(path))
    records = items[1]["records"]
    assert [r["offset"] for r in records] == [2, 3, 4]
    assert (records[0]["key"], records[0]["value"]) == ("key-0", "c" * 300)
    assert records[1]["value_hex"] == "feff"  # not UTF-8: shown as hex
    assert records[0]["headers"] == [{"key": "h", "value_hex": "ff00"}]


def test_crc_failure_is_reported_and_the_walk_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_offsets_log(tmp_path)
    data = bytearray(path.read_bytes())
    second = dump_json(capsys, str(path))[1][0]["size"]  # where the second batch starts
    data[second + 70] ^= 0xFF  # a byte inside its records: covered by the CRC
    path.write_bytes(bytes(data))
    code, items, err = dump_json(capsys, str(path))
    assert code == 1 and "problem(s) found" in err
    assert [b["crc_valid"] for b in items] == [True, False, True]  # the third batch is still read
    assert items[1]["position"] == second


def test_torn_tail_is_reported_with_its_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_offsets_log(tmp_path)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00" * 80)  # zeros a crash left behind
    code, items, err = dump_json(capsys, str(path))
    assert code == 1
    assert items[-1]["type"] == "corrupt" and items[-1]["position"] == size
    assert "magic 0" in items[-1]["error"] and "zeros" in items[-1]["error"]
    assert len(items) == 4  # the three good batches before it were dumped

    path.write_bytes(path.read_bytes()[:size - 10])  # the last batch cut short
    assert cli_main(["dump-log", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "CORRUPT at position:" in out and "runs past the end of the file" in out
    assert err.startswith("coordinator-server dump-log: error:")


def test_undecodable_record_is_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = PartitionLog.open(tmp_path, 0)
    key, _ = encode_record(GroupMetadataRecord("g", None))
    log.append([(key, b"\x00\x63garbage"), (b"\x00\x0bshare-group-key", b"v")], 1)  # bad version; a KIP-848+ type
    log.sync()
    log.close()
    code, items, _ = dump_json(capsys, str(tmp_path / "__consumer_offsets-0"))
    assert code == 1
    bad, unknown = items[0]["records"]
    assert bad["record_type"] == "unknown" and "version 99" in bad["error"]
    assert unknown == {**unknown, "record_type": "unknown", "key_version": 11}
    assert "error" not in unknown  # an unknown type is skipped, as the server's replay does


def test_missing_path_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["dump-log", str(tmp_path / "nope.log")]) == 1
    assert capsys.readouterr().err.strip() == f"coordinator-server dump-log: error: {tmp_path / 'nope.log'}: no such file or directory"


def test_consumer_group_records_are_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import uuid

    from coordinator_server.group.consumer import records as cg
    topic = uuid.UUID("0102030405060708090a0b0c0d0e0f10")
    log = PartitionLog.open(tmp_path, 1)
    log.append([encode_record(cg.ConsumerGroupMetadataRecord("cg", 3)),
                encode_record(cg.ConsumerGroupCurrentMemberAssignmentRecord("cg", "m-1", cg.CurrentAssignmentValue(
                    3, 2, 1, {topic: frozenset({2, 0})}, {topic: frozenset({5})}))),
                encode_record(cg.ConsumerGroupMemberMetadataRecord("cg", "m-1", None))], 1_000)
    log.sync()
    log.close()
    code, items, _err = dump_json(capsys, "--print-records", str(tmp_path / "__consumer_offsets-1"))
    assert code == 0
    epoch, assignment, tombstone = items[0]["records"]
    assert (epoch["record_type"], epoch["group_id"], epoch["value"]) == ("consumer_group_metadata", "cg", {"epoch": 3})
    assert assignment["record_type"] == "consumer_group_current_member_assignment" and assignment["member_id"] == "m-1"
    assert assignment["value"]["assigned_partitions"] == {str(topic): [0, 2]}
    assert assignment["value"]["partitions_pending_revocation"] == {str(topic): [5]}
    assert (tombstone["record_type"], tombstone["tombstone"]) == ("consumer_group_member_metadata", True)
    cli_main(["dump-log", "--print-records", str(tmp_path / "__consumer_offsets-1")])
    text = capsys.readouterr().out
    assert "key: consumer_group_member_metadata::group=cg,member_id=m-1 payload: <DELETE>" in text


def write_transaction_log(data_dir: Path) -> Path:
    log = PartitionLog.open_dir(data_dir / "__transaction_state-7", 7)
    ongoing = TxnTransit(producer_id=77, previous_producer_id=-1, next_producer_id=-1, producer_epoch=4,
                         last_producer_epoch=-1, txn_timeout_ms=60_000, state=TransactionState.ONGOING,
                         partitions=frozenset({("orders", 1), ("orders", 0)}), txn_start_timestamp_ms=1_000,
                         txn_last_update_timestamp_ms=1_001)
    log.append([(encode_key("tx-1"), encode_value(ongoing, 1))], 1_001)
    log.append([(encode_key("tx-2"), None), ((99).to_bytes(2, "big") + b"later", b"")], 1_002)
    log.sync()
    log.close()
    return data_dir / "__transaction_state-7" / f"{0:020d}.log"


def test_transaction_log_segment_is_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_transaction_log(tmp_path)
    code, items, err = dump_json(capsys, str(path))
    assert (code, err) == (0, "")
    [ongoing] = items[0]["records"]
    assert (ongoing["record_type"], ongoing["transactional_id"], ongoing["tombstone"]) == (
        "transaction_metadata", "tx-1", False)
    assert {
        k: ongoing["value"][k] for k in ("producer_id", "producer_epoch", "state", "transaction_timeout_ms",
                                         "partitions")} == {
        "producer_id": 77, "producer_epoch": 4, "state": "Ongoing", "transaction_timeout_ms": 60_000,
        "partitions": ["orders-0", "orders-1"]}
    tombstone, later = items[1]["records"]
    assert (tombstone["transactional_id"], tombstone["tombstone"], tombstone["value"]) == ("tx-2", True, None)
    assert (later["record_type"], later["key_version"]) == ("unknown", 99)  # skipped, as the server's load does
    assert cli_main(["dump-log", str(path.parent)]) == 0
    text = capsys.readouterr().out
    assert "key: transaction_metadata::transactionalId=tx-1 payload: {" in text and '"state":"Ongoing"' in text
    assert "key: transaction_metadata::transactionalId=tx-2 payload: <DELETE>" in text
