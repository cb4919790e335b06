"""Writing `__consumer_offsets` logs directly, with the project's own codec and storage code, so a server
starts on a state that would take too long to build over the network (1M members, 10M commits).

Both writers encode one record with `storage.codec` and stamp copies of it: names carry a fixed-width
marker that is replaced per group (same length, so every length prefix stays right), and offset values
are patched at a fixed position. The log is written with `storage.log.PartitionLog`, batches built by
`storage.batch.build_batch`, each group on the partition `group.partitioner.partition_for` picks.

    python -m benchmarks.preload members DATA_DIR GROUPS MEMBERS_PER_GROUP SESSION_MS
    python -m benchmarks.preload commits DATA_DIR RECORDS KEYS [SEGMENT_BYTES]
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from coordinator_server.config import FsyncPolicy
from coordinator_server.group.partitioner import partition_for
from coordinator_server.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from coordinator_server.storage import CoordinatorLog
from coordinator_server.storage.codec import encode_record
from coordinator_server.storage.log import PartitionLog

from .wire import COMMIT_TOPIC

PARTITIONS = 50
TOPIC = COMMIT_TOPIC
_MARK = "GGGGGGGG"  # replaced by the group number, 8 digits


def group_id(g: int) -> str:
    return f"bench-group-{g:08d}"


def member_id(g: int, m: int) -> str:
    # The shape of a Java consumer's id (client id, dash, UUID): about 45 characters, as in production.
    return f"consumer-{g:08d}-{m:05d}-1a2b3c4d-5e6f-7a8b-9c0d"


def _mark(s: str, g: int) -> str:
    return s.replace(f"{g:08d}", _MARK)


def _create(data_dir: Path, segment_bytes: int = 16 << 20) -> list[PartitionLog]:
    # The CoordinatorLog creates the directory layout and meta.properties; its partitions are then
    # reopened as plain PartitionLogs for a synchronous bulk write.
    async def create() -> None:
        log_ = CoordinatorLog.open(data_dir, PARTITIONS, FsyncPolicy.parse("never"))
        await log_.close()

    asyncio.run(create())
    return [PartitionLog.open(data_dir, p, segment_bytes=segment_bytes) for p in range(PARTITIONS)]


def write_members(data_dir: Path, groups: int, members_per_group: int, session_ms: int) -> dict[str, float]:
    """`groups` Stable groups of `members_per_group` members each, generation 1, as GroupMetadataValue v3."""
    started = time.perf_counter()
    sub = bytes(ConsumerProtocolSubscription(version=0, topics=[TOPIC], user_data=b"").encode())
    template_members = []
    for m in range(members_per_group):
        assignment = bytes(ConsumerProtocolAssignment(
            version=0, assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=TOPIC, partitions=[m])],
            user_data=b"").encode())
        template_members.append(MemberRecord(_mark(member_id(0, m), 0), None, f"consumer-{m:05d}", "/127.0.0.1",
                                             session_ms, session_ms, sub, assignment))
    value = GroupMetadataValue("consumer", 1, "range", _mark(member_id(0, 0), 0), int(time.time() * 1000),
                               tuple(template_members))
    key_t, value_t = encode_record(GroupMetadataRecord(_mark(group_id(0), 0), value))
    assert value_t is not None
    mark = _MARK.encode()
    logs = _create(data_dir)
    pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
    now = int(time.time() * 1000)
    # Many groups per batch keep the write quick; the loader reads records, not batches.
    per_batch = max(1, 200 // max(1, members_per_group // 10))
    for g in range(groups):
        stamp = f"{g:08d}".encode()
        p = partition_for(group_id(g), PARTITIONS)
        batch = pending.setdefault(p, [])
        batch.append((key_t.replace(mark, stamp), value_t.replace(mark, stamp)))
        if len(batch) >= per_batch:
            logs[p].append(batch, now)
            pending[p] = []
    for p, batch in pending.items():
        if batch:
            logs[p].append(batch, now)
    size = 0
    for plog in logs:
        plog.sync()
        size += plog.size_bytes
        plog.close()
    return {"seconds": time.perf_counter() - started, "bytes": size}


def commit_batches(records: int, keys: int, now_ms: int,
                   records_per_batch: int = 10) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
    """`records` offset commits cycling over `keys` keys (100 partitions of a topic per group), as
    (partition of `__consumer_offsets`, batch of `records_per_batch` records): a consumer committing several
    partitions at once, each group on the partition Kafka's hash picks. The same stream is written straight
    into the server's log here, and produced to Apache Kafka's `__consumer_offsets` by the bench."""
    partitions_per_group = 100
    groups = max(1, keys // partitions_per_group)
    value = OffsetCommitValue(offset=0x0102030405060708, leader_epoch=-1, metadata="", commit_timestamp_ms=now_ms,
                              expire_timestamp_ms=-1)
    _, value_t = encode_record(OffsetCommitRecord("g", TOPIC, 0, value))
    assert value_t is not None
    offset_pos = value_t.find(bytes(range(1, 9)))
    # Batch i holds keys [i*r, (i+1)*r) of its group: key k = (group k // 100, partition k % 100).
    distinct: dict[int, list[bytes]] = {}
    per_group_batches = partitions_per_group // records_per_batch
    written = 0
    round_ = 0
    while written < records:
        for g in range(groups):
            p = partition_for(group_id(g), PARTITIONS)
            for b in range(per_group_batches):
                if written >= records:
                    return
                recs = []
                for i in range(records_per_batch):
                    part = b * records_per_batch + i
                    key, _ = encode_record(OffsetCommitRecord(group_id(g), TOPIC, part, None)) \
                        if round_ == 0 else (distinct[g * per_group_batches + b][i], None)
                    if round_ == 0:
                        distinct.setdefault(g * per_group_batches + b, []).append(key)
                    v = bytearray(value_t)
                    v[offset_pos:offset_pos + 8] = (round_ * 1000 + part).to_bytes(8, "big")
                    recs.append((key, bytes(v)))
                yield p, recs
                written += len(recs)
        round_ += 1


def write_commits(data_dir: Path, records: int, keys: int, segment_bytes: int = 0,
                  records_per_batch: int = 10) -> dict[str, float]:
    """The commits of `commit_batches`, written into a server's data directory. Segments are sized so each
    partition has about eight: all but the active one are sealed, which the cleaner compacts;
    `segment_bytes` sets their size instead (the pipeline bench writes one large segment)."""
    started = time.perf_counter()
    now = int(time.time() * 1000)
    logs = _create(data_dir, segment_bytes or max(1 << 16, records * 80 // PARTITIONS // 8))
    written = 0
    for p, recs in commit_batches(records, keys, now, records_per_batch):
        logs[p].append(recs, now)
        written += len(recs)
    size = 0
    for plog in logs:
        plog.sync()
        size += plog.size_bytes
        plog.close()
    return {"seconds": time.perf_counter() - started, "bytes": size, "records": written,
            "keys": max(1, keys // 100) * 100}


def main() -> None:
    what, data_dir = sys.argv[1], Path(sys.argv[2])
    args = [int(a) for a in sys.argv[3:]]
    result = write_members(data_dir, *args) if what == "members" else write_commits(data_dir, *args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
