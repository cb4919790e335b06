"""What the misbehaving clients of issue 14 send, and how their effect on the server is measured (/proc),
shared by tests/integration/test_hostile_clients.py and the soak (tests/durability/test_hostile_soak.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka.protocol.consumer import FetchRequest, JoinGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def api_versions_frame(correlation_id: int) -> bytes:
    request = ApiVersionsRequest[3](client_software_name="never-reads", client_software_version="1")
    request.with_header(correlation_id=correlation_id, client_id="never-reads")
    return request.encode(header=True, framed=True)


def fetch_frame(correlation_id: int) -> bytes:
    F = FetchRequest.FetchTopic
    request = FetchRequest[4](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        topics=[F(topic="orders", partitions=[F.FetchPartition(partition=0, fetch_offset=0,
                                                               partition_max_bytes=1 << 20)])])
    request.with_header(correlation_id=correlation_id, client_id="never-reads")
    return request.encode(header=True, framed=True)


def join_frames(group: str, first_correlation_id: int, n: int) -> bytes:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    frames = []
    for k in range(n):
        request = JoinGroupRequest[5](group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                                      member_id="", group_instance_id=None, protocol_type="consumer",
                                      protocols=[P(name="range", metadata=b"")])
        request.with_header(correlation_id=first_correlation_id + k, client_id="flood")
        frames.append(request.encode(header=True, framed=True))
    return b"".join(frames)


def capture(errors: list[BaseException], fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except BaseException as e:
        errors.append(e)


def fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def offsets_log_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for d in data_dir.glob("__consumer_offsets-*") for f in d.glob("*.log"))
