"""`__consumer_offsets` served as a topic (coordinator_server/net/offsets_topic.py), as Kafka serves it to
tools such as Burrow: internal in Metadata, fetchable with the coordinator's own records, long-polled,
read-only to Produce, guarded by the topic ACLs."""
from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record.memory_records import MemoryRecords
from kafka.structs import OffsetAndMetadata

from coordinator_server.group.partitioner import partition_for
from coordinator_server.group.records import OffsetCommitRecord
from coordinator_server.security.acls import Acl, save_acls
from coordinator_server.storage.codec import decode
from protocol.errors import Errors
from tests.integration.test_fetch_versions import fetch
from tests.integration.test_topics import Client, a_batch, produce_raw

from .conftest import ServerFactory, ServerProcess

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
PARTITIONS = 50


def commit(srv: ServerProcess, group: str, offsets: dict[int, int]) -> None:
    """A simple consumer's commit (no membership) of offsets of topic `t`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = KafkaConsumer(bootstrap_servers=srv.address, group_id=group, enable_auto_commit=False)
    try:
        c.commit({TopicPartition("t", p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        c.close()


def metadata_topics(c: Client) -> dict[str, Any]:
    resp = c.send(MetadataRequest[12](topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
    return {t.name: t for t in resp.topics}


def committed_in(records: bytes) -> list[tuple[str, str, int, int]]:
    out, batches = [], MemoryRecords(records)
    while (batch := batches.next_batch()) is not None:
        for r in batch:
            rec = decode(bytes(r.key), None if r.value is None else bytes(r.value))
            if isinstance(rec, OffsetCommitRecord) and rec.value is not None:
                out.append((rec.group_id, rec.topic, rec.partition, rec.value.offset))
    return out


def test_offsets_topic_is_internal_readable_long_polled_and_read_only(server_factory: ServerFactory) -> None:
    srv = server_factory(topic=["t:2"])
    c = Client(srv)
    try:
        assert produce_raw(c, "t", 0, a_batch([b"a", b"b", b"c"])).error_code == 0
        commit(srv, "watched", {0: 2, 1: 0})
        topic = metadata_topics(c)[OFFSETS]
        assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (0, True, PARTITIONS)

        p = partition_for("watched", PARTITIONS)
        first = fetch(c, 12, topic=OFFSETS, partition=p).partitions[0]
        assert first.error_code == 0
        assert committed_in(first.records) == [("watched", "t", 0, 2), ("watched", "t", 1, 0)]
        assert first.high_watermark > 0
        by_id = fetch(c, 13, topic_id=topic.topic_id, partition=p).partitions[0]
        assert committed_in(by_id.records) == committed_in(first.records)

        # A long poll at the end is answered by the next commit, not by its max wait (10 s).
        end = first.high_watermark
        answered: dict[str, Any] = {}

        def poll() -> None:
            poller = Client(srv)
            try:
                answered["at"] = time.monotonic()
                answered["part"] = _long_poll(poller, p, end, 10_000)
                answered["took"] = time.monotonic() - answered["at"]
            finally:
                poller.close()

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.5)
        commit(srv, "watched", {0: 3})
        t.join(15)
        assert answered["took"] < 8, answered
        assert committed_in(answered["part"].records) == [("watched", "t", 0, 3)]

        latest = c.send(ListOffsetsRequest[7](
            replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
                name=OFFSETS, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=-1, timestamp=-1)])])).topics[0].partitions[0]
        assert (latest.error_code, latest.offset) == (0, end + 1)

        # Only the coordinator writes it: Kafka's "Cannot append to internal topic".
        refused = produce_raw(c, OFFSETS, p, a_batch([b"forged"]))
        assert refused.error_code == Errors.INVALID_TOPIC_EXCEPTION
        assert fetch(c, 12, topic=OFFSETS, partition=p).partitions[0].high_watermark == end + 1
    finally:
        c.close()


def _long_poll(c: Client, partition: int, offset: int, max_wait_ms: int) -> Any:
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest.FetchTopic
    req = FetchRequest[12](
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[F(topic=OFFSETS, partitions=[F.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20)])])
    return c.send(req).responses[0].partitions[0]


def test_offsets_topic_is_guarded_by_the_topic_acls(server_factory: ServerFactory, tmp_path: Path) -> None:
    """Kafka's rules and no others: DESCRIBE lists it, READ fetches it, WRITE is checked before the refusal."""
    acls = tmp_path / "acls.json"
    anyone = "User:ANONYMOUS"
    save_acls(acls, [Acl(anyone, "ALLOW", "ALL", "TOPIC", "LITERAL", "t"),
                     Acl(anyone, "ALLOW", "ALL", "GROUP", "PREFIXED", ""),
                     Acl(anyone, "ALLOW", "DESCRIBE", "TOPIC", "LITERAL", OFFSETS)])
    srv = server_factory(topic=["t:1"], acl_file=acls)
    c = Client(srv)
    try:
        commit(srv, "guarded", {0: 0})
        assert metadata_topics(c)[OFFSETS].is_internal
        p = partition_for("guarded", PARTITIONS)
        assert fetch(c, 12, topic=OFFSETS, partition=p).partitions[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
        assert produce_raw(c, OFFSETS, p, a_batch([b"x"])).error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    save_acls(acls, [Acl(anyone, "ALLOW", "ALL", "TOPIC", "LITERAL", "t")])
    srv.restart()
    c = Client(srv)
    try:
        assert OFFSETS not in metadata_topics(c)  # not describable: left out of "all topics", as Kafka does
    finally:
        c.close()
