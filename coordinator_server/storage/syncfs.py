"""syncfs(2): one system call that makes everything written on a file's filesystem durable.

Why: a group-commit round under `--fsync always` with 128 committers wrote to ~40 of the 50
`__consumer_offsets` partitions and fsynced each of them: on this project's ext4 development machine 40
fsyncs at once took ~2 ms of wall time and ~2.5 ms of CPU per round, where one syncfs of the same
filesystem took ~0.35 ms and ~0.15 ms (benchmarks/findings.md, session 9). The filesystem writes back
every dirty inode, commits its journal once and flushes the device cache once, where 40 fsyncs ask for
40 journal commits and cache flushes.

The price: syncfs also writes back whatever other processes left dirty on the same filesystem, so a round
waits for their data too. A data directory on a filesystem shared with heavy writers can turn that off
(`--fsync-method fsync`).

Linux reports write-back errors to syncfs only since 5.8 (before, a failed write-back left syncfs returning
0), and the filesystem's own sync step's errors (on ext4 the journal commit and the cache flush) only since
5.17, so `SYSCALL` is None before 5.17 and elsewhere, and rounds fall back to one fsync per partition.
syncfs reports an error to each open file whose last check predates it: the writer calls it through one
descriptor per filesystem opened before its first write there (`GroupCommitWriter`).
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Callable

_MIN_KERNEL = (5, 17)


def _kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a Linux release string such as '6.18.44-fc-v657'; (0, 0) when unreadable."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def _load() -> Callable[[int], None] | None:
    if sys.platform != "linux" or _kernel_version(os.uname().release) < _MIN_KERNEL:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int

    def syncfs(fd: int) -> None:
        """Make every write on the filesystem holding `fd` durable; OSError when the kernel reports a
        write-back error on that filesystem. (ctypes releases the GIL for the call.)"""
        if call(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return syncfs


# The system call, or None where it is missing or does not report write-back errors.
SYSCALL: Callable[[int], None] | None = _load()

__all__ = ["SYSCALL"]
