"""The server's CPU per OffsetCommit, in process: what the commit rows' `server_cpu_us_per_request` measures
over sockets, without the sockets, the load generator's process or the machine's other work in the figure.

    python -m benchmarks.commit_cpu COMMITTERS SECONDS [--fsync always|never]

The server's own objects, built by `app.build` as for `app.serve` (its listeners' sockets bound and never
served), get one `Connection` per committer, driven through `Connection.data_received` with the
transports of `benchmarks/rebalance_cpu.py`. Each committer is a standalone committer of its own group,
`committer-N`, sending the commit frames the bench sends (`benchmarks/wire.py`) in a closed loop: its next
commit once its answer is in. After a one-second warm-up the figure is the thread's CPU over SECONDS, less
the committers' own share, per commit answered; `commits_per_round` is how many commits each of the
coordinator log's write rounds carried (the group commit at work).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from typing import Any

import uvloop

from coordinator_server.app import build
from coordinator_server.cli import configure_logging
from coordinator_server.config import Config, FsyncPolicy, parse_topic
from coordinator_server.net.connection import Connection
from coordinator_server.net.handlers import RequestHandlers

from .rebalance_cpu import _Transport
from .wire import COMMIT_TOPIC, commit_frame

WARMUP_S = 1.0
# Offsets a committer cycles through: each frame is built once, outside the figure.
FRAMES_PER_COMMITTER = 16


class _Run:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.members_cpu_s = 0.0  # what the transports spend handing answers back
        self.answered = 0
        self.stopped = False


class _Committer:
    """What `_Transport` hands answers to (it calls the committer a member): one committer's connection."""

    def __init__(self, run: _Run, handlers: RequestHandlers, index: int) -> None:
        self.run, self.index = run, index
        self.frames = [commit_frame(f"committer-{index}", COMMIT_TOPIC, o, correlation_id=o)
                       for o in range(FRAMES_PER_COMMITTER)]
        self.sent = 0
        self.connection = Connection(handlers, 100 * 1024 * 1024)
        self.connection.connection_made(_Transport(self))  # type: ignore[arg-type]

    def commit(self) -> None:
        frame = self.frames[self.sent % FRAMES_PER_COMMITTER]
        self.sent += 1
        self.connection.data_received(frame)

    def on_answer(self, _payload: bytes) -> None:
        self.run.answered += 1
        if not self.run.stopped:
            self.commit()


async def measure(committers: int, seconds: float, fsync: str) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="commit-cpu-")
    try:
        config = Config(data_dir=data_dir, host="127.0.0.1", port=0, fsync=FsyncPolicy(fsync),
                        topics=(parse_topic(f"{COMMIT_TOPIC}:1"),))
        node = await build(config)
        run = _Run(asyncio.get_running_loop())
        members = [_Committer(run, node.handlers, i) for i in range(committers)]
        for m in members:
            m.commit()
        await asyncio.sleep(WARMUP_S)
        log_ = node.runtime.log
        rounds0, answered0, members0 = log_.write_rounds, run.answered, run.members_cpu_s
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu1, wall1 = time.thread_time(), time.perf_counter()
        answered, rounds = run.answered - answered0, log_.write_rounds - rounds0
        server_cpu_s = cpu1 - cpu0 - (run.members_cpu_s - members0)
        run.stopped = True
        await asyncio.sleep(0.3)  # the commits in flight are answered before the node closes
        for m in members:
            m.connection.connection_lost(None)
        await node.close_unserved()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return {"committers": committers, "fsync": fsync, "commits_per_s": round(answered / (wall1 - wall0)),
            "server_cpu_us_per_commit": round(server_cpu_s / max(answered, 1) * 1e6, 2),
            "commits_per_round": round(answered / rounds, 1) if rounds else None}


def main() -> None:
    args = sys.argv[1:]
    fsync = args[args.index("--fsync") + 1] if "--fsync" in args else "always"
    configure_logging("json", "warning")
    print(json.dumps(uvloop.run(measure(int(args[0]), float(args[1]), fsync))), flush=True)


if __name__ == "__main__":
    main()
