"""Kafka's own consumer-groups tool (`kafka-consumer-groups`, ConsumerGroupCommand of kafka-tools) and its Java
Admin, pointed at Kafka and at the server over the same groups, their answers compared.

The groups are made the same way on both by the raw-wire clients: a topic of three partitions with records
and one of one partition; a classic group of two members (the second static), Stable, with offsets committed
for two of its three partitions; a classic group left in PreparingRebalance (a second member's join parked
until the first rejoins); a classic group whose one member committed and left (Empty); a consumer-protocol
(KIP-848) group of one member, Stable, with one offset committed at its member epoch. Then one JVM per
scenario and broker (tests/kafka/java_tools.py) runs every step in turn, and the answers are recorded.

The tool prints tables padded to its longest value; each table is parsed into rows keyed by its header, so
what is compared is the values and not the widths. Rows are sorted (the tool orders some by hash), the tool's
listing keeps only the scenario's groups, the coordinator's address and node id become placeholders, and the
stack frames the tool prints under an error (`\\tat ...`) are dropped, keeping each exception's message. The
harness numbers member ids (the `CONSUMER-ID` column, the Admin's `member_id`) and replaces the scenario's
random prefix."""
from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.differential.harness import Run, scenario
from tests.differential.steps import create_topic
from tests.differential.test_consumer_group import Member, _await_topic_known
from tests.integration.group_client import (
    NONE,
    REBALANCE_IN_PROGRESS,
    Connection,
    GroupMember,
    close_all,
    wait_until,
)
from tests.kafka.java_tools import run_group_tools

RECORDS = {"t": {0: 5, 1: 3, 2: 2}, "u": {0: 4}}  # records produced to each partition: the log end offsets
NOT_LEADER_OR_FOLLOWER = 6
# A classic member's session and rebalance timeouts: long enough that no member is dropped, and the
# rebalancing group's join does not complete, while the JVM runs on a loaded machine, with no heartbeat.
SESSION_TIMEOUT_MS = 300_000
# A KIP-848 member's session is the broker's (45 s on both), so it is kept by heartbeats this often.
KEEP_ALIVE_S = 5.0
KIP848_MEMBER = "AAAAAAAAAAAAAAAAAAAAAQ"  # fixed, the same on both (a client makes a random one)


@dataclass
class Groups:
    t: str
    u: str
    stable: str
    empty: str
    kip848: str
    rebalancing: str
    seeded: str  # made by the steps: offsets committed to a group that did not exist
    nobody: str


# ------------------------------------------------------------------------------------------ set-up


def _produce(run: Run, topic: str, partition: int, count: int) -> None:
    batch = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=sys.maxsize)
    for i in range(count):
        batch.append(i, timestamp=int(time.time() * 1000), key=b"k%d" % i, value=b"v%d" % i, headers=[])
    t = ProduceRequest.TopicProduceData
    request = ProduceRequest[7](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[t(
        name=topic, partition_data=[t.PartitionProduceData(index=partition, records=bytes(batch.build()))])])

    def produced() -> bool:
        conn = Connection((run.target.host, run.target.port), "differential")
        try:  # not recorded: the produce answers are not what this scenario compares
            error: int = conn.call(request, ProduceResponse).responses[0].partition_responses[0].error_code
        finally:
            conn.close()
        # Kafka's Metadata may name the new partition's leader a moment before that broker leads it.
        assert error in (NONE, NOT_LEADER_OR_FOLLOWER), f"Produce to {topic}-{partition}: error {error}"
        return error == NONE
    wait_until(produced, what=f"a Produce to {topic}-{partition}")


def _commit(m: GroupMember | Member, group: str, generation: int, offsets: dict[tuple[str, int], int],
            version: int = 8) -> None:
    t = OffsetCommitRequest.OffsetCommitRequestTopic
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(t.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=""))
    request = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=generation, member_id=m.member_id, group_instance_id=None,
        retention_time_ms=-1, topics=[t(name=n, partitions=ps) for n, ps in topics.items()])
    conn = m.hb_conn if isinstance(m, GroupMember) else m.conn
    resp = conn.call(request, OffsetCommitResponse)
    assert all(p.error_code == NONE for topic in resp.topics for p in topic.partitions), resp


def _classic(run: Run, client_id: str, group: str, topics: list[str], instance_id: str | None = None) -> GroupMember:
    subscription = ConsumerProtocolSubscription(version=1, topics=topics, user_data=None, owned_partitions=[])
    return GroupMember(run.target, run.group(group), client_id, session_timeout_ms=SESSION_TIMEOUT_MS,
                       protocol_names=("range",), metadata=bytes(subscription.encode(version=1)),
                       group_instance_id=instance_id)


def _assignment(partitions: dict[str, list[int]]) -> bytes:
    a = ConsumerProtocolAssignment
    return bytes(a(version=0, assigned_partitions=[a.TopicPartition(topic=t, partitions=ps)
                                                   for t, ps in partitions.items()], user_data=None).encode(version=0))


def _expect(resp: Any) -> Any:
    assert resp.error_code == NONE, resp
    return resp


def _join_second(a: GroupMember, b: GroupMember) -> Any:
    """b's JoinGroup, parked, once the coordinator has it: a's heartbeat says the group is rebalancing."""
    joining = b.send_join()
    wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, what=f"{b.client_id}'s join reaching the coordinator")
    return joining


def _stable_group(run: Run, t: str) -> list[GroupMember]:
    """Two members, the second (a static member) joining after the first has synced, so that no two joins
    race: a rebalance that the first completes by rejoining, then a leader's assignment of t's partitions 0
    and 1 to itself and 2 to the other."""
    a, b = _classic(run, "client-a", "stable", [t]), _classic(run, "client-b", "stable", [t], "instance-b")
    _expect(a.join())
    _expect(a.sync({a.member_id: _assignment({t: [0, 1, 2]})}))
    joining = _join_second(a, b)
    _expect(a.join(member_id_required=False))
    _expect(joining.result())
    assert a.is_leader, (a, b)
    following = b.send_sync()
    _expect(a.sync({a.member_id: _assignment({t: [0, 1]}), b.member_id: _assignment({t: [2]})}))
    _expect(following.result())
    _commit(a, a.group_id, a.generation_id, {(t, 0): 4, (t, 1): 1})
    return [a, b]


def _rebalancing_group(run: Run, t: str) -> list[GroupMember]:
    """A group left in PreparingRebalance: its first member synced, a second has joined, and the first has
    not rejoined (it would be removed only at its rebalance timeout, SESSION_TIMEOUT_MS)."""
    a, b = _classic(run, "client-d", "rebalancing", [t]), _classic(run, "client-e", "rebalancing", [t])
    _expect(a.join())
    _expect(a.sync({a.member_id: _assignment({t: [0, 1, 2]})}))
    _join_second(a, b)
    return [a, b]


def _empty_group(run: Run, t: str, u: str) -> None:
    c = _classic(run, "client-c", "empty", [t, u])
    try:
        _expect(c.join())
        _expect(c.sync({c.member_id: _assignment({t: [0, 1, 2], u: [0]})}))
        _commit(c, c.group_id, c.generation_id, {(t, 0): 2, (t, 1): 2, (t, 2): 2, (u, 0): 1})
        assert c.leave().error_code == NONE
    finally:
        c.close()


def _kip848_group(run: Run, t: str) -> Member:
    m = Member(run, KIP848_MEMBER, t)
    m.group_id = run.group("kip848")
    _await_topic_known(run, t, 3, m.group_id)
    m.heartbeat("kip848: join", full=True, record=False)
    m.heartbeat("kip848: owning all", record=False)
    assert sum(len(tp.partitions) for tp in m.owned) == 3, m.owned
    _commit(m, m.group_id, m.epoch, {(t, 0): 3}, version=9)
    return m


@contextmanager
def _kept_alive(m: Member) -> Iterator[None]:
    """m heartbeats (unrecorded) from another thread while the block runs; nothing else uses its connection
    meanwhile. A Stable member's heartbeat changes nothing the tools show."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(KEEP_ALIVE_S):
            m.heartbeat("kip848: keep alive", record=False)
    thread = threading.Thread(target=beat, name="kip848-keep-alive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextmanager
def groups(run: Run) -> Iterator[Groups]:
    g = Groups(f"{run.group_prefix}-t", f"{run.group_prefix}-u", run.group("stable"), run.group("empty"),
               run.group("kip848"), run.group("rebalancing"), run.group("seeded"), run.group("nobody"))
    for topic, partitions in ((g.t, RECORDS["t"]), (g.u, RECORDS["u"])):
        create_topic(run, topic, len(partitions))
        for partition, count in partitions.items():
            _produce(run, topic, partition, count)
    members = _stable_group(run, g.t)
    kip848: Member | None = None
    try:
        members += _rebalancing_group(run, g.t)
        _empty_group(run, g.t, g.u)
        kip848 = _kip848_group(run, g.t)
        with _kept_alive(kip848):
            yield g
    finally:
        # The members leave, so that the next scenario's listing on this broker sees them gone.
        # The rebalancing group's second member leaves after its parked join is answered (the first's leave
        # completes the rebalance).
        for m in members:
            m.leave()
        close_all(members)
        if kip848 is not None:
            kip848.heartbeat("kip848: leave", member_epoch=-1, record=False)
            kip848.conn.close()


# ------------------------------------------------------------------------------------ normalising

_HEADER = re.compile(r"^[A-Z#][A-Z#()\- ]*$")
_COORDINATOR = re.compile(r"^\S+:\d+\s+\(\d+\)$")
_STACK_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")


def _columns(header: str) -> list[tuple[str, int]]:
    """Each column's name and where it starts; the one name with a space in it is kept whole."""
    spaced = header.replace("COORDINATOR (ID)", "COORDINATOR-(ID)")
    return [(m.group().replace("COORDINATOR-(ID)", "COORDINATOR (ID)"), m.start())
            for m in re.finditer(r"\S+", spaced)]


def _row(line: str, columns: list[tuple[str, int]]) -> dict[str, str]:
    # Every value starts where its header does (the tool left-aligns each column to at least its header's
    # width); cutting there keeps a value with a space in it whole.
    starts = [s for _, s in columns] + [len(line)]
    row = {name: line[starts[i]:starts[i + 1]].strip() for i, (name, _) in enumerate(columns)}
    if _COORDINATOR.match(row.get("COORDINATOR (ID)", "")):
        row["COORDINATOR (ID)"] = "<host>:<port>  (<node id>)"
    return row


def _sort_key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(v for k, v in row.items() if k != "CONSUMER-ID")


def parse_output(text: str, prefix: str) -> list[Any]:
    """The tool's stdout as a list of blocks (they are separated by blank lines): a table is a list of rows,
    any other block its lines. Rows naming another test's group are left out, as are lines listing one."""
    blocks: list[Any] = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        lines = [line.rstrip() for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        if _HEADER.match(lines[0]) and len(lines[0].split()) >= 2:
            columns = _columns(lines[0])
            rows = [_row(line, columns) for line in lines[1:]]
            rows = [r for r in rows if "GROUP" not in r or r["GROUP"].startswith(prefix)]
            blocks.append({"columns": [n for n, _ in columns], "rows": sorted(rows, key=_sort_key)})
        elif all(" " not in line for line in lines):  # `--list`: one group id a line
            # Another test's group named "" lists as an empty line, which splits the listing in two: only
            # the blocks naming this scenario's groups count.
            if mine := sorted(line for line in lines if line.startswith(prefix)):
                blocks.append(mine)
        else:
            blocks.append(lines)
    return blocks


def _tool_answer(answer: dict[str, Any], prefix: str) -> dict[str, Any]:
    stderr = [line.rstrip() for line in answer["stderr"].splitlines()
              if line.strip() and not _STACK_FRAME.match(line)]
    return {"exit": answer["exit"], "stdout": parse_output(answer["stdout"], prefix), "stderr": stderr}


def _keys_without_prefix(value: Any, prefix: str) -> Any:
    # The harness replaces the scenario's random prefix in values; the Admin's answers are keyed by group
    # and partition names too.
    if isinstance(value, dict):
        return {k.replace(prefix, "<prefix>"): _keys_without_prefix(v, prefix) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys_without_prefix(v, prefix) for v in value]
    return value


def _admin_answer(answer: dict[str, Any], prefix: str) -> Any:
    result = answer.get("result")
    if isinstance(result, list):  # listGroups: the scenario's groups only
        answer = {**answer, "result": [g for g in result if str(g.get("group_id", "")).startswith(prefix)]}
    return _keys_without_prefix(answer, prefix)


def run_steps(run: Run, steps: list[tuple[str, dict[str, Any]]]) -> None:
    """Every step in one JVM against run's target; each answer recorded under its label."""
    answers = run_group_tools(f"{run.target.host}:{run.target.port}", [s for _, s in steps])
    for (label, step), answer in zip(steps, answers, strict=True):
        if "tool" in step:
            run.record(label, _tool_answer(answer, run.group_prefix))
        else:
            run.record(label, _admin_answer(answer, run.group_prefix))


# -------------------------------------------------------------------------------------- scenarios


def _tool(*args: str) -> dict[str, Any]:
    return {"tool": list(args)}


@scenario("groups-command")
def groups_command(run: Run) -> None:
    with groups(run) as g:
        each = ["--group", g.stable, "--group", g.empty, "--group", g.kip848, "--group", g.rebalancing]
        reset = ["--reset-offsets", "--group", g.empty]
        run_steps(run, [
            ("--list", _tool("--list")),
            ("--list --state", _tool("--list", "--state")),
            ("--list --type", _tool("--list", "--type")),
            ("--list --state stable", _tool("--list", "--state", "stable")),
            ("--list --state empty --type classic", _tool("--list", "--state", "empty", "--type", "classic")),
            ("--list --type consumer", _tool("--list", "--type", "consumer")),
            ("--describe", _tool("--describe", *each)),
            ("--describe --offsets --verbose", _tool("--describe", "--offsets", "--verbose", *each)),
            ("--describe --members", _tool("--describe", "--members", *each)),
            ("--describe --members --verbose", _tool("--describe", "--members", "--verbose", *each)),
            ("--describe --state", _tool("--describe", "--state", *each)),
            ("--describe --state --verbose", _tool("--describe", "--state", "--verbose", *each)),
            ("--describe, no such group", _tool("--describe", "--group", g.nobody)),
            ("--describe --members, no such group", _tool("--describe", "--members", "--group", g.nobody)),
            ("--describe --state, no such group", _tool("--describe", "--state", "--group", g.nobody)),
            ("reset --to-earliest --dry-run", _tool(*reset, "--topic", g.t, "--to-earliest", "--dry-run")),
            ("reset --to-offset --dry-run", _tool(*reset, "--topic", f"{g.t}:0,1", "--to-offset", "1", "--dry-run")),
            ("reset --shift-by --dry-run", _tool(*reset, "--all-topics", "--shift-by", "2", "--dry-run")),
            ("reset --to-current --export", _tool(*reset, "--all-topics", "--to-current", "--export")),
            ("reset --to-datetime --dry-run", _tool(*reset, "--topic", g.t, "--to-datetime",
                                                    "2000-01-01T00:00:00.000", "--dry-run")),
            ("reset --by-duration --dry-run", _tool(*reset, "--topic", g.u, "--by-duration", "PT0S", "--dry-run")),
            ("reset --to-latest --dry-run, no such group", _tool("--reset-offsets", "--group", g.nobody,
                                                                 "--topic", g.t, "--to-latest", "--dry-run")),
            ("reset, Stable classic group", _tool("--reset-offsets", "--group", g.stable, "--topic", g.t,
                                                  "--to-earliest", "--dry-run")),
            ("reset, Stable consumer group", _tool("--reset-offsets", "--group", g.kip848, "--topic", g.t,
                                                   "--to-earliest", "--dry-run")),
            ("reset, rebalancing group", _tool("--reset-offsets", "--group", g.rebalancing, "--topic", g.t,
                                               "--to-earliest", "--execute")),
            ("reset --to-offset --execute", _tool(*reset, "--topic", g.t, "--to-offset", "1", "--execute")),
            ("reset --shift-by --execute", _tool(*reset, "--topic", g.u, "--shift-by", "-1", "--execute")),
            ("reset --to-latest --execute, new group", _tool("--reset-offsets", "--group", g.seeded,
                                                             "--topic", f"{g.t}:1", "--to-latest", "--execute")),
            ("--describe, after the resets", _tool("--describe", "--group", g.empty, "--group", g.seeded)),
            ("--describe --state, seeded group", _tool("--describe", "--state", "--verbose", "--group", g.seeded)),
            ("--list --state --type, seeded group", _tool("--list", "--state", "--type")),
            ("--delete-offsets", _tool("--delete-offsets", "--group", g.empty, "--topic", g.u)),
            ("--delete-offsets, subscribed classic group", _tool("--delete-offsets", "--group", g.stable,
                                                                 "--topic", g.t)),
            ("--delete-offsets, unsubscribed topic", _tool("--delete-offsets", "--group", g.stable,
                                                           "--topic", g.u)),
            ("--delete-offsets, subscribed consumer group", _tool("--delete-offsets", "--group", g.kip848,
                                                                  "--topic", g.t)),
            ("--delete-offsets, no such group", _tool("--delete-offsets", "--group", g.nobody, "--topic", g.t)),
            ("--describe, after --delete-offsets", _tool("--describe", "--group", g.empty)),
            ("--delete, non-empty groups", _tool("--delete", "--group", g.stable, "--group", g.kip848,
                                                 "--group", g.rebalancing)),
            ("--delete, Empty group", _tool("--delete", "--group", g.empty)),
            ("--delete, seeded and no such group", _tool("--delete", "--group", g.seeded, "--group", g.nobody)),
            ("--describe, deleted group", _tool("--describe", "--group", g.empty)),
            ("--list --state, after --delete", _tool("--list", "--state")),
        ])


def test_groups_command(differential: Callable[[str], None]) -> None:
    differential("groups-command")


def _admin(op: str, **fields: Any) -> dict[str, Any]:
    return {"admin": op, **fields}


@scenario("admin-groups")
def admin_groups(run: Run) -> None:
    with groups(run) as g:
        every = [g.stable, g.empty, g.kip848, g.rebalancing, g.nobody]
        run_steps(run, [
            ("listGroups", _admin("listGroups")),
            ("listGroups, classic", _admin("listGroups", types=["classic"])),
            ("listGroups, consumer", _admin("listGroups", types=["consumer"])),
            ("listGroups, Stable", _admin("listGroups", states=["Stable"])),
            ("listGroups, Empty classic", _admin("listGroups", states=["Empty"], types=["classic"])),
            ("listGroups, PreparingRebalance", _admin("listGroups", states=["PreparingRebalance"])),
            ("describeConsumerGroups", _admin("describeConsumerGroups", groups=every)),
            ("describeConsumerGroups, authorized operations", _admin(
                "describeConsumerGroups", groups=every, authorized_operations=True)),
            *((f"listConsumerGroupOffsets {name}", _admin("listConsumerGroupOffsets", group=group))
              for name, group in (("stable", g.stable), ("empty", g.empty), ("kip848", g.kip848),
                                  ("nobody", g.nobody))),
            ("listConsumerGroupOffsets stable, some partitions", _admin(
                "listConsumerGroupOffsets", group=g.stable, partitions=[f"{g.t}:0", f"{g.t}:2", f"{g.u}:0"])),
            ("alterConsumerGroupOffsets empty", _admin("alterConsumerGroupOffsets", group=g.empty,
                                                       offsets={f"{g.t}:0": 1, f"{g.u}:0": 4})),
            ("alterConsumerGroupOffsets stable", _admin("alterConsumerGroupOffsets", group=g.stable,
                                                        offsets={f"{g.t}:0": 1})),
            ("alterConsumerGroupOffsets kip848", _admin("alterConsumerGroupOffsets", group=g.kip848,
                                                        offsets={f"{g.t}:0": 1})),
            ("alterConsumerGroupOffsets rebalancing", _admin("alterConsumerGroupOffsets", group=g.rebalancing,
                                                             offsets={f"{g.t}:0": 1})),
            ("alterConsumerGroupOffsets, new group", _admin("alterConsumerGroupOffsets", group=g.seeded,
                                                            offsets={f"{g.t}:2": 2})),
            ("listConsumerGroupOffsets empty, altered", _admin("listConsumerGroupOffsets", group=g.empty)),
            ("listGroups, with the seeded group", _admin("listGroups")),
            ("describeConsumerGroups seeded", _admin("describeConsumerGroups", groups=[g.seeded])),
            ("deleteConsumerGroupOffsets empty", _admin("deleteConsumerGroupOffsets", group=g.empty,
                                                        partitions=[f"{g.u}:0"])),
            ("deleteConsumerGroupOffsets stable", _admin("deleteConsumerGroupOffsets", group=g.stable,
                                                         partitions=[f"{g.t}:0"])),
            ("deleteConsumerGroupOffsets kip848", _admin("deleteConsumerGroupOffsets", group=g.kip848,
                                                         partitions=[f"{g.t}:0", f"{g.u}:0"])),
            ("deleteConsumerGroupOffsets nobody", _admin("deleteConsumerGroupOffsets", group=g.nobody,
                                                         partitions=[f"{g.t}:0"])),
            ("listConsumerGroupOffsets empty, after delete", _admin("listConsumerGroupOffsets", group=g.empty)),
            ("deleteConsumerGroups", _admin("deleteConsumerGroups", groups=[*every, g.seeded])),
            ("listGroups, after delete", _admin("listGroups")),
        ])


def test_admin_groups(differential: Callable[[str], None]) -> None:
    differential("admin-groups")
