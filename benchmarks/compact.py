"""Compacting a `__consumer_offsets` data directory offline with the server's own cleaner, the same
`CoordinatorLog.compact_now` the background cleaner runs (newest record per key).

    python -m benchmarks.compact DATA_DIR   # prints {"seconds", "bytes_before", "bytes_after", "cleaned"}
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from coordinator_server.config import FsyncPolicy
from coordinator_server.storage import CoordinatorLog
from coordinator_server.storage.coordinator_log import CleanerConfig


def _size(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in data_dir.rglob("*.log"))


async def compact(data_dir: Path) -> dict[str, float]:
    before = _size(data_dir)
    started = time.perf_counter()
    log_ = CoordinatorLog.open(data_dir, 50, FsyncPolicy.parse("always"), cleaner=CleanerConfig(enabled=False))
    cleaned = 0
    try:
        for p in range(log_.partitions):
            cleaned += await log_.compact_now(p)
    finally:
        await log_.close()
    return {"seconds": time.perf_counter() - started, "bytes_before": before, "bytes_after": _size(data_dir),
            "cleaned": cleaned}


def main() -> None:
    print(json.dumps(asyncio.run(compact(Path(sys.argv[1])))), flush=True)


if __name__ == "__main__":
    main()
