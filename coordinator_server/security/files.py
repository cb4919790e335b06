"""JSON files the operator edits with `coordinator-server users|acls`, re-read by the running server when
they change, and written atomically (temp file + rename) so the server never reads half a file."""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger("coordinator_server.security")

T = TypeVar("T")
RECHECK_S = 1.0  # how stale a changed file may be seen: one stat per second at most, not per request


def write_json_atomic(path: Path, data: object, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> object:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class ReloadingFile(Generic[T]):
    """`parse(json)` of a file, re-read when its mtime or size changes. A file that became unreadable or
    invalid keeps the last good value (and logs), so a typo cannot lock everyone out or let everyone in."""

    def __init__(self, path: Path, parse: Callable[[object], T], kind: str) -> None:
        self.path = path
        self._parse = parse
        self._kind = kind
        self._stamp = self._stat()
        self.value: T = parse(read_json(path))  # at start-up a bad file is an error, not a warning
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def get(self) -> T:
        now = time.monotonic()
        if now - self._checked >= RECHECK_S:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self.value = self._parse(read_json(self.path))
                    log.info("security_file_reloaded", kind=self._kind, path=str(self.path))
                except Exception as e:
                    log.error("security_file_reload_failed", kind=self._kind, path=str(self.path), error=str(e))
        return self.value
