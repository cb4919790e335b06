"""Run one raw-wire scenario against Apache Kafka and against the server, and compare what they answered.

A scenario is a function of a `Run`: it talks to `run.target` (host and port) with the integration tests'
raw client (tests/integration/group_client.py, kafka-python's message classes) and records each response
it wants compared with `run.record(label, response)`. The same function runs against both; the two lists of
responses are normalised and compared field by field. Normalising removes only what is legitimately
different between two brokers answering the same requests:

- a member id is the client id (or group instance id) followed by a random UUID: the UUID becomes
  `<uuid N>`, numbered in order of first appearance (so "the same member" still compares equal); a member
  id that is a UUID alone becomes `<uuid N, base64>` or `<uuid N, hex>` (its form is compared);
- a topic id (random per broker) becomes `<topic id N>`, numbered likewise;
- throttle times, the coordinator's node id, host and port, and the finalized-features epoch become
  placeholders (an error answer's -1 / "" stay as they are);
- error codes are shown as NAME (code);
- the lists whose order carries no meaning (a group's members, the per-group answers of DescribeGroups,
  DeleteGroups and ListGroups, ApiVersions' APIs and features) are sorted or keyed by name;
- the random part of the scenario's group and topic names becomes `<prefix>`;
- ListGroups keeps only the groups the scenario made (both brokers serve the whole test session's groups).

Each difference left is a (scenario, field, Kafka's value, the server's value) and fails the test unless the
"Differences from Apache Kafka" table of docs/compatibility.md lists exactly that row, with a reason; a row of
the table that no longer happens fails the test too, so the table and the behaviour stay in step.
"""
from __future__ import annotations

import functools
import json
import re
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka.errors

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "compatibility.md"
SECTION = "Differences from Apache Kafka"
LIB_DIR = REPO / "build" / "kafka" / "lib"
ABSENT = "absent"

_UUID = re.compile(r"^(?P<prefix>.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MEMBER_FIELDS = {"member_id", "leader", "CONSUMER-ID"}  # the last: a column of the groups tool's tables
_BASE64_UUID = re.compile(r"^[A-Za-z0-9_-]{22}$")
_HEX_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_LIST_GROUPS_FIELDS = {"group_id", "protocol_type", "group_state", "group_type"}
_PLACEHOLDERS = {"throttle_time_ms": "<throttle>", "finalized_features_epoch": "<epoch>"}


@dataclass(frozen=True)
class Target:
    name: str  # "kafka" or "server"
    host: str
    port: int


@dataclass(frozen=True, order=True)
class Difference:
    scenario: str
    field: str
    kafka: str
    server: str

    def row(self, kind: str = "?", why: str = "?") -> str:
        return (f"| `{self.scenario}` | `{self.field}` | `{self.kafka}` | `{self.server}` | {kind} | {why} |")


@dataclass
class Run:
    """One scenario against one target: what it recorded, in order."""

    target: Target
    group_prefix: str  # every group the scenario makes starts with this (same on both targets)
    steps: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def is_kafka(self) -> bool:
        return self.target.name == "kafka"

    def group(self, name: str = "g") -> str:
        return f"{self.group_prefix}-{name}"

    def record(self, label: str, response: Any) -> Any:
        labels = {lbl for lbl, _ in self.steps}
        assert label not in labels, f"step label {label!r} used twice"
        self.steps.append((label, response.to_dict(json=False) if hasattr(response, "to_dict") else response))
        return response


Scenario = Callable[[Run], None]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    """Register a scenario under the name the doc's table uses."""
    def register(fn: Scenario) -> Scenario:
        assert name not in SCENARIOS, name
        SCENARIOS[name] = fn
        fn.scenario_name = name  # type: ignore[attr-defined]
        return fn
    return register


# ------------------------------------------------------------------------------------- normalising


@functools.cache
def api_names() -> dict[int, str]:
    """Every API's name by key, from the message specs inside the Kafka client jar."""
    jars = sorted(LIB_DIR.glob("kafka-clients-*.jar"))
    names: dict[int, str] = {}
    if not jars:
        return names
    with zipfile.ZipFile(jars[-1]) as jar:
        for entry in jar.namelist():
            if entry.startswith("common/message/") and entry.endswith("Request.json"):
                text = "\n".join(line for line in jar.read(entry).decode().splitlines()
                                 if not line.lstrip().startswith("//"))
                spec = json.loads(text)
                names[int(spec["apiKey"])] = spec["name"].removesuffix("Request")
    return names


class _Ids:
    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.topics: dict[uuid.UUID, int] = {}

    def topic(self, value: uuid.UUID) -> str:
        return f"<topic id {self.topics.setdefault(value, len(self.topics) + 1)}>"

    def member(self, value: str) -> str:
        if _BASE64_UUID.match(value):  # a KIP-848 member id: a UUID in URL-safe base64
            return f"<uuid {self.numbers.setdefault(value, len(self.numbers) + 1)}, base64>"
        if _HEX_UUID.match(value):
            return f"<uuid {self.numbers.setdefault(value, len(self.numbers) + 1)}, hex>"
        match = _UUID.match(value)
        if not match:
            return value
        n = self.numbers.setdefault(value, len(self.numbers) + 1)
        return f"{match.group('prefix')}-<uuid {n}>"


def _error(code: int) -> str:
    return f"{kafka.errors.for_code(code).message} ({code})"


def _normalise(value: Any, key: str, ids: _Ids, prefix: str) -> Any:
    if isinstance(value, dict):
        return _normalise_dict(value, ids, prefix)
    if isinstance(value, list):
        items = [_normalise(v, key, ids, prefix) for v in value]
        if key in ("members",) and all(isinstance(i, dict) and "member_id" in i for i in items):
            items.sort(key=lambda i: str(i["member_id"]))
        if items and all(isinstance(i, dict) and "group_id" in i for i in items):
            items.sort(key=lambda i: str(i["group_id"]))  # answers per group: DescribeGroups, DeleteGroups
        if key == "groups" and all(isinstance(i, dict) and "group_id" in i and set(i) <= _LIST_GROUPS_FIELDS
                                   for i in items):
            items = sorted((i for i in items if str(i["group_id"]).startswith("<prefix>")), key=lambda i: str(i["group_id"]))
        return items
    if isinstance(value, str) and prefix in value:
        value = value.replace(prefix, "<prefix>")
    if key == "topic_id" and isinstance(value, uuid.UUID) and value.int != 0:
        return ids.topic(value)
    if key in _MEMBER_FIELDS and isinstance(value, str):
        return ids.member(value)
    if key in _PLACEHOLDERS:
        return _PLACEHOLDERS[key]
    if key == "error_code" and isinstance(value, int):
        return _error(value)
    if key == "node_id" and isinstance(value, int) and value >= 0:
        return "<node id>"
    if key == "host" and isinstance(value, str) and value:
        return "<host>"
    if key == "port" and isinstance(value, int) and value > 0:
        return "<port>"
    return value


def _normalise_dict(value: dict[str, Any], ids: _Ids, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "api_keys" and isinstance(v, list):
            names = api_names()
            out[k] = {names.get(a["api_key"], f"key {a['api_key']}"): f"{a['min_version']}-{a['max_version']}"
                      for a in sorted(v, key=lambda a: a["api_key"])}
        elif k in ("supported_features", "finalized_features") and isinstance(v, list):
            out[k] = {f["name"]: "-".join(str(f[x]) for x in f if x != "name") for f in sorted(v, key=lambda f: f["name"])}
        else:
            out[k] = _normalise(v, k, ids, prefix)
    return out


def normalise(steps: list[tuple[str, Any]], prefix: str) -> dict[str, Any]:
    ids = _Ids()
    return {label: _normalise(response, "", ids, prefix) for label, response in steps}


# ------------------------------------------------------------------------------------------ diffing


def render(value: Any) -> str:
    if value is ABSENT:
        return ABSENT
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, bytes):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=repr, separators=(",", ":"))
    return str(value)


def _diff(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            yield from _diff(a.get(k, ABSENT), b.get(k, ABSENT), f"{path}.{k}" if path else k)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield path, a, b


def compare(name: str, kafka_run: Run, server_run: Run) -> list[Difference]:
    a = normalise(kafka_run.steps, kafka_run.group_prefix)
    b = normalise(server_run.steps, server_run.group_prefix)
    return sorted(Difference(name, path, render(x), render(y)) for path, x, y in _diff(a, b, ""))


def run_scenario(name: str, targets: list[Target]) -> list[Difference]:
    """Run the scenario on Kafka and then on the server (the same group names on both)."""
    fn = SCENARIOS[name]
    prefix = f"{name}-{uuid.uuid4().hex[:8]}"
    runs = {t.name: Run(t, prefix) for t in targets}
    for t in targets:
        fn(runs[t.name])
    return compare(name, runs["kafka"], runs["server"])


# --------------------------------------------------------------------------------- the doc's table


@dataclass(frozen=True)
class DocRow:
    difference: Difference
    kind: str
    why: str


def _cell(text: str) -> str:
    match = re.fullmatch(r"`(.*)`", text.strip())
    return (match.group(1) if match else text.strip()).replace("\\|", "|")


def documented() -> list[DocRow]:
    """The rows of the "Differences from Apache Kafka" table."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(SECTION)}\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/compatibility.md has no '## {SECTION}' section"
    rows = []
    for line in match.group(1).splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]
        if len(cells) != 6 or cells[0] in ("Scenario", "") or set(cells[0]) <= set("-:"):
            continue
        rows.append(DocRow(Difference(*(_cell(c) for c in cells[:4])), cells[4], cells[5]))
    return rows
