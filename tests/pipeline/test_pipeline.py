"""The Spark pipeline over a history the real server wrote while real clients joined, committed, left,
crashed and deleted a group (`pipeline.demo_data`): decoded rows equal what the clients did, the snapshot
equals the server's own OffsetFetch answers, and the report renders."""
from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from typing import Any

import pytest

from pipeline.demo_data import SESSION_TIMEOUT_MS

from .conftest import PipelineRun

pytestmark = pytest.mark.timeout(900)  # the first test pays for the demo run and the Spark jobs


def _events(run: PipelineRun, kind: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(node, member record, event) for every client event of a kind."""
    return [(node, m, e) for node, n in run.nodes.items() for m in n["members"] for e in m["events"]
            if e["event"] == kind]


def test_group_metadata_rows_are_what_the_clients_joined(pipeline_run: PipelineRun) -> None:
    gm = pipeline_run.parquet("decoded/group_metadata")
    live = gm[~gm["tombstone"]]
    by_key = {(r.node, r.group, r.generation): r for r in live.itertuples()}
    assigned = _events(pipeline_run, "assigned")
    assert len(assigned) >= 15
    for node, member, event in assigned:
        row = by_key.get((pipeline_run.node_uri(node), member["group"], event["generation"]))
        assert row is not None, (node, member["group"], event)
        members = {m["member_id"]: m for m in row.members}
        assert event["member_id"] in members, (event, list(members))
        m = members[event["member_id"]]
        assert m["client_id"] == member["client_id"]
        assert m["client_host"] == "/127.0.0.1"
        assert sorted(m["subscribed_topics"]) == sorted(member["topics"])
        decoded = sorted([a["topic"], p] for a in m["assignment"] for p in a["partitions"])
        assert decoded == event["partitions"]
        assert row.protocol_type == "consumer" and row.protocol == "range"
        assert row.leader in members
    # Every group starts at generation 0 (written when a JoinGroup creates it), and every generation a
    # client was assigned in is there (above). Others may be missing, as in Kafka: a generation whose
    # rebalance went back to PreparingRebalance before the leader's SyncGroup (a member joined or left
    # while the group was CompletingRebalance) is never written.
    for (node, group), gens in live.groupby(["node", "group"])["generation"]:
        gens = sorted({int(g) for g in gens})  # a float column: the tombstones' generation is null
        assert gens[0] == 0, (node, group, gens)


def test_offset_commit_rows_are_what_the_clients_committed(pipeline_run: PipelineRun) -> None:
    oc = pipeline_run.parquet("decoded/offset_commits")
    uri = {name: pipeline_run.node_uri(name) for name in pipeline_run.nodes}
    logged = Counter((r.node, r.group, r.topic, r.partition, r.committed_offset, r.metadata)
                     for r in oc[~oc["tombstone"]].itertuples())
    committed = Counter((uri[node], m["group"], e["topic"], e["partition"], e["offset"], e["metadata"])
                        for node, m, e in _events(pipeline_run, "commit"))
    assert len(committed) > 100
    assert committed - logged == Counter()  # every commit a client saw succeed is in the log, once
    # Anything more can only be a commit the killed member made but did not live to report.
    killed = {m["client_id"] for n in pipeline_run.nodes.values() for m in n["members"] if m["fate"] == "killed"}
    assert killed
    assert {k[5] for k in (logged - committed)} <= killed
    values = oc[~oc["tombstone"]]
    assert (values["commit_timestamp"] > 0).all() and values["expire_timestamp"].isna().all()
    assert oc.loc[oc["tombstone"], "committed_offset"].isna().all()


def test_deleted_group_is_tombstoned_and_gone_from_the_snapshot(pipeline_run: PipelineRun) -> None:
    deleted = {(pipeline_run.node_uri(n), g) for n, v in pipeline_run.nodes.items() for g in v["deleted_groups"]}
    assert deleted
    gm = pipeline_run.parquet("decoded/group_metadata")
    oc = pipeline_run.parquet("decoded/offset_commits")
    for node, group in deleted:
        group_rows = gm[(gm["node"] == node) & (gm["group"] == group)]
        assert group_rows.iloc[-1:]["tombstone"].tolist() == [True]  # the last record is the tombstone
        offsets = oc[(oc["node"] == node) & (oc["group"] == group)]
        committed = {(r.topic, r.partition) for r in offsets[~offsets["tombstone"]].itertuples()}
        tombstoned = {(r.topic, r.partition) for r in offsets[offsets["tombstone"]].itertuples()}
        assert committed and tombstoned == committed
    snap_groups = set(pipeline_run.parquet("snapshot/groups")["group"])
    snap_offsets = set(pipeline_run.parquet("snapshot/offsets")["group"])
    assert not {g for _, g in deleted} & (snap_groups | snap_offsets)


def test_snapshot_equals_the_servers_offset_fetch_answers(pipeline_run: PipelineRun) -> None:
    snap = pipeline_run.parquet("snapshot/offsets")
    got: dict[str, dict[str, int]] = {}
    for r in snap.itertuples():
        got.setdefault(r.group, {})[f"{r.topic}:{r.partition}"] = int(r.committed_offset)
    expected = {g: o for n in pipeline_run.nodes.values() for g, o in n["offset_fetch"].items() if o}
    assert got == expected
    groups = pipeline_run.parquet("snapshot/groups").set_index("group")
    gm = pipeline_run.parquet("decoded/group_metadata")
    for group in expected:
        assert groups.loc[group, "generation"] == gm[gm["group"] == group]["generation"].max()
        assert groups.loc[group, "member_count"] == 0  # every client left or was expired at the end


def test_rebalances_per_generation_and_group(pipeline_run: PipelineRun) -> None:
    gens = pipeline_run.parquet("rebalances/generations")
    orders = gens[(gens["node"] == pipeline_run.node_uri("node-0")) & (gens["group"] == "orders-app")] \
        .sort_values("generation")
    killed = next(e["member_id"] for _, m, e in _events(pipeline_run, "assigned") if m["fate"] == "killed")
    # The generation after the crash is the one that lost the killed member; the coordinator only
    # noticed when its session timed out, so the generation before it lasted at least that long.
    lost = orders[orders["left"].map(lambda left: killed in list(left))]
    assert len(lost) == 1
    before = orders[orders["generation"] == lost.iloc[0]["generation"] - 1].iloc[0]
    assert before["ms_to_next_generation"] >= SESSION_TIMEOUT_MS * 0.9
    assert (orders["churn"] == orders["joined"].map(len) + orders["left"].map(len)).all()
    assert orders["member_count"].max() == 3
    for row in orders.itertuples():
        assert sum(m["partitions"] for m in row.members) == (3 if row.member_count else 0)

    top = pipeline_run.parquet("rebalances/top_groups")
    assert top.iloc[0]["group"] == "orders-app"
    assert top.iloc[0]["rebalances"] == (orders["generation"] > 0).sum()
    hourly = pipeline_run.parquet("rebalances/hourly")
    assert hourly["rebalances"].sum() == top["rebalances"].sum() == (gens["generation"] > 0).sum()


def test_lag_against_the_topic_store(pipeline_run: PipelineRun) -> None:
    current = pipeline_run.parquet("lag/current")
    for name, node in pipeline_run.nodes.items():
        rows = current[current["node"] == pipeline_run.node_uri(name)]
        got = {(r.group, f"{r.topic}:{r.partition}"): (int(r.log_end_offset), int(r.lag)) for r in rows.itertuples()}
        expected = {(g, tp): (node["end_offsets"][tp], node["end_offsets"][tp] - o)
                    for g, offsets in node["offset_fetch"].items() for tp, o in offsets.items()}
        assert got == expected
    groups = pipeline_run.parquet("lag/groups").set_index("group")
    assert groups.loc["audit", "falling_behind"]  # the slow consumer
    assert not groups.loc["orders-app", "falling_behind"]
    assert groups.index[0] == "audit"  # most lag first
    history = pipeline_run.parquet("lag/history")
    assert (history["lag"] >= 0).all()
    # The log end at a commit is read from producer timestamps, which precede the append: never behind.
    assert (history["log_end_offset"] >= history["committed_offset"]).all()


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tables = 0
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs)["src"] or "")
        self.tables += tag == "table"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_report_renders(pipeline_run: PipelineRun) -> None:
    report = pipeline_run.out / "report"
    page = _Html()
    page.feed((report / "index.html").read_text(encoding="utf-8"))
    assert page.images == ["rebalances.png", "lag.png"]
    for image in page.images:
        data = (report / image).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    assert page.tables >= 5
    text = " ".join(page.text)
    for group in ("orders-app", "payments-app", "audit", "billing-app"):
        assert group in text
    assert "0 damaged or undecodable entries" in text


def test_report_explains_the_crashed_members_rebalance(pipeline_run: PipelineRun) -> None:
    # The demo's servers keep their JSON logs (server-log.jsonl) and conftest passes them: the report's
    # explainer names the killed orders member as the cause of a session-expiry rebalance.
    page = (pipeline_run.out / "report" / "index.html").read_text(encoding="utf-8")
    explained = page.split("Why groups rebalanced", 1)[1].split("<h2>", 1)[0]
    [killed] = [m for m in pipeline_run.nodes["node-0"]["members"] if m["fate"] == "killed"]
    member_id = [e for e in killed["events"] if e["event"] == "assigned"][-1]["member_id"]
    rows = re.findall(r"<tr>.*?</tr>", explained, re.DOTALL)
    assert any("session_expired" in row and member_id in row for row in rows), explained[:3000]


def test_timing(pipeline_run: PipelineRun) -> None:
    # Not a benchmark: a guard that the suite stays small enough for CI (docs/pipeline.md quotes these).
    print(f"pipeline test run: {pipeline_run.seconds}")
    assert pipeline_run.seconds["demo_data"] < 120
