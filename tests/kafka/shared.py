"""One Kafka broker for a whole test run, shared by its xdist workers through two file locks.

The first worker to take `start.lock` starts the broker and writes its address to `broker.json`; every worker
(that one included) then holds a shared lock on `users.lock` while it uses the broker. The broker is the
child of the worker that started it and dies with it (tests/kafka/broker.py), so that worker stops it only
once no other holds `users.lock`: at its own teardown it waits for an exclusive lock, then, under
`start.lock` so no worker can join in between, removes `broker.json` and stops the broker. A worker that
arrives after that starts a new one. With no xdist, the one process starts and stops its own broker.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.kafka.broker import KafkaBroker


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    pid: int
    log_path: str
    started_s: float  # how long the broker took to start (format, JVM, ready), on the worker that started it

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_live(state: Path) -> BrokerAddress | None:
    with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
        info = BrokerAddress(**json.loads(state.read_text()))
        if _alive(info.pid):
            return info
    return None


@contextlib.contextmanager
def shared_broker(shared_dir: Path, heap: str = "1g") -> Iterator[BrokerAddress]:
    shared_dir.mkdir(parents=True, exist_ok=True)
    state = shared_dir / "broker.json"
    owned: KafkaBroker | None = None
    with open(shared_dir / "start.lock", "w") as start_lock, open(shared_dir / "users.lock", "w") as users:
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            info = _read_live(state)
            if info is None:
                owned = KafkaBroker(shared_dir / f"broker-{os.getpid()}", heap=heap).start()
                assert owned.proc is not None
                info = BrokerAddress(owned.host, owned.port, owned.proc.pid, str(owned.log_path), owned.started_s)
                state.write_text(json.dumps(info.__dict__))
            fcntl.flock(users, fcntl.LOCK_SH)
        except BaseException:
            if owned is not None:
                owned.stop()
            raise
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)
        try:
            yield info
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
            if owned is not None:
                _stop_when_unused(owned, state, start_lock, users)


def _stop_when_unused(owned: KafkaBroker, state: Path, start_lock: object, users: object) -> None:
    while True:
        fcntl.flock(users, fcntl.LOCK_EX)  # blocks while another worker holds its shared lock
        fcntl.flock(users, fcntl.LOCK_UN)
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a worker joined between the two locks: wait for it too
            state.unlink(missing_ok=True)
            owned.stop()
            fcntl.flock(users, fcntl.LOCK_UN)
            return
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)
