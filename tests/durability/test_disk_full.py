"""A full or read-only data disk, over the real server on a small tmpfs (issue 5's last limit).

A write that the disk refuses must fail with a retriable error (OffsetCommit and SyncGroup answer
NOT_COORDINATOR, Kafka's mapping of KAFKA_STORAGE_ERROR; Produce answers KAFKA_STORAGE_ERROR per
partition), nothing that was not acknowledged may reach the disk, every request that writes nothing keeps
being served, and once space returns the server works again: without a restart after a failed write, only
after one after a failed fsync (docs/durability.md, "Full or read-only disk").

tmpfs allocates whole 4 KiB pages, so a small append can still land in the unused tail of a log's last
page on a "full" disk. Every write these tests expect to fail is therefore larger than a page.
tmpfs never fails an fsync: on it, the failures are write failures; the fsync branches below follow the
server's own log lines, so they hold on a disk that fails the fsync instead.

Needs root (mount(2)); skipped with the reason when mount is refused with EPERM.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from coordinator_server.group.partitioner import partition_for
from coordinator_server.group.records import GroupMetadataRecord, OffsetCommitRecord
from coordinator_server.storage.codec import decode_record
from coordinator_server.storage.log import PartitionLog
from coordinator_server.tools.repair_log import repair_log
from tests.integration.group_client import (
    NONE,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    Connection,
    GroupMember,
    close_all,
    sync_all,
    wait_until,
)

from .conftest import ServerProcess

pytestmark = pytest.mark.durability

KAFKA_STORAGE_ERROR = 56
OFFSETS_PARTITIONS = 50
# The server's start-up files (meta.properties, 50 `__consumer_offsets` directories and a topic's, each
# with an empty segment and index and a recovery point) take about 224 KiB of tmpfs pages: 4 MiB leaves
# room for the tests' writes and still fills in a few milliseconds.
TMPFS_SIZE = "4m"
PAGE = 4096
TOPIC = "t"
GROUP = "g"

_MS_RDONLY = 1
_MS_REMOUNT = 32
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(target: Path, flags: int, data: str) -> int:
    """mount(2) of a tmpfs (or a remount of it); 0 or the errno."""
    rc = _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", ctypes.c_ulong(flags), data.encode())
    return 0 if rc == 0 else ctypes.get_errno()


def _umount(target: Path, flags: int = 0) -> int:
    return 0 if _libc.umount2(os.fsencode(target), flags) == 0 else ctypes.get_errno()


class Disk:
    """A tmpfs of TMPFS_SIZE holding the data directory of the servers started on it."""

    def __init__(self, mnt: Path) -> None:
        self.mnt = mnt
        self.data = mnt / "data"
        self.servers: list[ServerProcess] = []

    def start(self, **flags: Any) -> ServerProcess:
        flags = {"initial_rebalance_delay_ms": 300, "topic": [f"{TOPIC}:2"], **flags}
        srv = ServerProcess(self.data, flags)
        self.servers.append(srv)
        return srv.start()

    def fill(self) -> Path:
        """Write a filler file until the disk answers ENOSPC; returns its path."""
        path = self.mnt / "filler"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        chunk = b"\0" * 65536
        try:
            while True:
                os.write(fd, chunk)  # a partial write first, then ENOSPC
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
        finally:
            os.close(fd)
        assert os.statvfs(self.mnt).f_bavail == 0
        return path

    def remount(self, read_only: bool) -> int:
        return _mount(self.mnt, _MS_REMOUNT | (_MS_RDONLY if read_only else 0), f"size={TMPFS_SIZE}")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    err = _mount(mnt, 0, f"size={TMPFS_SIZE},mode=0755")
    if err == errno.EPERM:
        pytest.skip("mounting a tmpfs was refused with EPERM (needs root or CAP_SYS_ADMIN)")
    assert err == 0, f"mount -t tmpfs {mnt}: {os.strerror(err)}"
    d = Disk(mnt)
    try:
        yield d
    finally:
        # Kill the servers before unmounting: they hold the data directory's files open.
        for srv in d.servers:
            if srv.running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    srv.kill9()
        d.remount(read_only=False)
        if _umount(mnt) != 0:
            _umount(mnt, _MNT_DETACH)


# ------------------------------------------------------------------------------------------ requests


def meta(value: int) -> str:
    """Commit metadata naming the value, padded so that a commit batch is larger than a tmpfs page."""
    return f"v{value}-".ljust(PAGE, "m")


def commit(m: GroupMember, value: int, partitions: tuple[int, ...] = (0, 1), **overrides: Any) -> set[int]:
    """The member's OffsetCommit v8 of `value` (offset and metadata) to TOPIC's partitions; the error codes."""
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    fields: dict[str, Any] = dict(
        group_id=m.group_id, generation_id_or_member_epoch=m.generation_id, member_id=m.member_id,
        group_instance_id=None, retention_time_ms=-1,
        topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=value, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=meta(value)) for p in partitions])])
    fields.update(overrides)
    resp = m.hb_conn.call(OffsetCommitRequest[8](**fields), OffsetCommitResponse)
    return {p.error_code for t in resp.topics for p in t.partitions}


def committed(conn: Connection, group: str = GROUP) -> dict[int, tuple[int, str | None]]:
    """OffsetFetch v8 (RequireStable) of TOPIC's partitions 0 and 1: {partition: (offset, metadata)}."""
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    req = OffsetFetchRequest[8](require_stable=True, groups=[G(
        group_id=group, member_id=None, member_epoch=-1,
        topics=[G.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0, 1])])])
    resp = conn.call(req, OffsetFetchResponse)
    g = resp.groups[0]
    assert g.error_code == NONE, g
    parts = [p for t in g.topics for p in t.partitions]
    assert all(p.error_code == NONE for p in parts), parts
    return {p.partition_index: (p.committed_offset, p.metadata) for p in parts}


def acknowledged(value: int) -> dict[int, tuple[int, str | None]]:
    return {0: (value, meta(value)), 1: (value, meta(value))}


def serves_reads(conn: Connection) -> bool:
    """ApiVersions and Metadata, which write nothing, are answered normally."""
    versions = conn.call(ApiVersionsRequest[3](client_software_name="disk-full", client_software_version="1"),
                         ApiVersionsResponse, timeout_s=5)
    md = conn.call(MetadataRequest[9](topics=None, allow_auto_topic_creation=False,
                                      include_cluster_authorized_operations=False,
                                      include_topic_authorized_operations=False), MetadataResponse, timeout_s=5)
    topics = {t.name: (t.error_code, len(t.partitions)) for t in md.topics}
    assert versions.error_code == NONE and topics[TOPIC] == (NONE, 2), (versions.error_code, topics)
    return True


def rejoin(members: list[GroupMember]) -> None:
    """A rebalance of a stable group: one member rejoins, the others see REBALANCE_IN_PROGRESS and follow."""
    first, rest = members[0], members[1:]
    pending = [first.send_join()]
    for m in rest:
        told = functools.partial(lambda m: m.heartbeat() == REBALANCE_IN_PROGRESS, m)
        wait_until(told, what=f"{m} told to rejoin")
        pending.append(m.send_join())
    assert [p.result().error_code for p in pending] == [NONE] * len(members)


def big_assignments(members: list[GroupMember]) -> dict[str, bytes]:
    """Assignments making the group record larger than a tmpfs page."""
    return {m.member_id: f"{m.client_id}@{m.generation_id}".encode().ljust(2 * PAGE, b".") for m in members}


def fsync_failed(srv: ServerProcess, event: str) -> bool:
    """Whether the server logged a failed fsync (the partition is then refused until a restart) rather
    than only failed writes (which it recovers from live)."""
    return bool(srv.events(event))


# -------------------------------------------------------------------------------------- on the disk


def coordinator_records(data_dir: Path, tmp: Path, group: str = GROUP) -> tuple[set[int], list[int]]:
    """The offsets committed for `group` and the generations of its group records, as on disk: read from
    a copy (opening a log runs recovery), after checking the partition holds no bad batch at all (a failed
    write truncates its partial batch away)."""
    p = partition_for(group, OFFSETS_PARTITIONS)
    report = repair_log(data_dir / f"__consumer_offsets-{p}")
    assert report.bad is None, "\n".join(report.lines())
    copy = tmp / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns(".lock", "filler"))
    plog = PartitionLog.open(copy, p)
    offsets: set[int] = set()
    generations: list[int] = []
    try:
        for rec in plog.read():
            assert rec.key is not None
            decoded = decode_record(rec.key, rec.value)
            if isinstance(decoded, OffsetCommitRecord) and decoded.group_id == group and decoded.value:
                assert decoded.value.metadata == meta(decoded.value.offset)
                offsets.add(decoded.value.offset)
            elif isinstance(decoded, GroupMetadataRecord) and decoded.group_id == group and decoded.value:
                generations.append(decoded.value.generation)
    finally:
        plog.close()
    return offsets, generations


def again(m: GroupMember, srv: ServerProcess) -> GroupMember:
    """The same member (id, generation) over new connections to a restarted server."""
    n = GroupMember(srv, m.group_id, m.client_id)
    n.member_id, n.generation_id, n.leader, n.protocol_name = m.member_id, m.generation_id, m.leader, m.protocol_name
    m.close()
    return n


# -------------------------------------------------------------------------------------------- tests


def test_full_disk_fails_coordinator_writes_retriably_and_recovers(disk: Disk, tmp_path: Path) -> None:
    srv = disk.start()
    a, b = GroupMember(srv, GROUP, "a"), GroupMember(srv, GROUP, "b")
    members = [a, b]
    try:
        pending = [a.send_join(), b.send_join()]
        assert [p.result().error_code for p in pending] == [NONE, NONE]
        assert [s.error_code for s in sync_all(members)] == [NONE, NONE]
        assert commit(a, 1) == {NONE}
        offsets, acked_generations = coordinator_records(disk.data, tmp_path)
        assert offsets == {1} and acked_generations[-1] == a.generation_id, (offsets, acked_generations)

        filler = disk.fill()

        # OffsetCommit: KAFKA_STORAGE_ERROR from the log, answered as NOT_COORDINATOR (retriable).
        assert commit(a, 2) == {NOT_COORDINATOR}
        failed = srv.wait_for_event("coordinator_write_failed", error="KAFKA_STORAGE_ERROR")
        assert failed["group_id"] == GROUP
        assert any(e.get("errno") == errno.ENOSPC for e in srv.events("log_append_failed") + srv.events(
            "log_fsync_failed")), srv.stderr_lines()[-10:]
        poisoned = fsync_failed(srv, "log_fsync_failed")

        # Everything that writes nothing is served as before; a failed commit does not disturb the group.
        assert a.heartbeat() == NONE and b.heartbeat() == NONE
        conn = Connection((srv.host, srv.port), "reader")
        assert serves_reads(conn)
        assert committed(conn) == acknowledged(1)

        # SyncGroup: the group record cannot be written: NOT_COORDINATOR to every member, and the group
        # goes back to rebalancing (Kafka's resetAndPropagateAssignmentError + maybePrepareRebalance).
        rejoin(members)
        failed_generation = a.generation_id
        syncs = sync_all(members, big_assignments(members))
        assert [s.error_code for s in syncs] == [NOT_COORDINATOR, NOT_COORDINATOR]
        wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance after the failed sync")
        assert serves_reads(conn)

        # On the disk: no partial batch, no unacknowledged commit, no group record of the failed sync.
        offsets, generations = coordinator_records(disk.data, tmp_path)
        assert offsets == {1}
        assert generations == acked_generations, (generations, failed_generation)

        filler.unlink()

        if not poisoned:
            # A failed write only failed its own appends: once space returns, no restart is needed.
            rejoin(members)
            assert [s.error_code for s in sync_all(members, big_assignments(members))] == [NONE, NONE]
            acked_generations.append(a.generation_id)
            assert commit(a, 3) == {NONE}
            assert committed(conn) == acknowledged(3)
            assert not fsync_failed(srv, "log_fsync_failed")
        else:
            # A failed fsync refuses the partition until a restart re-reads what is on the disk.
            assert commit(a, 3) == {NOT_COORDINATOR}
            conn.close()
            assert srv.terminate() == 0
            srv.start()
            members = [again(a, srv), again(b, srv)]
            a, b = members
            conn = Connection((srv.host, srv.port), "reader")
            assert committed(conn) == acknowledged(1)
            assert commit(a, 3) == {NONE}
        acked = 3

        # After a restart on the same directory: exactly what was acknowledged.
        conn.close()
        close_all(members)
        assert srv.terminate() == 0
        srv.start()
        conn = Connection((srv.host, srv.port), "reader")
        assert committed(conn) == acknowledged(acked)
        offsets, generations = coordinator_records(disk.data, tmp_path)
        assert offsets == {1, acked}
        assert generations == acked_generations
        conn.close()
    finally:
        close_all(members)


def test_read_only_data_dir(disk: Disk, tmp_path: Path) -> None:
    srv = disk.start()
    m = GroupMember(srv, GROUP, "a")
    try:
        assert m.join().error_code == NONE
        assert m.sync({m.member_id: b"A"}).error_code == NONE
        assert commit(m, 1) == {NONE}
        acked = {1}

        # Linux refuses to make a file system read-only while a process holds a file on it open for
        # writing (EBUSY, for any file system): a running server keeps every active segment open, so it
        # cannot see its data directory turn read-only under it. Were the remount to succeed, writes
        # must fail retriably or not at all.
        err = disk.remount(read_only=True)
        if err == 0:
            outcome = commit(m, 2)
            assert outcome in ({NONE}, {NOT_COORDINATOR}), outcome
            acked |= {2} if outcome == {NONE} else set()
            assert m.heartbeat() == NONE
            assert disk.remount(read_only=False) == 0
            if fsync_failed(srv, "log_fsync_failed"):
                assert srv.terminate() == 0
                srv.start()
                m = again(m, srv)
        else:
            assert err == errno.EBUSY, os.strerror(err)
        assert commit(m, 3) == {NONE}
        acked.add(3)
        m.close()
        assert srv.terminate() == 0

        # Read-only at start: the server refuses to start, naming the problem, and changes nothing.
        assert disk.remount(read_only=True) == 0
        with pytest.raises(RuntimeError, match="exited with 1"):
            srv.start()
        refused = srv.events("startup_failed")[-1]
        assert "Read-only file system" in refused["error"] and str(disk.data) in refused["error"], refused

        # Writable again: it starts and serves exactly what was acknowledged, and takes commits.
        assert disk.remount(read_only=False) == 0
        srv.start()
        m = again(m, srv)
        conn = Connection((srv.host, srv.port), "reader")
        assert committed(conn) == acknowledged(3)
        assert commit(m, 4) == {NONE}
        assert committed(conn) == acknowledged(4)
        conn.close()
        offsets, _ = coordinator_records(disk.data, tmp_path)
        assert offsets == acked | {4}
    finally:
        m.close()


# ------------------------------------------------------------------------------------- topic store


def a_batch(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def produce(conn: Connection, batches: dict[int, bytes], acks: int) -> dict[int, tuple[int, int]]:
    """One Produce v9 to TOPIC: {partition: (error code, base offset)}."""
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[9](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[T(
        name=TOPIC, partition_data=[T.PartitionProduceData(index=p, records=r) for p, r in batches.items()])])
    resp = conn.call(req, ProduceResponse)
    return {p.index: (p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses}


def fetch_all(conn: Connection, partition: int) -> tuple[int, list[tuple[int, bytes | None]]]:
    """Fetch v12 from offset 0: (high watermark, [(offset, value)])."""
    F = FetchRequest.FetchTopic
    req: ApiMessage = FetchRequest[12](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 24)])], forgotten_topics_data=[], rack_id="")
    part = conn.call(req, FetchResponse).responses[0].partitions[0]
    assert part.error_code == NONE, part
    raw, out, pos = bytes(part.records or b""), [], 0
    while pos < len(raw):
        size = 12 + int.from_bytes(raw[pos + 8:pos + 12], "big")
        out += [(r.offset, r.value) for r in DefaultRecordBatch(raw[pos:pos + size])]
        pos += size
    return part.high_watermark, out


def test_full_disk_fails_produce_retriably_with_no_partial_batch(disk: Disk) -> None:
    srv = disk.start()
    conn = Connection((srv.host, srv.port), "producer")
    try:
        assert produce(conn, {0: a_batch([b"a0"]), 1: a_batch([b"a1"])}, acks=1) == {0: (NONE, 0), 1: (NONE, 0)}
        filler = disk.fill()

        big = [b"x" * PAGE, b"y" * PAGE]  # a batch larger than a page: it cannot fit in a page's tail
        for acks in (1, -1):
            assert produce(conn, {0: a_batch(big), 1: a_batch(big)}, acks=acks) == {
                0: (KAFKA_STORAGE_ERROR, -1), 1: (KAFKA_STORAGE_ERROR, -1)}
        poisoned = fsync_failed(srv, "topic_partition_fsync_failed")
        assert serves_reads(conn)
        for p in (0, 1):
            assert fetch_all(conn, p) == (1, [(0, f"a{p}".encode())]), "a refused batch is visible"
            report = repair_log(disk.data / f"{TOPIC}-{p}")
            assert report.bad is None and report.batches_checked == 1, "\n".join(report.lines())

        filler.unlink()
        if poisoned:
            assert produce(conn, {0: a_batch([b"b0"])}, acks=1)[0][0] == KAFKA_STORAGE_ERROR
            conn.close()
            assert srv.terminate() == 0
            srv.start()
            conn = Connection((srv.host, srv.port), "producer")
        # The next batch follows the last acknowledged one: no hole, no leftover of the refused ones.
        assert produce(conn, {0: a_batch([b"b0", *big]), 1: a_batch([b"b1"])}, acks=1) == {
            0: (NONE, 1), 1: (NONE, 1)}
        expected = {0: (4, [(0, b"a0"), (1, b"b0"), (2, big[0]), (3, big[1])]), 1: (2, [(0, b"a1"), (1, b"b1")])}
        assert {p: fetch_all(conn, p) for p in (0, 1)} == expected

        # A shutdown on a full disk still exits cleanly; the checkpoints it cannot write only cost the
        # next start a scan of those partitions.
        filler = disk.fill()
        conn.close()
        assert srv.terminate() == 0
        assert srv.events("clean_shutdown_mark_not_written")
        filler.unlink()
        srv.start()
        conn = Connection((srv.host, srv.port), "producer")
        assert {p: fetch_all(conn, p) for p in (0, 1)} == expected
    finally:
        conn.close()
