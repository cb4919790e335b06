"""ACL entries, the ACL file, and `coordinator-server acls add|remove|list` (flags after kafka-acls.sh).

File (JSON): {"version": 1, "acls": [{"principal": "User:alice", "permission": "ALLOW",
"operation": "READ", "resource_type": "GROUP", "pattern_type": "LITERAL", "resource_name": "orders",
"host": "*"}, ...]}. A LITERAL name "*" matches every resource of its type; PREFIXED matches names that
start with it. The cluster resource is named "kafka-cluster", as in Kafka.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .files import read_json, write_json_atomic

FORMAT_VERSION = 1
CLUSTER_NAME = "kafka-cluster"
OPERATIONS = ("READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "ALL")
RESOURCE_TYPES = ("GROUP", "TOPIC", "CLUSTER")
PATTERN_TYPES = ("LITERAL", "PREFIXED")
PERMISSIONS = ("ALLOW", "DENY")
WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str  # "User:alice", or "User:*" for everyone
    permission: str  # ALLOW | DENY
    operation: str  # one of OPERATIONS
    resource_type: str  # GROUP | TOPIC | CLUSTER
    pattern_type: str  # LITERAL | PREFIXED
    resource_name: str
    host: str = WILDCARD  # a client IP address, or "*"

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.permission, PERMISSIONS, "permission"),
                                     (self.operation, OPERATIONS, "operation"),
                                     (self.resource_type, RESOURCE_TYPES, "resource_type"),
                                     (self.pattern_type, PATTERN_TYPES, "pattern_type")):
            if value not in allowed:
                raise ValueError(f"ACL {what} {value!r} is not one of {', '.join(allowed)}")
        if ":" not in self.principal:
            raise ValueError(f"ACL principal {self.principal!r} is not TYPE:NAME (e.g. User:alice)")

    def __str__(self) -> str:
        return (f"{self.permission} {self.principal} {self.operation} on {self.resource_type} "
                f"{self.pattern_type} {self.resource_name!r} from {self.host}")


def parse_acls(data: object) -> tuple[Acl, ...]:
    if not isinstance(data, dict) or not isinstance(data.get("acls"), list):
        raise ValueError('an ACL file is a JSON object with an "acls" array')
    out = []
    for i, entry in enumerate(data["acls"]):
        if not isinstance(entry, dict):
            raise ValueError(f"acls[{i}] is not an object")
        try:
            out.append(Acl(**{k: str(v) for k, v in entry.items()}))
        except TypeError as e:
            raise ValueError(f"acls[{i}]: {e}") from e
    return tuple(out)


def load_acls(path: Path) -> tuple[Acl, ...]:
    return parse_acls(read_json(path)) if path.exists() else ()


def save_acls(path: Path, acls: Sequence[Acl]) -> None:
    write_json_atomic(path, {"version": FORMAT_VERSION, "acls": [asdict(a) for a in acls]}, mode=0o644)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coordinator-server acls",
                                description="Manage the ACLs of --acl-file (flags as kafka-acls.sh).")
    p.add_argument("--file", required=True, help="the ACL file (the server's --acl-file)")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("add", "remove"):
        s = sub.add_parser(name, help=f"{name} ACLs: every principal x operation x resource given")
        s.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        s.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        s.add_argument("--operation", action="append", required=True, type=str.upper,
                       choices=OPERATIONS, metavar="OP", help=f"one of {', '.join(OPERATIONS)} (repeatable)")
        _resource_flags(s)
        s.add_argument("--host", default=WILDCARD, help="client address the ACL applies to (default *)")
    ls = sub.add_parser("list", help="list ACLs, optionally only those of a principal or resource")
    ls.add_argument("--principal")
    _resource_flags(ls)
    return p


def _resource_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument("--group", action="append", default=[])
    s.add_argument("--topic", action="append", default=[])
    s.add_argument("--cluster", action="store_true")
    s.add_argument("--resource-pattern-type", type=str.upper, choices=PATTERN_TYPES, default="LITERAL")


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    res = [("GROUP", g) for g in args.group] + [("TOPIC", t) for t in args.topic]
    if args.cluster:
        res.append(("CLUSTER", CLUSTER_NAME))
    return res


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.file)
    try:
        acls = list(load_acls(path))
    except ValueError as e:
        print(f"acls: {path}: {e}", file=sys.stderr)
        return 1
    if args.command == "list":
        shown = set(_resources(args))
        for a in acls:
            if args.principal and a.principal != args.principal:
                continue
            if shown and (a.resource_type, a.resource_name) not in shown:
                continue
            print(a)
        return 0
    resources = _resources(args)
    grants = [(p, "ALLOW") for p in args.allow_principal] + [(p, "DENY") for p in args.deny_principal]
    if not resources or not grants:
        print("acls: give at least one --allow-principal/--deny-principal and one --group/--topic/--cluster",
              file=sys.stderr)
        return 2
    try:
        wanted = [Acl(principal, perm, op, rtype, args.resource_pattern_type, name, args.host)
                  for principal, perm in grants for op in args.operation for rtype, name in resources]
    except ValueError as e:
        print(f"acls: {e}", file=sys.stderr)
        return 2
    if args.command == "add":
        acls += [a for a in wanted if a not in acls]
    else:
        missing = [a for a in wanted if a not in acls]
        acls = [a for a in acls if a not in wanted]
        for a in missing:
            print(f"acls: not present: {a}", file=sys.stderr)
    save_acls(path, acls)
    return 0
