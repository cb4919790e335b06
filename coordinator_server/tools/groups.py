"""`coordinator-server groups ...`: Kafka's `kafka-consumer-groups.sh` for this server, over the protocol.

    list                       ListGroups + DescribeGroups: group, state, protocol type, member count
    describe GROUP             DescribeGroups + FindCoordinator: state, protocol, coordinator, members and
                               their decoded assignments (ConsumerGroupDescribe for a consumer-protocol
                               group, KIP-848: its assignor and group epoch)
    offsets GROUP              OffsetFetch + ListOffsets(latest): committed, log end, lag per partition
    delete GROUP...            DeleteGroups
    reset-offsets GROUP ...    DescribeGroups (must be Empty or Dead), ListOffsets, then OffsetCommit

Tables for people by default, `--json` for scripts; exit 0 on success, 1 with one line on stderr on an
error (2 for a usage error, as argparse does). DescribeGroups carries neither the generation nor the
leader, so neither is shown: this tool only reports what the protocol says. The coordinator it shows is
FindCoordinator's answer (in a cluster, the leader of the group's `__consumer_offsets` partition).
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from coordinator_server.tools.kafka_client import (
    BOOTSTRAP_ENV,
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_MS,
    AdminSession,
    Coordinator,
    GroupDescription,
    Member,
    Partition,
)
from coordinator_server.tools.output import EXIT_ERROR, EXIT_OK, ToolError, note, run_tool, table, write_json

PROG = "coordinator-server groups"
# Kafka's ConsumerGroupCommand resets offsets only when the group is inactive: Empty, or Dead (unknown,
# which lets an operator seed a new group's position before its first consumer starts).
RESETTABLE_STATES = ("Empty", "Dead")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", metavar="HOST:PORT", default=None,
                        help=f"the server to talk to (env {BOOTSTRAP_ENV}, default {DEFAULT_BOOTSTRAP})")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS,
                        help=f"connect and request timeout (default {DEFAULT_TIMEOUT_MS})")
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect and manage consumer groups of a running "
                                     "coordinator-server (like kafka-consumer-groups.sh).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("list", parents=[common], help="every group: state, protocol type, members")
    p = sub.add_parser("describe", parents=[common], help="a group's state, protocol and members")
    p.add_argument("group")
    p = sub.add_parser("offsets", parents=[common],
                       help="committed offset, log end offset and lag per partition, and the total lag")
    p.add_argument("group")
    p = sub.add_parser("delete", parents=[common], help="delete groups (they must have no members)")
    p.add_argument("groups", nargs="+", metavar="group")
    p = sub.add_parser("reset-offsets", parents=[common],
                       help="plan (or, with --execute, commit) new offsets for an Empty group")
    p.add_argument("group")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, optionally with partitions (orders:0,2); repeatable")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log's range)")
    p.add_argument("--execute", action="store_true", help="commit the plan (without it: a dry run)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP
    command = _COMMANDS[args.command]

    def body() -> int:
        with AdminSession(bootstrap, args.timeout_ms) as session:
            return command(session, args)

    return run_tool(f"{PROG} {args.command}", body)


# ---------------------------------------------------------------------------------------------- list


def cmd_list(session: AdminSession, args: argparse.Namespace) -> int:
    listings = session.list_groups()
    # ListGroups has no member count: one DescribeGroups for all of them fills it in.
    described = session.describe_groups(g.group_id for g in listings)
    rows = []
    for g in listings:
        d = described.get(g.group_id)
        rows.append({"group_id": g.group_id, "state": d.state if d else g.state,
                     "protocol_type": g.protocol_type, "members": len(d.members) if d else None})
    if args.json:
        write_json(rows)
    elif rows:
        print(table(["GROUP", "STATE", "PROTOCOL-TYPE", "MEMBERS"],
                    [[r["group_id"], r["state"], r["protocol_type"] or None, r["members"]] for r in rows]), end="")
    else:
        note("No groups.")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ describe


def _existing_group(session: AdminSession, group_id: str) -> GroupDescription:
    group = session.describe_group(group_id)
    if not group.exists:
        raise ToolError(f"group {group_id!r} does not exist")
    return group


def format_assignment(member: Member) -> str | None:
    if member.assignment is None:
        return None
    by_topic: dict[str, list[int]] = {}
    for t, p in member.assignment:
        by_topic.setdefault(t, []).append(p)
    return "; ".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items())) or ""


def describe_json(group: GroupDescription, coordinator: Coordinator) -> dict[str, Any]:
    return {
        "group_id": group.group_id, "type": group.group_type, "state": group.state,
        "protocol_type": group.protocol_type, "protocol": group.protocol or None,
        **({"group_epoch": group.group_epoch} if group.group_epoch is not None else {}),
        "coordinator": {"node_id": coordinator.node_id, "host": coordinator.host, "port": coordinator.port},
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_topics": m.subscribed_topics,
            "assignment": None if m.assignment is None else [{"topic": t, "partition": p} for t, p in m.assignment],
        } for m in group.members],
    }


def cmd_describe(session: AdminSession, args: argparse.Namespace) -> int:
    group = _existing_group(session, args.group)
    coordinator = session.find_coordinator(args.group)
    if args.json:
        write_json(describe_json(group, coordinator))
        return EXIT_OK
    epoch = f"GROUP-EPOCH    {group.group_epoch}\n" if group.group_epoch is not None else ""
    print(f"GROUP          {group.group_id}\nTYPE           {group.group_type}\n{epoch}STATE          {group.state}\n"
          f"PROTOCOL-TYPE  {group.protocol_type or '-'}\nPROTOCOL       {group.protocol or '-'}\n"
          f"COORDINATOR    {coordinator.node_id} ({coordinator.address})\n"
          f"MEMBERS        {len(group.members)}")
    if group.members:
        print()
        print(table(["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"],
                    [[m.member_id, m.group_instance_id, m.client_id, m.client_host,
                      None if m.assignment is None else len(m.assignment), format_assignment(m)]
                     for m in group.members]), end="")
    return EXIT_OK


# ------------------------------------------------------------------------------------------- offsets


def offsets_report(session: AdminSession, group_id: str) -> dict[str, Any]:
    group = session.describe_group(group_id)
    committed = session.committed_offsets(group_id)
    owners = group.owners()
    partitions = sorted(set(committed) | set(owners))
    if not group.exists and not partitions:
        raise ToolError(f"group {group_id!r} does not exist")
    end = session.log_end_offsets(partitions)
    rows: list[dict[str, Any]] = []
    for tp in partitions:
        current, log_end = committed.get(tp), end.get(tp)
        # Like kafka-consumer-groups.sh: no lag without both a committed offset and a log end offset.
        lag = None if current is None or log_end is None else max(0, log_end - current)
        owner = owners.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "committed_offset": current, "log_end_offset": log_end,
                     "lag": lag, "member_id": owner.member_id if owner else None,
                     "client_host": owner.client_host if owner else None,
                     "client_id": owner.client_id if owner else None})
    total = sum(r["lag"] for r in rows if r["lag"] is not None)
    return {"group_id": group_id, "state": group.state, "partitions": rows, "total_lag": total}


def cmd_offsets(session: AdminSession, args: argparse.Namespace) -> int:
    report = offsets_report(session, args.group)
    if args.json:
        write_json(report)
        return EXIT_OK
    if report["state"] in ("Empty", "Dead"):
        note(f"Group {args.group!r} has no active members.")
    print(f"GROUP {report['group_id']}  STATE {report['state']}\n")
    print(table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID"],
                [[r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"], r["member_id"],
                  r["client_host"], r["client_id"]] for r in report["partitions"]]), end="")
    print(f"\nTOTAL LAG {report['total_lag']}")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- delete

_DELETE_HINTS = {
    "NON_EMPTY_GROUP": "the group still has members; stop its consumers first",
    "GROUP_ID_NOT_FOUND": "no such group",
}


def cmd_delete(session: AdminSession, args: argparse.Namespace) -> int:
    results = session.delete_groups(list(dict.fromkeys(args.groups)))
    if args.json:
        write_json([{"group_id": g, "error": err} for g, err in results.items()])
    else:
        for g, err in results.items():
            if err is None:
                print(f"Deleted group {g!r}.")
            else:
                hint = _DELETE_HINTS.get(err)
                print(f"Group {g!r} not deleted: {err}" + (f" ({hint})" if hint else ""))
    failed = [g for g, err in results.items() if err is not None]
    if failed:
        raise ToolError(f"{len(failed)} of {len(results)} group(s) not deleted: "
                        + ", ".join(f"{g} ({results[g]})" for g in failed))
    return EXIT_OK


# ------------------------------------------------------------------------------------- reset-offsets


def parse_topic_arg(text: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = text.partition(":")
    if not topic:
        raise ToolError(f"--topic {text!r}: no topic name")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError as e:
        raise ToolError(f"--topic {text!r}: partitions must be integers, e.g. {topic}:0,1") from e


def _partitions_to_reset(session: AdminSession, args: argparse.Namespace,
                         committed: dict[Partition, int]) -> list[Partition]:
    if args.all_topics:
        if not committed:
            raise ToolError(f"group {args.group!r} has no committed offsets; name the topics with --topic")
        return sorted(committed)
    out: set[Partition] = set()
    for spec in args.topic:
        topic, wanted = parse_topic_arg(spec)
        existing = session.topic_partitions(topic)
        for p in wanted if wanted is not None else existing:
            if p not in existing:
                raise ToolError(f"topic {topic!r} has no partition {p} (it has {len(existing)})")
            out.add((topic, p))
    return sorted(out)


def reset_plan(session: AdminSession, args: argparse.Namespace) -> dict[str, Any]:
    group = session.describe_group(args.group)
    if group.state not in RESETTABLE_STATES:
        # The server would refuse the commit anyway (the member id is not a member); say why up front.
        raise ToolError(f"group {args.group!r} is {group.state} with {len(group.members)} member(s); offsets "
                        "can only be reset while the group is inactive (Empty). Stop its consumers first.")
    committed = session.committed_offsets(args.group)
    partitions = _partitions_to_reset(session, args, committed)
    start, end = session.log_start_offsets(partitions), session.log_end_offsets(partitions)
    rows = []
    for tp in partitions:
        lo, hi = start.get(tp), end.get(tp)
        if lo is None or hi is None:
            raise ToolError(f"ListOffsets gave no offsets for {tp[0]}-{tp[1]}")
        wanted = lo if args.to_earliest else hi if args.to_latest else args.to_offset
        # As Kafka's tool: an offset outside the log is moved to its nearest end, not committed as asked.
        new = min(max(wanted, lo), hi)
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": committed.get(tp), "new_offset": new,
                     "clamped_from": wanted if new != wanted else None, "error": None})
    return {"group_id": args.group, "state": group.state, "executed": False, "partitions": rows}


def cmd_reset_offsets(session: AdminSession, args: argparse.Namespace) -> int:
    plan = reset_plan(session, args)
    failed = []
    if args.execute:
        results = session.commit_offsets(args.group, {(r["topic"], r["partition"]): r["new_offset"]
                                                      for r in plan["partitions"]})
        for r in plan["partitions"]:
            r["error"] = results.get((r["topic"], r["partition"]), "NO_RESPONSE")
            if r["error"] is not None:
                failed.append(r)
        plan["executed"] = True
    if args.json:
        write_json(plan)
    else:
        for r in plan["partitions"]:
            if r["clamped_from"] is not None:
                note(f"{r['topic']}-{r['partition']}: offset {r['clamped_from']} is outside the log; "
                     f"using {r['new_offset']}")
        cols = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"] + (["ERROR"] if args.execute else [])
        print(table(cols, [[r["topic"], r["partition"], r["current_offset"], r["new_offset"]]
                           + ([r["error"] or "OK"] if args.execute else []) for r in plan["partitions"]]), end="")
        if not args.execute:
            note("Dry run: nothing was committed. Add --execute to commit these offsets.")
    if failed:
        raise ToolError(f"{len(failed)} partition(s) not committed: "
                        + ", ".join(f"{r['topic']}-{r['partition']} ({r['error']})" for r in failed))
    return EXIT_OK


_COMMANDS = {
    "list": cmd_list,
    "describe": cmd_describe,
    "offsets": cmd_offsets,
    "delete": cmd_delete,
    "reset-offsets": cmd_reset_offsets,
}

__all__ = ["EXIT_ERROR", "EXIT_OK", "build_parser", "main"]
