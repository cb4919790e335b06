"""A segment's in-memory state, file names, and the two per-partition checkpoint files.

Files in a partition directory (Kafka's names where Kafka has one):

* `%020d.log`    a segment of v2 record batches, named after its base offset;
* `%020d.index`  its sparse offset index (`storage.index`);
* `%020d.log.cleaned`, `.index.cleaned`, `.log.swap`, `.index.swap`: the cleaner's swap protocol
  (`storage.compaction`; recovery completes or rolls back a swap it finds, `storage.recovery`);
* `recovery-point.checkpoint`: the recovery point — every batch below it is fsynced and was verified —
  and, after a clean shutdown, the base and size of the last segment, which is then trusted as well;
* `cleaner-offset.checkpoint`: the cleaner's first dirty offset. Segments below it were written by the
  cleaner, so their batches may skip offsets (see `check_batch(gaps=True)`).

Kafka keeps one `recovery-point-offset-checkpoint` and one `cleaner-offset-checkpoint` per log directory;
here the coordinator log and the topic store share a data directory with separate owners, so each
partition keeps its own, which needs no coordination between them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from coordinator_server.storage.batch import BadBatch, BatchInfo, walk_headers
from coordinator_server.storage.errors import CorruptLogError
from coordinator_server.storage.index import DEFAULT_INDEX_INTERVAL_BYTES, OffsetIndex, index_name

SEGMENT_NAME: Final = re.compile(r"^(\d{20})\.log$")
RECOVERY_POINT_FILE: Final = "recovery-point.checkpoint"
CLEANER_OFFSET_FILE: Final = "cleaner-offset.checkpoint"
_CHECKPOINT_VERSION: Final = "0"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


@dataclass
class Segment:
    base_offset: int
    path: Path
    size: int
    index: OffsetIndex
    created_ms: int = 0  # file mtime at open, or when created: retention's age for an empty segment
    next_offset: int = -1  # one past the last batch's last offset (the base offset when empty)
    first_timestamp: int = -1  # max timestamp of the first batch: what the time-based roll measures from
    # Largest timestamp and the base offset of the first batch holding it; None until known (a trusted
    # segment is not read at open, so this is filled lazily by the first caller that needs it).
    max_timestamp: int | None = None
    max_timestamp_base: int = -1
    verified: bool = field(default=False)  # scanned with CRCs by this process's recovery

    @classmethod
    def at(cls, directory: Path, base_offset: int, size: int, created_ms: int,
           interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> Segment:
        return cls(base_offset, directory / segment_name(base_offset), size,
                   OffsetIndex(directory / index_name(base_offset), base_offset, interval_bytes),
                   created_ms, next_offset=base_offset)

    def on_batch(self, info: BatchInfo, position: int) -> None:
        """A batch now lies at `position` (an append or a recovery scan)."""
        self.index.on_batch(info.last_offset, position, info.size)
        if self.first_timestamp < 0 and position == 0:
            self.first_timestamp = info.max_timestamp
        if position == 0 or (self.max_timestamp is not None and info.max_timestamp > self.max_timestamp):
            self.max_timestamp, self.max_timestamp_base = info.max_timestamp, info.base_offset
        self.next_offset = info.last_offset + 1

    def truncate_to(self, offset: int) -> None:
        """Cut the file at the first batch whose last offset is >= `offset` (Kafka's LogSegment.truncateTo:
        a batch holding `offset` goes whole); the index and timestamps are rebuilt in memory from the batches
        that stay, and the index file goes, as the active segment's lives in memory. `next_offset` is then
        where the segment ends."""
        self.index.reset()
        self.first_timestamp, self.max_timestamp, self.max_timestamp_base = -1, None, -1
        self.next_offset = self.base_offset
        cut = self.size
        with open(self.path, "rb") as f:
            try:
                for info in walk_headers(f.fileno(), 0, self.size):
                    if info.last_offset >= offset:
                        cut = info.position
                        break
                    self.on_batch(info, info.position)
            except BadBatch as e:
                raise CorruptLogError(self.path, 0, f"batch changed on disk after recovery: {e.reason}") from e
        if cut < self.size:
            os.truncate(self.path, cut)
            self.size = cut
        self.index.path.unlink(missing_ok=True)


class RecoveryPoint(NamedTuple):
    offset: int
    clean_segment: tuple[int, int] | None  # (base offset, size) of the last segment at a clean shutdown


def read_recovery_point(pdir: Path) -> RecoveryPoint | None:
    """The checkpoint, or None when missing or unreadable (then everything is scanned)."""
    lines = _read_lines(pdir / RECOVERY_POINT_FILE)
    if lines is None or len(lines) < 2:
        return None
    try:
        offset = int(lines[1])
        clean = None
        if len(lines) >= 3:
            word, base, size = lines[2].split()
            if word != "clean":
                return None
            clean = (int(base), int(size))
    except ValueError:
        return None
    return RecoveryPoint(offset, clean)


def write_recovery_point(pdir: Path, offset: int, clean_segment: tuple[int, int] | None = None) -> None:
    text = f"{_CHECKPOINT_VERSION}\n{offset}\n"
    if clean_segment is not None:
        text += f"clean {clean_segment[0]} {clean_segment[1]}\n"
    write_atomically(pdir / RECOVERY_POINT_FILE, text)


def read_cleaner_offset(pdir: Path) -> int:
    """The first offset the cleaner has not cleaned (0 when it never ran)."""
    lines = _read_lines(pdir / CLEANER_OFFSET_FILE)
    try:
        return int(lines[1]) if lines is not None and len(lines) >= 2 else 0
    except ValueError:
        return 0


def write_cleaner_offset(pdir: Path, offset: int) -> None:
    write_atomically(pdir / CLEANER_OFFSET_FILE, f"{_CHECKPOINT_VERSION}\n{offset}\n")


def _read_lines(path: Path) -> list[str] | None:
    try:
        lines = [line.strip() for line in path.read_text(encoding="ascii").splitlines() if line.strip()]
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return lines if lines and lines[0] == _CHECKPOINT_VERSION else None


def write_atomically(path: Path, text: str) -> None:
    """tmp file, fsync, rename over, fsync the directory: a crash leaves the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
