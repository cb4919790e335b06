"""Durability of group metadata across `kill -9`, restarts and SIGTERM, over the real server and its
`__consumer_offsets` logs (`--fsync always`).

The rule under test: a SyncGroup is answered with error 0 only once its group record is durable. So at
any crash point the log's last record for the group is the generation of the last acknowledged SyncGroup,
or a newer one whose leader SyncGroup was sent but whose answers the crash cut off (written, then killed
before replying). Nothing acknowledged may be missing, and nothing may appear that was never sent.
"""
from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coordinator_server.group.partitioner import partition_for
from coordinator_server.group.records import GroupMetadataRecord, GroupMetadataValue
from coordinator_server.storage.codec import decode_record
from coordinator_server.storage.log import PartitionLog

from .conftest import ServerProcess
from .group_client import (
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupMember,
    close_all,
    wait_until,
)

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 4


def start_server(server_factory: Any, **flags: Any) -> ServerProcess:
    flags = {"initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 100, "offsets_partitions": OFFSETS_PARTITIONS,
             "fsync": "always", **flags}
    srv: ServerProcess = server_factory(**flags)
    return srv


# ------------------------------------------------------------------------------ reading the log


def group_records(data_dir: Path, group_id: str) -> list[GroupMetadataValue | None]:
    """Every GroupMetadataValue (None for a tombstone) of `group_id`, in log order, decoded from a copy
    of the data directory (opening a log runs recovery, which may truncate a torn tail: not on the
    server's own files)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "data"
        shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns(".lock"))
        plog = PartitionLog.open(copy, partition_for(group_id, OFFSETS_PARTITIONS))
        try:
            values = []
            for rec in plog.read():
                assert rec.key is not None
                decoded = decode_record(rec.key, rec.value)
                if isinstance(decoded, GroupMetadataRecord) and decoded.group_id == group_id:
                    values.append(decoded.value)
            return values
        finally:
            plog.close()


def last_group_value(data_dir: Path, group_id: str) -> GroupMetadataValue:
    values = group_records(data_dir, group_id)
    assert values and values[-1] is not None, f"no group record for {group_id}"
    return values[-1]


def assignments_of(value: GroupMetadataValue) -> dict[str, bytes]:
    return {m.member_id: m.assignment for m in value.members}


# ------------------------------------------------------------------------------ churning a group


class Stopped(Exception):
    """The server went away (or started shutting down) mid-step, as the test intended."""


@dataclass
class Generation:
    generation: int
    leader: str
    assignments: dict[str, bytes]


@dataclass
class Churn:
    """Members joining and leaving a group in a loop over raw protocol, recording what the server
    acknowledged. Single-threaded; another thread stops the server at a random moment."""

    srv: ServerProcess
    group_id: str
    rng: random.Random
    stopping: threading.Event
    session_timeout_ms: int = 10_000
    members: list[GroupMember] = field(default_factory=list)
    everyone: list[GroupMember] = field(default_factory=list)
    sent: dict[int, Generation] = field(default_factory=dict)  # leader SyncGroups sent, by generation
    acked: list[Generation] = field(default_factory=list)  # SyncGroups answered with error 0
    _names: Iterator[int] = field(default_factory=lambda: iter(range(10**6)))

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            if self.stopping.is_set():
                raise Stopped(what)
            raise AssertionError(what)

    def new_member(self) -> GroupMember:
        m = GroupMember(self.srv, self.group_id, f"m{next(self._names)}", session_timeout_ms=self.session_timeout_ms,
                        rebalance_timeout_ms=5000)
        self.everyone.append(m)
        return m

    def run(self, until: Callable[[], bool]) -> None:
        try:
            self.step_add()
            while not until():
                if len(self.members) < 2 or (len(self.members) < 4 and self.rng.random() < 0.5):
                    self.step_add()
                else:
                    self.step_leave()
        except (Stopped, OSError):
            pass  # the server is gone: the connections fail, or answer NOT_COORDINATOR while stopping

    def step_add(self) -> None:
        newcomer = self.new_member()
        parked = newcomer.send_join()
        self.await_rebalance()
        self.complete_rebalance([*self.members, newcomer], {id(newcomer): parked})

    def step_leave(self) -> None:
        leaver = self.rng.choice(self.members)
        resp = leaver.leave(self.rng.choice([0, 3]))
        self.check(resp.error_code == NONE, f"LeaveGroup: {resp}")
        self.members.remove(leaver)
        leaver.close()
        self.await_rebalance()
        self.complete_rebalance(list(self.members), {})

    def await_rebalance(self) -> None:
        # As a client learns it: its heartbeat answers REBALANCE_IN_PROGRESS.
        if self.members:
            first = self.members[0]
            deadline = time.monotonic() + 5
            while (code := first.heartbeat()) != REBALANCE_IN_PROGRESS:
                self.check(code == NONE and time.monotonic() < deadline, f"heartbeat while waiting: {code}")
                time.sleep(0.005)

    def complete_rebalance(self, members: list[GroupMember], parked: dict[int, Any]) -> None:
        pendings = [parked.get(id(m)) or m.send_join() for m in members]
        joins = [p.result() for p in pendings]
        self.check(all(j.error_code == NONE for j in joins), f"JoinGroup: {joins}")
        generation = joins[0].generation_id
        self.check(all(j.generation_id == generation for j in joins), f"one generation: {joins}")
        leader = next(m for m in members if m.is_leader)
        plan = {m.member_id: self.rng.randbytes(8) + f"@{generation}".encode() for m in members}
        syncs = {id(m): m.send_sync() for m in members if m is not leader}
        self.sent[generation] = Generation(generation, leader.member_id, plan)
        syncs[id(leader)] = leader.send_sync(plan)
        for m in members:
            resp = syncs[id(m)].result()
            self.check(resp.error_code == NONE, f"SyncGroup: {resp}")
            self.check(resp.assignment == plan[m.member_id], "SyncGroup answered another assignment")
            if not self.acked or self.acked[-1].generation != generation:
                self.acked.append(self.sent[generation])
        self.members = members

    def close(self) -> None:
        close_all(self.everyone)


def assert_disk_matches_acknowledged(churn: Churn, value: GroupMetadataValue) -> Generation:
    """The durable group is the last acknowledged generation, or a newer one sent but not answered."""
    assert churn.acked, "nothing was acknowledged before the server stopped"
    last = churn.acked[-1]
    if value.generation == last.generation:
        expected = last
    else:
        assert value.generation > last.generation, (
            f"acknowledged generation {last.generation} is lost: the log ends at {value.generation}")
        assert value.generation in churn.sent, f"generation {value.generation} on disk was never sent"
        expected = churn.sent[value.generation]
        assert value.generation == max(churn.sent), "an older unacknowledged generation on disk"
    assert (value.generation, value.leader, value.protocol, value.protocol_type) == (
        expected.generation, expected.leader, "range", "consumer")
    assert assignments_of(value) == expected.assignments
    return expected


def read_back_over_protocol(srv: ServerProcess, group_id: str, expected: Generation) -> None:
    """After a restart the loaded Stable group answers each member's SyncGroup for that generation with
    its stored assignment, and their heartbeats with 0."""
    readers = []
    try:
        for member_id, assignment in expected.assignments.items():
            m = GroupMember(srv, group_id, "reader")
            readers.append(m)
            m.member_id, m.generation_id, m.protocol_name = member_id, expected.generation, "range"
            resp = m.sync()
            assert (resp.error_code, resp.assignment) == (NONE, assignment), member_id
            assert m.heartbeat() == NONE
            assert m.heartbeat(generation_id=expected.generation - 1) == 22  # ILLEGAL_GENERATION
    finally:
        close_all(readers)


def churn_then_stop(churn: Churn, delay_s: float, stop: Callable[[], int]) -> int:
    """Churn until `stop` (run on another thread `delay_s` after the first acknowledged SyncGroup, and
    responsible for setting `churn.stopping`) has stopped the server; returns stop's result."""
    results: list[int] = []
    stopper: threading.Thread | None = None

    def stop_later() -> None:
        time.sleep(delay_s)
        results.append(stop())

    def until() -> bool:
        nonlocal stopper
        if stopper is None and churn.acked:  # stop only once something was acknowledged
            stopper = threading.Thread(target=stop_later)
            stopper.start()
        return churn.stopping.is_set()

    try:
        churn.run(until)
        if stopper is not None:
            stopper.join()
    finally:
        churn.close()
    assert stopper is not None and results, "the churn ended before the server was stopped"
    return results[0]


# ------------------------------------------------------------------------------------- tests


def test_kill9_during_rebalances_keeps_last_acknowledged_sync(server_factory: Any) -> None:
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    srv = start_server(server_factory)
    iterations = 10
    for i in range(iterations):
        group_id = f"churn-{i}"
        churn = Churn(srv, group_id, rng, threading.Event())
        delay_s = rng.uniform(0.0, 0.6)
        print(f"seed {seed} iteration {i}: kill {delay_s:.3f}s after the first acknowledged SyncGroup")

        def kill(churn: Churn = churn) -> int:
            code = srv.kill9()
            churn.stopping.set()
            return code

        assert churn_then_stop(churn, delay_s, kill) == -9
        value = last_group_value(srv.data_dir, group_id)
        expected = assert_disk_matches_acknowledged(churn, value)
        srv.restart()
        read_back_over_protocol(srv, group_id, expected)
        print(f"  {len(churn.acked)} acknowledged, disk at generation {value.generation} "
              f"(last acknowledged {churn.acked[-1].generation})")
    assert srv.terminate() == 0
    assert len(srv.events("listening")) == iterations + 1


def test_loaded_members_get_fresh_session_deadlines(server_factory: Any) -> None:
    session_ms = 1000
    srv = start_server(server_factory)
    a = GroupMember(srv, "grp", "a", session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms)
    b = GroupMember(srv, "grp", "b", session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms)
    try:
        assert a.join().generation_id == 1  # no initial delay: a forms generation 1 alone
        a.sync({a.member_id: b"first"})
        pb = b.send_join()
        wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, what="rebalance for b")
        joins = [a.join(), pb.result()]
        assert [j.generation_id for j in joins] == [2, 2] and a.is_leader
        parked = b.send_sync()
        assert a.sync({a.member_id: b"A", b.member_id: b"B"}).assignment == b"A"
        assert parked.result().assignment == b"B"
        generation = a.generation_id
        ids = {"a": a.member_id, "b": b.member_id}
    finally:
        close_all([a, b])

    srv.kill9()
    time.sleep(session_ms * 1.3 / 1000)  # longer than a session: only a fresh deadline can keep them
    srv.restart()
    a = GroupMember(srv, "grp", "a", session_timeout_ms=session_ms)
    b = GroupMember(srv, "grp", "b", session_timeout_ms=session_ms)
    try:
        for m in (a, b):
            m.member_id, m.generation_id, m.protocol_name = ids[m.client_id], generation, "range"
        assert [a.heartbeat(), b.heartbeat()] == [NONE, NONE]
        b_last_heartbeat = time.monotonic()
        # a keeps heartbeating, b goes silent: b is removed after its session timeout, a rebalances.
        wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, timeout_s=5, interval_s=0.1,
                   what="a told to rebalance")
        assert time.monotonic() - b_last_heartbeat >= session_ms * 0.9 / 1000
        removed = srv.wait_for_event("member_removed", member_id=b.member_id)
        assert removed["reason"] == "session timeout"
        joined = a.join()
        assert (joined.error_code, joined.generation_id, joined.members[0].member_id) == (
            NONE, generation + 1, a.member_id)
        assert a.sync({a.member_id: b"all"}).assignment == b"all"
        assert b.heartbeat() == UNKNOWN_MEMBER_ID
        # Now a goes silent too: removed, and the group becomes Empty at the next generation.
        srv.wait_for_event("member_removed", timeout_s=5, member_id=a.member_id, reason="session timeout")
        srv.wait_for_event("group_empty", timeout_s=5, group_id="grp")
        assert a.heartbeat() == UNKNOWN_MEMBER_ID
    finally:
        close_all([a, b])
    assert srv.terminate() == 0
    values = group_records(srv.data_dir, "grp")
    last = values[-1]
    assert last is not None
    assert (last.generation, last.members, last.protocol, last.leader) == (generation + 2, (), None, None)
    assert values[-2] is not None and assignments_of(values[-2]) == {a.member_id: b"all"}


def test_sigterm_during_rebalances_exits_zero_with_acknowledged_on_disk(server_factory: Any) -> None:
    rng = random.Random()
    srv = start_server(server_factory)
    churn = Churn(srv, "churn", rng, threading.Event())

    def terminate() -> int:
        churn.stopping.set()  # from here on, NOT_COORDINATOR answers are expected
        return srv.terminate()

    assert churn_then_stop(churn, rng.uniform(0.05, 0.5), terminate) == 0
    assert srv.events("stopped")
    value = last_group_value(srv.data_dir, "churn")
    assert_disk_matches_acknowledged(churn, value)
