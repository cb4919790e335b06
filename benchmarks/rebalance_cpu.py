"""The server's CPU of one rebalance, in process: what `server_cpu_s` of the rebalance scenario measures over
sockets, without the sockets, the load generator's process or the machine's other work in the figure.

    python -m benchmarks.rebalance_cpu MEMBERS [--repeat K] [--profile OUT.prof]

The server's own objects, built by `app.build` as for `app.serve` (runtime, topic store, request handlers;
the listeners' sockets bound and never served), one `Connection` per member and logging at warning as the
bench runs it, are driven through `Connection.data_received` with transports that only hand the answers back. The members act as
`benchmarks/members.py`'s do, with the same frames (`benchmarks/wire.py`): JoinGroup v5 with KIP-394's
MEMBER_ID_REQUIRED round trip, the leader assigns every member, SyncGroup v3, a member whose SyncGroup or
heartbeat is answered REBALANCE_IN_PROGRESS joins again; `--initial-rebalance-delay-ms 0` and fsync `always`. The figure
is the thread's CPU from the first JoinGroup to the last SyncGroup answered, less the members' own share
(counted around their code); the best and the median of K runs on one server, each group leaving at the end
as on stop. `--profile` writes cProfile's stats of the last run (findings.md, "The rebalance path").
"""
from __future__ import annotations

import asyncio
import cProfile
import json
import shutil
import sys
import tempfile
import time
from typing import Any

import uvloop

from coordinator_server.app import build
from coordinator_server.cli import configure_logging
from coordinator_server.config import Config
from coordinator_server.group.api import LeaveGroupInput, LeaveMember
from coordinator_server.net.awaiting import as_future
from coordinator_server.net.connection import Connection
from coordinator_server.net.handlers import RequestHandlers

from .members import HEARTBEAT_INTERVAL_S, MEMBER_ID_REQUIRED, REJOIN, SESSION_MS
from .wire import heartbeat_frame, join_frame, read_join_answer, sync_error, sync_frame


class _Run:
    """One rebalance: its members, what they saw, and the CPU they spent (not the server's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, group_id: str, size: int) -> None:
        self.loop, self.group_id, self.size = loop, group_id, size
        self.members_cpu_s = 0.0
        self.synced: dict[str, int] = {}
        self.done: asyncio.Future[None] = loop.create_future()


class _Transport:
    """What a connection writes to: whole answer frames go back to their member on the next loop turn."""

    def __init__(self, member: _Member) -> None:
        self.member = member
        self.buffer = b""

    def write(self, data: bytes) -> None:
        started = time.thread_time()
        buf = self.buffer + data
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            end = 4 + int.from_bytes(buf[:4], "big")
            self.member.run.loop.call_soon(self.member.on_answer, buf[4:end])
            buf = buf[end:]
        self.buffer = buf
        self.member.run.members_cpu_s += time.thread_time() - started

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40_000 + self.member.index) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class _Member:
    def __init__(self, run: _Run, handlers: RequestHandlers, index: int) -> None:
        self.run, self.index = run, index
        self.member_id = ""
        self.generation = -1
        self.correlation = 0
        self.expect = "join"  # the answer in flight: join, sync or heartbeat
        self.connection = Connection(handlers, 100 * 1024 * 1024)
        self.connection.connection_made(_Transport(self))  # type: ignore[arg-type]

    def join(self) -> None:
        self._send(self._join_frame)

    def heartbeat(self) -> None:
        if not self.run.done.done():
            self._send(self._heartbeat_frame)

    def on_answer(self, payload: bytes) -> None:
        self._send(self._next_frame, payload)

    def _send(self, make: Any, *args: Any) -> None:
        """Build the next frame (the members' CPU), then hand it to the connection (the server's)."""
        started = time.thread_time()
        try:
            frame = make(*args)
        except Exception as e:  # the run fails, rather than waiting for an answer that never comes
            if not self.run.done.done():
                self.run.done.set_exception(e)
            return
        finally:
            self.run.members_cpu_s += time.thread_time() - started
        if frame is not None:
            self.connection.data_received(frame)

    def _join_frame(self) -> bytes:
        self.correlation += 1
        self.expect = "join"
        return join_frame(self.run.group_id, SESSION_MS, self.member_id, "range", b"sub-%d" % self.index,
                          self.correlation)

    def _heartbeat_frame(self) -> bytes:
        self.correlation += 1
        self.expect = "heartbeat"
        return heartbeat_frame(self.run.group_id, self.generation, self.member_id, self.correlation)

    def _next_frame(self, payload: bytes) -> bytes | None:
        run = self.run
        if self.expect == "join":
            join = read_join_answer(payload)
            self.member_id = join.member_id
            if join.error_code == MEMBER_ID_REQUIRED:
                return self._join_frame()
            if join.error_code != 0:
                raise RuntimeError(f"JoinGroup answered {join.error_code}")
            self.generation = join.generation_id
            assignments = [(m, b"assignment-%d" % i) for i, m in enumerate(join.members)] \
                if join.leader == self.member_id else []
            self.correlation += 1
            self.expect = "sync"
            return sync_frame(run.group_id, self.generation, self.member_id, assignments, self.correlation)
        if self.expect == "heartbeat":
            if int.from_bytes(payload[9:11], "big") in REJOIN:  # v4: correlation, tags, throttle, error
                return self._join_frame()
            run.loop.call_later(HEARTBEAT_INTERVAL_S, self.heartbeat)
            return None
        error = sync_error(payload)
        if error in REJOIN:
            return self._join_frame()
        if error != 0:
            raise RuntimeError(f"SyncGroup answered {error}")
        run.synced[self.member_id] = self.generation
        if len(run.synced) == run.size and all(g == self.generation for g in run.synced.values()):
            run.done.set_result(None)
        else:
            # Synced in an earlier generation than the last: a heartbeat tells it to rejoin, as in the bench
            # (every 3 s: a shorter interval would add heartbeats to a large rebalance that the bench has not).
            run.loop.call_later(HEARTBEAT_INTERVAL_S, self.heartbeat)
        return None


async def measure(size: int, repeat: int, profile_to: str | None = None) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="rebalance-cpu-")
    try:
        config = Config(data_dir=data_dir, host="127.0.0.1", port=0, initial_rebalance_delay_ms=0,
                        max_session_timeout_ms=SESSION_MS)
        node = await build(config)  # the listeners' sockets are bound, never served: the bench has none
        runtime, handlers = node.runtime, node.handlers
        loop = asyncio.get_running_loop()
        runs = []
        for r in range(repeat):
            run = _Run(loop, f"rebalance-{size}-{r}", size)
            members = [_Member(run, handlers, i) for i in range(size)]
            profile = cProfile.Profile() if profile_to is not None and r == repeat - 1 else None
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            if profile is not None:
                profile.enable()
            for m in members:
                m.join()
            await asyncio.wait_for(run.done, 600)
            if profile is not None:
                profile.disable()
                profile.dump_stats(profile_to)
            cpu1, wall1 = time.thread_time(), time.perf_counter()
            runs.append({"server_cpu_s": round(cpu1 - cpu0 - run.members_cpu_s, 4),
                         "members_cpu_s": round(run.members_cpu_s, 4), "wall_s": round(wall1 - wall0, 4)})
            await as_future(runtime.leave_group, LeaveGroupInput(run.group_id, tuple(
                LeaveMember(m.member_id, None) for m in members), 3))
            for m in members:
                m.connection.connection_lost(None)
        await node.close_unserved()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    cpu = sorted(r["server_cpu_s"] for r in runs)
    return {"members": size, "server_cpu_s_best": cpu[0], "server_cpu_s_median": cpu[len(cpu) // 2], "runs": runs}


def main() -> None:
    args = sys.argv[1:]
    size = int(args[0])
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 5
    profile_to = args[args.index("--profile") + 1] if "--profile" in args else None
    configure_logging("json", "warning")
    print(json.dumps(uvloop.run(measure(size, repeat, profile_to))), flush=True)


if __name__ == "__main__":
    main()
