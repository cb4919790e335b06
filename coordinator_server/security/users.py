"""The SASL users file and `coordinator-server users add|remove|list`.

Format (JSON, mode 0600): {"version": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": b64,
"iterations": 4096, "stored_key": b64, "server_key": b64}, "SCRAM-SHA-512": {...}}}}. Only salted SCRAM
keys are stored, never a password; PLAIN logins are checked by deriving from the stored salt.
"""
from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path

from .files import read_json, write_json_atomic
from .scram import DEFAULT_ITERATIONS, MECHANISMS, ScramCredential, make_credential

FORMAT_VERSION = 1
Users = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


def parse_users(data: object) -> Users:
    if not isinstance(data, dict) or not isinstance(data.get("users"), dict):
        raise ValueError('a users file is a JSON object with a "users" object')
    users: Users = {}
    for name, mechs in data["users"].items():
        if not isinstance(mechs, dict):
            raise ValueError(f"user {name!r}: expected an object of mechanisms")
        creds = {}
        for mech, cred in mechs.items():
            if mech not in MECHANISMS:
                raise ValueError(f"user {name!r}: unknown mechanism {mech!r}")
            creds[mech] = ScramCredential.from_json(cred)
        users[str(name)] = creds
    return users


def load_users(path: Path) -> Users:
    return parse_users(read_json(path)) if path.exists() else {}


def save_users(path: Path, users: Users) -> None:
    data = {"version": FORMAT_VERSION,
            "users": {u: {m: c.to_json() for m, c in creds.items()} for u, creds in sorted(users.items())}}
    write_json_atomic(path, data)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coordinator-server users",
                                description="Manage SASL users (salted SCRAM credentials) in --sasl-users-file.")
    p.add_argument("--file", required=True, help="the users file (the server's --sasl-users-file)")
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add a user or replace its password")
    add.add_argument("name")
    add.add_argument("--password", help="the password (default: prompt, or one line of stdin if not a tty)")
    add.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                     help="store credentials for this mechanism (repeatable; default: all). "
                     "PLAIN logins work with any of them")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    rm = sub.add_parser("remove", help="remove a user")
    rm.add_argument("name")
    sub.add_parser("list", help="list users and their mechanisms")
    return p


def _read_password(given: str | None) -> str:
    if given is not None:
        return given
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise SystemExit("users: passwords differ")
        return first
    return sys.stdin.readline().rstrip("\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.file)
    try:
        users = load_users(path)
    except ValueError as e:
        print(f"users: {path}: {e}", file=sys.stderr)
        return 1
    if args.command == "list":
        for name, creds in sorted(users.items()):
            print(f"{name}\t{','.join(sorted(creds))}")
        return 0
    if args.command == "remove":
        if users.pop(args.name, None) is None:
            print(f"users: no user {args.name!r}", file=sys.stderr)
            return 1
        save_users(path, users)
        return 0
    password = _read_password(args.password)
    if not password:
        print("users: empty password", file=sys.stderr)
        return 1
    try:
        users[args.name] = {m: make_credential(m, password, args.iterations)
                            for m in (args.mechanism or sorted(MECHANISMS))}
    except ValueError as e:
        print(f"users: {e}", file=sys.stderr)
        return 1
    save_users(path, users)
    return 0
