#!/usr/bin/env python3
"""Render docs/compatibility.md from a JUnit XML report of the interop suite (tests/interop).

    python -m pytest tests/interop -n 2 --junitxml=build/interop-junit.xml
    python scripts/compat_matrix.py build/interop-junit.xml docs/compatibility.md
    python scripts/compat_matrix.py build/go-junit.xml docs/compatibility.md --keep docs/compatibility.md

With --keep, a run of some cells (`-k`) updates only those: every cell, mixed group and tool the report does
not hold is carried over from the given earlier matrix (result, footnote and client version), and the header
names both runs.

The "Differences from Apache Kafka" section (written by hand, checked by tests/differential) is kept from the
file being replaced.

Cells: `test_interop[<client>:<scenario>]` and `test_mixed_group[mixed:<assignor>]`. Outcomes: pass, fail,
"not supported by client" (skipped with that reason by the `unsupported` marker), "server bug" (an
xfail(strict=True) cell: a known server bug the suite keeps visible). Client versions come from the
`version:<client>` properties the tests record from each driver's start line.
"""
from __future__ import annotations

import argparse
import datetime as dt
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

CLIENTS = ["kafka-python", "confluent-kafka", "aiokafka", "kcat", "kafkajs", "sarama", "kafka-go",
           "platformatic-kafka", "franz-go", "ibm-sarama", "kafka-go-0.4", "java", "confluent-kafka+consumer",
           "franz-go+consumer", "java+consumer"]
# How each client is named in the matrix (its package name where the test id cannot hold it).
DISPLAY = {"sarama": "Sarama", "platformatic-kafka": "@platformatic/kafka", "ibm-sarama": "Sarama (IBM)",
           "kafka-go-0.4": "kafka-go 0.4", "java": "kafka-clients (Java)"}
# The group protocol a client row speaks: `<client>+consumer` is KIP-848's (group.protocol=consumer).
CONSUMER_SUFFIX = "+consumer"


def protocol_of(client: str) -> str:
    return "consumer (KIP-848)" if client.endswith(CONSUMER_SUFFIX) else "classic"


def display(client: str) -> str:
    """A client's name in the mixed groups' member lists: a KIP-848 one is marked as such."""
    base = client.removesuffix(CONSUMER_SUFFIX)
    name = DISPLAY.get(base, base)
    if base == client:
        return name
    return name[:-1] + ", KIP-848)" if name.endswith(")") else name + " (KIP-848)"


def group_members(members: str) -> list[str]:
    """The clients of a mixed group, as the test records them: joined by "+", which `<client>+consumer` has."""
    return re.split(r"\+(?!consumer(?:\+|$))", members) if members else []


def row_label(client: str, versions: dict[str, str]) -> str:
    base = client.removesuffix(CONSUMER_SUFFIX)
    return f"**{DISPLAY.get(base, base)}** {versions.get(client) or versions.get(base, '')}".strip()


CELL = re.compile(r"^(?:✅ (?P<pass>pass)|⛔ not supported by client \[(?P<note>\d+)\]|🐞 fails: (?P<bug>.*)"
                  r"|❌ fail(?::\s*(?P<fail>.*))?)$")


def parse_cell(text: str, notes: list[str]) -> tuple[str, str] | None:
    m = CELL.match(text.strip())
    if m is None:
        return None  # "not run", or something this script never writes
    if m["pass"]:
        return "pass", ""
    if m["note"]:
        return "not supported", notes[int(m["note"]) - 1]
    if m["bug"] is not None:
        return "server bug", m["bug"]
    return "fail", m["fail"] or ""


def previous_matrix(path: Path) -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, str],
                                         dict[str, tuple[str, str, str]], dict[str, tuple[str, str]], str]:
    """The cells, versions, mixed groups and tools of a matrix this script wrote, and its run line."""
    text = path.read_text(encoding="utf-8")
    notes = re.findall(r"^\d+\. (.*)$", text.split("Not supported by the client:", 1)[-1].split("\n## ", 1)[0],
                       re.MULTILINE)
    run = re.search(r"\): (run of .*?)\. Do not edit by hand", text)
    cells: dict[tuple[str, str], tuple[str, str]] = {}
    versions: dict[str, str] = {}
    mixed: dict[str, tuple[str, str, str]] = {}
    tools: dict[str, tuple[str, str]] = {}
    names = {DISPLAY.get(c, c): c for c in {c.removesuffix(CONSUMER_SUFFIX) for c in CLIENTS}}
    tool_tests = {(tool, checked): test for test, (tool, checked) in {**TOOLS, **REGEX}.items()}
    by_display = {display(c): c for c in CLIENTS}
    for line in text.splitlines():
        if not line.startswith("| "):
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        label = re.match(r"^\*\*(?P<name>.+?)\*\*\s*(?P<version>.*)$", cols[0])
        if label and len(cols) == 2 + len(SCENARIOS) and label["name"] in names:
            base = names[label["name"]]
            client = base + (CONSUMER_SUFFIX if cols[1].startswith("consumer") else "")
            if label["version"]:
                versions[client] = label["version"]
            for scenario, cell in zip(SCENARIOS, cols[2:], strict=True):
                if (parsed := parse_cell(cell, notes)) is not None:
                    cells[client, scenario] = parsed
        elif (group := re.match(r"^`(.+)`$", cols[0])) and len(cols) == 3:
            if (parsed := parse_cell(cols[2], notes)) is not None:
                members = "+".join(by_display.get(n.strip(), n.strip()) for n in cols[1].split(","))
                mixed[group[1]] = (members, *parsed)
        elif (len(cols) == 3 and (cols[0], cols[1]) in tool_tests
              and (parsed := parse_cell(cols[2], notes)) is not None):
            tools[tool_tests[cols[0], cols[1]]] = parsed
    # A matrix that was itself partly carried over names its runs oldest last; the cells kept here come from
    # the oldest or from a partial run since (which one is not recorded per cell).
    runs = re.findall(r"run of [^()]*?wall time with `[^`]*`", run[1]) if run else []
    if not runs:
        return cells, versions, mixed, tools, "an earlier run"
    since = " or a partial run since" if len(runs) > 1 else ""
    return cells, versions, mixed, tools, runs[-1] + since
SCENARIOS = {
    "join-range": "1 → 3 → 5 members with the range assignor: after each step every partition has exactly one "
                  "owner (and never two at once); the server selected `range`",
    "join-roundrobin": "the same with the round-robin assignor (kafkajs: its `RoundRobinAssigner`; "
                       "@platformatic/kafka: its `roundRobinAssigner`; kafka-go: its `RoundRobinGroupBalancer`)",
    "join-cooperative-sticky": "the same with `cooperative-sticky` (KIP-429): a member never revokes a partition "
                               "it keeps; the first member revokes exactly the 8 partitions that move",
    "leave": "one of 3 members closes (LeaveGroup; session timeout 30 s): the other two own everything",
    "crash": "one of 3 members is kill -9ed: its session (3 s) times out, the other two own everything",
    "slow-member": "a member stops polling mid-rebalance (sleeps in its revoke callback, Sarama 1.22 in its "
                   "session's `Cleanup`, Sarama 1.61 as its first claim ends, kafka-go 0.4 as a partition "
                   "reader of the ending generation returns; kcat, kafkajs, kafka-go 0.2.1 and "
                   "@platformatic/kafka, which have no such callback: SIGSTOP): it is dropped after the rebalance timeout (3 s) while the others own everything",
    "server-restart": "2 members consume and commit 200 records; the server is kill -9ed and restarted (same "
                      "port and data); 100 more records: the group re-forms, nothing below the committed "
                      "offsets is delivered again, all 300 arrive",
    "static-membership": "3 static members (`group.instance.id`); one is kill -9ed and restarted within its "
                         "session timeout: it gets its partitions back, no other member revokes anything and "
                         "the server completes no rebalance",
}
TOOLS = {
    "test_burrow_reports_each_groups_lag_and_status": (
        "Burrow", "four groups committing against a producer, each judged over its last 3 commits: one keeping up "
        "(OK, lag 0), one moving but falling behind (WARN), one committing the same offset (ERR: STALL), one that "
        "stopped committing with lag (ERR: STOP); each partition's current lag and the group's total equal the "
        "log end minus the last commit"),
    "test_kadm_lists_and_describes_groups[classic]": (
        "kadm (franz-go)", "a classic group of two franz-go members: ListGroups shows it Stable with protocol type "
        "`consumer`; DescribeGroups shows the `range` protocol and each member's assignment as the member "
        "reports it, with no rebalance"),
    "test_kadm_lists_and_describes_groups[consumer]": (
        "kadm (franz-go)", "a KIP-848 group of two franz-go members: ListGroups shows it Stable, of group type "
        "`consumer`; ConsumerGroupDescribe shows the coordinator's `range` assignor and each member's current "
        "assignment as the member reports it"),
    "test_kcat_lists_and_reads_consumer_offsets": (
        "kcat", "`kcat -L` lists `__consumer_offsets` (50 partitions) and the topics; `kcat -C -t "
        "__consumer_offsets` prints the coordinator's records, which decode to the group's commits"),
}
# KIP-848 subscriptions by regular expression, which the coordinator resolves (tests/interop/test_interop.py,
# test_regex_subscription): one row per client that sends the coordinator a regex.
REGEX = {
    "test_regex_subscription[regex:java+consumer]": (
        display("java+consumer"), "two members subscribe with `subscribe(SubscriptionPattern(\"rx-.*\"))`: "
        "they split `rx-a`; `rx-b` and `other`, created later, are resolved by the coordinator and `rx-b` alone "
        "is split too and read"),
}
def checked_rows(cases: dict[str, tuple[str, str]], outcomes: dict[str, tuple[str, str]],
                 render: Callable[[str, str], str]) -> list[str]:
    """A table row per test of `cases` (test -> who, what it checks), with its outcome rendered."""
    rows = []
    for test, (who, checked) in cases.items():
        result, detail = outcomes.get(test, ("not run", ""))
        rows.append(f"| {who} | {checked} | {render(result, detail)} |")
    return rows


NAME = re.compile(r"^test_interop\[(?P<client>[^:\]]+):(?P<scenario>[^\]]+)\]$")
MIXED = re.compile(r"^test_mixed_group\[mixed:(?P<group>[^\]]+)\]$")


def outcome(case: ET.Element) -> tuple[str, str]:
    for tag in ("failure", "error"):
        el = case.find(tag)
        if el is not None:
            return "fail", (el.get("message") or "").splitlines()[0][:200] if el.get("message") else ""
    el = case.find("skipped")
    if el is not None:
        msg = el.get("message") or ""
        if el.get("type") == "pytest.xfail":
            return "server bug", msg.removeprefix("reason: ").strip()
        m = re.search(r"not supported by client: (.*)", msg)
        if m:
            return "not supported", m.group(1).strip()
        return "skipped", msg
    return "pass", ""


# Written by hand and read by tests/differential (the accepted differences from Apache Kafka): carried over
# from the file being replaced, as the last section.
KEPT_SECTION = "## Differences from Apache Kafka"


def kept_section(text: str) -> str:
    start = text.find(f"\n{KEPT_SECTION}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start + 1:] if end < 0 else text[start + 1:end + 1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("junit")
    ap.add_argument("out")
    ap.add_argument("--keep", type=Path, default=None,
                    help="an earlier matrix: whatever this report does not hold is carried over from it")
    ap.add_argument("--jobs", default="-n 2", help="how pytest ran the report's cells, for the header")
    a = ap.parse_args()
    root = ET.parse(a.junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cells: dict[tuple[str, str], tuple[str, str]] = {}
    mixed: dict[str, tuple[str, str, str]] = {}
    versions: dict[str, str] = {}
    tools: dict[str, tuple[str, str]] = {}
    wall = max((float(s.get("time", 0)) for s in suites), default=0.0)
    stamp = next((s.get("timestamp") for s in suites if s.get("timestamp")), None)
    for case in root.iter("testcase"):
        for prop in case.iter("property"):
            name = prop.get("name") or ""
            if name.startswith("version:"):
                versions[name.removeprefix("version:")] = prop.get("value") or ""
        name = case.get("name") or ""
        if name in TOOLS or name in REGEX:
            tools[name] = outcome(case)
        if m := NAME.match(name):
            cells[m["client"], m["scenario"]] = outcome(case)
        elif m := MIXED.match(name):
            members = next((p.get("value") for p in case.iter("property") if p.get("name") == "client"), "")
            mixed[m["group"]] = (members or "", *outcome(case))
    if not cells and not mixed:
        print(f"no interop cells in {a.junit}", file=sys.stderr)
        return 1
    ran = len(cells) + len(mixed) + len(tools)
    kept_from = ""
    if a.keep is not None and a.keep.exists():
        old_cells, old_versions, old_mixed, old_tools, kept_from = previous_matrix(a.keep)
        ran_clients = {c for c, _ in cells}
        for key, value in old_cells.items():
            cells.setdefault(key, value)
        for client, version in old_versions.items():
            if client not in ran_clients:
                versions.setdefault(client, version)
        for key, mvalue in old_mixed.items():
            mixed.setdefault(key, mvalue)
        for key, tvalue in old_tools.items():
            tools.setdefault(key, tvalue)

    notes: list[str] = []

    def render(result: str, detail: str) -> str:
        if result == "pass":
            return "✅ pass"
        if result == "not supported":
            if detail not in notes:
                notes.append(detail)
            return f"⛔ not supported by client [{notes.index(detail) + 1}]"
        if result == "server bug":
            return f"🐞 fails: {detail}"
        if result == "fail":
            return f"❌ fail{': ' + detail if detail else ''}"
        return result

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False).stdout.strip()
    except OSError:
        commit = ""
    when = stamp or dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    lines = [
        "# Client compatibility",
        "",
        "Generated by `make compat-matrix` (`scripts/compat_matrix.py` from the JUnit report of `tests/interop`): "
        f"run of {when[:19].replace('T', ' ')}" + (f" at commit `{commit}`" if commit else "")
        + f", {wall:.0f} s wall time with `{a.jobs}`"
        + (f" ({ran} cells; every other one from the {kept_from})" if kept_from else "")
        + ". Do not edit by hand, but for the last section ([Differences from Apache Kafka]"
        "(#differences-from-apache-kafka)), which it keeps.",
        "",
        "Each cell runs real client code, one member per process (`tests/interop/drivers/`, "
        "`tests/interop/node/`, `tests/interop/go/`, `tests/interop/java/`), against the real server started with "
        "`--initial-rebalance-delay-ms 300`; topic `t` has 10 partitions. Consumers use the group protocol "
        "of their row: classic (`group.protocol=classic` for librdkafka), or KIP-848's (`group.protocol=consumer`: "
        "the coordinator assigns with its `range` assignor in `join-range` and `uniform`, incremental like "
        "cooperative-sticky, in `join-cooperative-sticky`; the server's session timeout of 3 s; in "
        "`static-membership` the member closes, leaving with epoch -2, instead of being kill -9ed, since KIP-848 "
        "releases an instance id only so), commit after processing (kcat: librdkafka's "
        "auto-commit every 200 ms; kafkajs: `autoCommit` after each batch; both Saramas: their offset manager "
        "every 200 ms; franz-go: its auto-commit of what earlier polls returned every 200 ms, and a blocking "
        "commit in its revoke callback; the Java client: `commitSync` after each batch and in its revoke "
        "callback, retried after the next poll when a rebalance got in the way; kafka-go and "
        "@platformatic/kafka: each message, kafka-go 0.4 through "
        "its consumer group's generation, retried while the generation lasts) and report every rebalance "
        "callback (kafka-go 0.2.1 has none: its reader's log lines say when it drops and takes partitions; "
        "kafka-go 0.4's `ConsumerGroup` hands out each generation with its assignment and ends it by "
        "cancelling the partition readers, which is the revoke; Sarama 1.61 starts and ends one claim per "
        "partition). The Go clients of the module proxy (franz-go, Sarama (IBM), kafka-go 0.4) are pinned by "
        "`tests/interop/go/mod/go.mod`; Sarama 1.22 and kafka-go 0.2.1 are Debian's; the Java client is "
        "Apache Kafka's `kafka-clients`, at the release `tests/kafka/pom.xml` pins.",
        "",
        "## Clients by scenario",
        "",
        "| Client (version) | Protocol | " + " | ".join(f"`{s}`" for s in SCENARIOS) + " |",
        "|---|---|" + "---|" * len(SCENARIOS),
    ]
    for client in CLIENTS:
        row = [row_label(client, versions), protocol_of(client)]
        for scenario in SCENARIOS:
            row.append(render(*cells[client, scenario]) if (client, scenario) in cells else "not run")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Not supported by the client:", ""]
    lines += [f"{i}. {n}" for i, n in enumerate(notes, 1)]
    lines += ["", "## Mixed groups", "",
              "Members of different libraries in one group with a common assignor: they split the topic, "
              "then the last one leaves (LeaveGroup) and the second is kill -9ed, and the rest split it again. "
              "kafkajs joins the round-robin groups with its `RoundRobinAssigner` registered under the name "
              "`roundrobin` (its own name, `RoundRobinAssigner`, is not one the other clients know). "
              "kafka-go 0.2.1 labels its subscription version 1 but writes the version-0 layout (no "
              "`OwnedPartitions`, KIP-429), which librdkafka, kafka-python and aiokafka leaders cannot parse "
              "(they assign it nothing): it has its own mixed group with the clients that read only the "
              "version-0 fields. @platformatic/kafka declares the version-0 layout it writes (its default "
              "says 1, with the same effect). kafka-go 0.4 writes the same version-1 label over the version-0 "
              "layout (`groupMetadata` in joingroup.go); franz-go and Sarama read such a subscription as "
              "version 0, so it shares `range-go` with them, any of them leading.", "",
              "| Group | Members | Result |", "|---|---|---|"]
    for group, (members, result, detail) in sorted(mixed.items()):
        names = ", ".join(display(c) for c in group_members(members))
        lines.append(f"| `{group}` | {names} | {render(result, detail)} |")
    lines += ["", "## Subscriptions by regular expression", "",
              "A KIP-848 member may subscribe with a regular expression that the coordinator resolves against "
              "the topics it knows (RE2 syntax, the whole name matching) and resolves again when topics come and "
              "go (at most every 10 s, as Kafka does); classic members match topic names themselves.", "",
              "| Client | Checked | Result |", "|---|---|---|"]
    lines += checked_rows(REGEX, tools, render)
    lines += ["", "## Tools", "",
              "The tools operators point at a broker, reading `__consumer_offsets` as a topic "
              "(`tests/interop/test_tools.py`): Burrow 1.2.1 (Debian's, on Debian's ZooKeeper) and kcat; and franz-go's "
              "admin client kadm, which asks the coordinator itself (`tests/interop/test_interop.py`).", "",
              "| Tool | Checked | Result |", "|---|---|---|"]
    lines += checked_rows(TOOLS, tools, render)
    lines += ["", "## Scenarios", ""]
    lines += [f"* **`{s}`**: {d}." for s, d in SCENARIOS.items()]
    lines += ["", "Client settings: heartbeat interval 300 ms; session timeout 6 s unless said above; "
              "`max.poll.interval.ms` / rebalance timeout 10 s (3 s in `slow-member`; librdkafka requires it "
              "to be ≥ the session timeout). "
              "A cell marked 🐞 is a known server bug kept visible as `xfail(strict=True)`.", ""]
    out = Path(a.out)
    kept = kept_section(out.read_text(encoding="utf-8")) if out.exists() else ""
    out.write_text("\n".join(lines) + (f"\n{kept}" if kept else ""))
    print(f"wrote {a.out}: {len(cells)} cells, {len(mixed)} mixed groups")
    return 0


if __name__ == "__main__":
    sys.exit(main())
