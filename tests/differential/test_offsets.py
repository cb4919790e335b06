"""Committed offsets, the same requests to Kafka and to the server: standalone commits (no member, as admin
tools and simple consumers send them) at old and new versions, read back at old and new versions."""
from __future__ import annotations

from collections.abc import Callable

from tests.differential.harness import Run, scenario
from tests.differential.steps import commit, create_topic, fetch_offsets


@scenario("offsets")
def offsets(run: Run) -> None:
    group, topic = run.group(), f"{run.group_prefix}-t"
    create_topic(run, topic, 2)
    commit(run, "commit v2", 2, group, topic, {0: 10, 1: 11}, metadata="v2")
    fetch_offsets(run, "fetch v1", 1, group, {topic: [0, 1]})
    commit(run, "commit v8", 8, group, topic, {0: 20}, metadata="v8")
    commit(run, "commit v9", 9, group, topic, {1: 21}, metadata="v9")
    fetch_offsets(run, "fetch v5, all topics", 5, group, None)
    fetch_offsets(run, "fetch v7, one partition and one never committed", 7, group, {topic: [0, 7]})
    fetch_offsets(run, "fetch v8", 8, group, {topic: [0, 1]})
    fetch_offsets(run, "fetch v9, all topics", 9, group, None)
    fetch_offsets(run, "fetch v8, group with no offsets", 8, run.group("nobody"), {topic: [0]})
    commit(run, "commit v8, unknown topic", 8, group, f"{run.group_prefix}-nosuch", {0: 1})
    commit(run, "commit v8, partition out of range", 8, group, topic, {5: 1})
    commit(run, "commit v8, metadata too large", 8, group, topic, {0: 30}, metadata="m" * 4097)
    commit(run, "commit v8, empty group id", 8, "", topic, {0: 1})
    commit(run, "commit v8, negative offset", 8, group, topic, {0: -5})
    fetch_offsets(run, "fetch v8, after the failed commits", 8, group, {topic: [0, 1]})
    for version in (1, 2, 7, 8):  # the empty group id is a group like any other here, for old clients
        fetch_offsets(run, f"fetch v{version}, empty group id", version, "", {topic: [0, 1]})


def test_offsets(differential: Callable[[str], None]) -> None:
    differential("offsets")
