"""The group-commit writer's syncfs thread: syncfs(2) run by a POSIX thread that never takes the GIL.

Why: under `--fsync always` with many committers the writer's rounds are synced by one syncfs each
(storage/syncfs.py). Run from a Python thread, each round took the GIL back about four times (waking from
its queue, after the syncfs, around every close and the future's completion), and each time waited for the
busy event loop to let go of it: in a `perf` trace of 128 committers the sync thread spent as long waiting
for the GIL (~8 waits a round, ~95 µs each) as in syncfs itself, and the loop paid a futex wake for each
(benchmarks/findings.md, session 14). The C thread (`_syncfs_thread.c`) only waits for a request, runs
syncfs and writes to an eventfd the loop watches, so a round costs the loop a mutex and a read.

Rounds only go there when the syncfs is the whole sync: at least `SYNCFS_MIN_PARTITIONS` partitions on
one filesystem (or fewer, joining a syncfs of it already under way), the system's own I/O (`SYSTEM_IO`: a
test's seam keeps the Python path it counts), and every partition with nothing but data to make durable
(`PartitionLog.only_data_unsynced`: a rolled segment's recovery point or a new directory entry takes the
Python path, which writes them after the sync).

None when the C extension is not built (`COORDINATOR_PURE_PYTHON=1`, or not Linux): the Python sync thread
then does every round, as before.
"""
from __future__ import annotations

from typing import Any

SyncfsThread: Any
try:
    from coordinator_server.storage._syncfs_thread import SyncfsThread
except ImportError:
    SyncfsThread = None

__all__ = ["SyncfsThread"]
