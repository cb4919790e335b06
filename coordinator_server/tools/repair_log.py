"""`coordinator-server repair-log PATH`: verify a partition log and, only when asked, cut it at the first
bad batch.

The server refuses to start on a bad batch before the log's tail (never skip an entry in the
middle). This is the operator's way out, and it is never automatic: by default it only reads, verifying
every batch (header, length, CRC32C, offsets, and for `__consumer_offsets` the record structure) and
reporting the first bad one with its file, byte position and reason. With `--truncate` it first copies
every file it will change or delete to `<file>.bak-<timestamp>` (printed), then truncates the segment at
the bad batch, deletes the later segments of the partition, and deletes the recovery point so the next
start scans everything. The records from the bad batch on are lost; a consumer group whose last records
were there comes back as it was before them.

Exit status: 0 when the log is good (or was truncated), 1 when a bad batch was found and left alone,
2 when the path cannot be checked (missing, or the data directory is in use by a running server).
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coordinator_server.storage.batch import BadBatch, read_batch, valid_batch_after
from coordinator_server.storage.index import index_name
from coordinator_server.storage.segment import (
    RECOVERY_POINT_FILE,
    SEGMENT_NAME,
    fsync_dir,
    read_cleaner_offset,
)

_TOPIC_METADATA = "partition.metadata"  # topic partitions hold client batches: records are not decoded


@dataclass
class BadBatchReport:
    file: Path
    position: int
    reason: str
    torn_tail: bool  # what recovery would truncate by itself (end of the last segment, nothing valid after)


@dataclass
class RepairReport:
    directory: Path
    segments_checked: int = 0
    batches_checked: int = 0
    bad: BadBatchReport | None = None
    interrupted_swaps: list[Path] = field(default_factory=list)
    truncated: bool = False
    backups: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"{self.directory}: {self.segments_checked} segment(s), {self.batches_checked} good batch(es) "
               "checked"]
        out += [f"interrupted cleaner swap (the server completes it at start): {p}" for p in self.interrupted_swaps]
        if self.bad is None:
            out.append("no bad batch found")
            return out
        kind = "a torn tail (the server truncates it by itself at start)" if self.bad.torn_tail else "corruption"
        out.append(f"first bad batch: {self.bad.file} at byte position {self.bad.position}: {self.bad.reason} "
                   f"[{kind}]")
        out += [f"backed up: {p}" for p in self.backups]
        if self.truncated:
            out.append(f"truncated {self.bad.file} at byte {self.bad.position}")
            out += [f"removed: {p}" for p in self.removed]
        else:
            out.append("dry run: nothing changed; rerun with --truncate to back up and cut the log there")
        return out


def repair_log(path: str | Path, truncate: bool = False, now_ms: int | None = None) -> RepairReport:
    """Verify the partition directory (or the one segment) at `path`; with `truncate`, back up and cut
    at the first bad batch. Raises FileNotFoundError, or OSError(EWOULDBLOCK) if a server holds the data
    directory's lock."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "no such partition directory or segment", str(path))
    pdir = path if path.is_dir() else path.parent
    all_segments = sorted((int(m.group(1)), p) for p in pdir.iterdir() if (m := SEGMENT_NAME.match(p.name)))
    chosen = all_segments if path.is_dir() else [(b, p) for b, p in all_segments if p == path]
    report = RepairReport(pdir, interrupted_swaps=sorted(pdir.glob("*.swap")))
    _verify(report, chosen, all_segments, deep=not (pdir / _TOPIC_METADATA).exists(),
            gaps_below=read_cleaner_offset(pdir))
    if truncate and report.bad is not None:
        with _data_dir_lock(pdir.parent):
            _truncate(report, all_segments, now_ms if now_ms is not None else time.time_ns() // 1_000_000)
    return report


def _verify(report: RepairReport, chosen: list[tuple[int, Path]], all_segments: list[tuple[int, Path]],
            deep: bool, gaps_below: int) -> None:
    last_path = all_segments[-1][1] if all_segments else None
    expected: int | None = None
    for base, seg_path in chosen:
        report.segments_checked += 1
        size = seg_path.stat().st_size
        gaps = base < gaps_below
        if expected is not None and base < expected:
            report.bad = BadBatchReport(seg_path, 0, f"segment starts at offset {base}, before the end "
                                        f"({expected}) of the previous segment", torn_tail=False)
            return
        pos, want = 0, base
        with open(seg_path, "rb") as f:
            while pos < size:
                try:
                    info = read_batch(f, pos, size, want, deep=deep, gaps=gaps)
                except BadBatch as bad:
                    torn = (seg_path == last_path and not bad.complete
                            and valid_batch_after(f, pos + 1, size) is None)
                    report.bad = BadBatchReport(seg_path, pos, bad.reason, torn)
                    return
                report.batches_checked += 1
                pos += info.size
                want = info.last_offset + 1
        expected = want


def _truncate(report: RepairReport, all_segments: list[tuple[int, Path]], now_ms: int) -> None:
    assert report.bad is not None
    bad_file, position = report.bad.file, report.bad.position
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ms / 1000))
    later = [p for _, p in all_segments if p > bad_file]
    affected = [bad_file, *later]
    # Back up first, every file that will change or go, and make the copies durable before touching any.
    for seg in affected:
        for f in (seg, seg.with_name(index_name(int(seg.name[:20])))):
            if f.exists():
                backup = f.with_name(f"{f.name}.bak-{stamp}")
                shutil.copy2(f, backup)
                _fsync_file(backup)
                report.backups.append(backup)
    fsync_dir(report.directory)
    # The recovery point may cover what is about to change: without it the next start scans everything.
    (report.directory / RECOVERY_POINT_FILE).unlink(missing_ok=True)
    with open(bad_file, "r+b") as f:
        f.truncate(position)
        f.flush()
        os.fsync(f.fileno())
    for seg in affected:
        index = seg.with_name(index_name(int(seg.name[:20])))
        index.unlink(missing_ok=True)  # rebuilt by the next start's scan
        if seg != bad_file:
            seg.unlink()
            report.removed.append(seg)
    fsync_dir(report.directory)
    report.truncated = True


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _data_dir_lock:  # lower case: used like open(), as a context manager
    """The server's exclusive flock on `<data-dir>/.lock`: truncating under a running server would corrupt
    its log. Absent lock file (a bare segment directory): nothing to exclude."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ".lock"
        self.fd = -1

    def __enter__(self) -> None:
        if not self.path.exists():
            return
        self.fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self.fd)
            self.fd = -1
            raise OSError(e.errno, f"{self.path} is locked: stop the coordinator-server using this data "
                          "directory before repairing its log") from e

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a partition directory (e.g. <data-dir>/__consumer_offsets-7) or one "
                        "%%020d.log segment in it")
    parser.add_argument("--truncate", action="store_true",
                        help="back up the affected files to <file>.bak-<timestamp>, then cut the log at the "
                        "first bad batch (the records from there on are lost). Default: report only")


def cli(argv: Sequence[str]) -> int:
    """`coordinator-server repair-log ...`: parse argv, then run."""
    parser = argparse.ArgumentParser(prog="coordinator-server repair-log", description=__doc__)
    add_arguments(parser)
    return main(parser.parse_args(list(argv)))


def main(args: argparse.Namespace) -> int:
    try:
        report = repair_log(args.path, truncate=args.truncate)
    except OSError as e:
        print(f"repair-log: {e}")
        return 2
    for line in report.lines():
        print(line)
    return 1 if report.bad is not None and not report.truncated else 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="coordinator-server repair-log", description=__doc__)
    add_arguments(_parser)
    raise SystemExit(main(_parser.parse_args()))
