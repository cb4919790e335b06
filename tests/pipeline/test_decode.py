"""`pipeline.decode` (what each Spark task runs) on segments the server wrote, intact and damaged."""
from __future__ import annotations

from pathlib import Path

from pipeline.decode import offsets_rows, parse_segment_path, topic_batch_rows
from pipeline.reader import segment_globs

from .conftest import PipelineRun


def _offsets_segment(run: PipelineRun) -> Path:
    # The biggest __consumer_offsets segment of node 0: the one with the most batches to damage.
    return max((run.demo / "node-0").glob("__consumer_offsets-*/*.log"), key=lambda p: p.stat().st_size)


def test_segment_paths_and_globs() -> None:
    where = parse_segment_path("s3a://b/logs/node-1/__consumer_offsets-7/00000000000000000042.log")
    assert where is not None and where == ("s3a://b/logs/node-1", "__consumer_offsets", 7, 42)
    assert parse_segment_path("file:/d/orders.1a2b-delete/00000000000000000000.log") is None
    assert parse_segment_path("file:/d/orders-0/00000000000000000000.index") is None
    assert segment_globs(["/d/node-1/", "/d/node-2/__consumer_offsets-3", "/d/x/*.log"]) == [
        "/d/node-1/*/*.log", "/d/node-2/__consumer_offsets-3/*.log", "/d/x/*.log"]
    assert segment_globs(["/d/node-1"], offsets_only=True) == ["/d/node-1/__consumer_offsets-*/*.log"]


def test_intact_segment_decodes_without_errors(pipeline_run: PipelineRun) -> None:
    path = _offsets_segment(pipeline_run)
    where = parse_segment_path(str(path))
    assert where is not None
    rows = list(offsets_rows(where, path.read_bytes()))
    assert rows and not [r for r in rows if r["record_type"] == "error"]
    offsets = [r["offset"] for r in rows]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # contiguous, in log order
    topic = next((pipeline_run.demo / "node-0").glob("orders-0/*.log"))
    batches = list(topic_batch_rows(parse_segment_path(str(topic)), topic.read_bytes()))  # type: ignore[arg-type]
    assert batches and all(b.get("error") is None for b in batches)
    assert batches[-1]["last_offset"] + 1 == pipeline_run.nodes["node-0"]["end_offsets"]["orders:0"]


def test_torn_tail_and_crc_failure_become_error_rows(pipeline_run: PipelineRun) -> None:
    path = _offsets_segment(pipeline_run)
    where = parse_segment_path(str(path))
    assert where is not None
    data = path.read_bytes()
    intact = list(offsets_rows(where, data))
    positions = sorted({r["position"] for r in intact})
    assert len(positions) >= 3

    torn = list(offsets_rows(where, data[: positions[-1] + 30]))  # the last batch cut mid-header
    assert torn[:-1] == [r for r in intact if r["position"] < positions[-1]]
    assert torn[-1]["record_type"] == "error" and "torn" in torn[-1]["error"]

    damaged = bytearray(data)
    damaged[positions[1] + 70] ^= 0xFF  # a byte inside the second batch's records: its CRC fails
    rows = list(offsets_rows(where, bytes(damaged)))
    errors = [r for r in rows if r["record_type"] == "error"]
    assert [e["position"] for e in errors] == [positions[1]] and "CRC" in errors[0]["error"]
    assert [r for r in rows if r["record_type"] != "error"] == [r for r in intact if r["position"] != positions[1]]


def test_consumer_group_records_become_rows_that_fit_the_schema() -> None:
    """KIP-848 records, through Kafka's bytes, as `consumer_group` rows the Arrow schema accepts."""
    import uuid

    from coordinator_server.group.consumer.records import (
        ClassicMemberMetadata,
        ConsumerGroupCurrentMemberAssignmentRecord,
        ConsumerGroupMemberMetadataRecord,
        ConsumerGroupMetadataRecord,
        CurrentAssignmentValue,
        MemberMetadataValue,
    )
    from coordinator_server.storage.codec import encode_record
    from pipeline.decode import offsets_record
    from pipeline.reader import RECORD_SCHEMA, _to_arrow

    topic_id = uuid.UUID(int=7)
    records = [
        ConsumerGroupMetadataRecord("cg", 4),
        ConsumerGroupMemberMetadataRecord("cg", "m1", MemberMetadataValue(
            None, None, "app", "/10.0.0.1", ("orders",), None, 30_000, "uniform", ClassicMemberMetadata(10_000, ()))),
        ConsumerGroupCurrentMemberAssignmentRecord("cg", "m1", CurrentAssignmentValue(
            4, 3, 0, {topic_id: frozenset({2, 0})}, {})),
        ConsumerGroupMemberMetadataRecord("cg", "m0", None),
    ]
    rows = [offsets_record(*encode_record(r)) for r in records]
    assert [(r["record_type"], r["consumer_record"], r["key_version"]) for r in rows] == [
        ("consumer_group", "metadata", 3), ("consumer_group", "member_metadata", 5),
        ("consumer_group", "current_member_assignment", 8), ("consumer_group", "member_metadata", 5)]
    assert rows[0]["epoch"] == 4
    assert (rows[1]["member_type"], rows[1]["subscribed_topics"], rows[1]["client_id"]) == ("classic", ["orders"], "app")
    assert rows[2]["consumer_assignment"] == [{"topic_id": str(topic_id), "partitions": [0, 2]}]
    assert rows[2]["epoch"] == 4 and rows[3]["tombstone"] is True
    [batch] = list(_to_arrow(iter([{"node": "n", **r} for r in rows]), RECORD_SCHEMA))
    assert batch.num_rows == 4
