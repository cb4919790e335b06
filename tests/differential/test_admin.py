"""What admin tools and bootstrapping clients ask, the same requests to Kafka and to the server:
DescribeGroups, ListGroups, FindCoordinator (one key and batched) and ApiVersions."""
from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from tests.differential.harness import Run, scenario
from tests.differential.steps import call, commit, create_topic, describe, join_new, leave, member
from tests.integration.group_client import Connection, GroupMember, close_all


def _groups(run: Run) -> list[GroupMember]:
    """A stable group of one member and an empty one (its member left; it has committed offsets). The
    caller closes the members."""
    topic = f"{run.group_prefix}-t"
    create_topic(run, topic, 1)
    stable, gone = member(run, "client-a", group="stable"), member(run, "client-b", group="empty")
    for m in (stable, gone):
        join_new(run, m, m.client_id)
        run.record(f"{m.client_id}: sync", m.sync({m.member_id: b"assignment"}, version=5))
    commit(run, "b: commit", 8, gone.group_id, topic, {0: 5}, generation=gone.generation_id,
           member_id=gone.member_id, conn=gone.hb_conn)
    leave(run, gone, "b: leave")
    return [stable, gone]


@scenario("describe-groups")
def describe_groups(run: Run) -> None:
    members = _groups(run)
    try:
        for version in (0, 3, 5, 6):
            describe(run, f"describe v{version}", [*(m.group_id for m in members), run.group("nobody")], version)
        describe(run, "describe, empty group id", [""], 5)
        for version in (3, 6):
            call(run, f"describe v{version}, authorized operations", DescribeGroupsRequest[version](
                groups=[*(m.group_id for m in members), run.group("nobody")], include_authorized_operations=True),
                DescribeGroupsResponse)
    finally:
        close_all(members)


def test_describe_groups(differential: Callable[[str], None]) -> None:
    differential("describe-groups")


@scenario("list-groups")
def list_groups(run: Run) -> None:
    members = _groups(run)
    close_all(members[1:])
    call(run, "list v0", ListGroupsRequest[0](), ListGroupsResponse)
    call(run, "list v3", ListGroupsRequest[3](), ListGroupsResponse)
    call(run, "list v4, Stable", ListGroupsRequest[4](states_filter=["Stable"]), ListGroupsResponse)
    call(run, "list v4, Empty and Dead", ListGroupsRequest[4](states_filter=["Empty", "Dead"]), ListGroupsResponse)
    call(run, "list v5, classic", ListGroupsRequest[5](states_filter=[], types_filter=["classic"]), ListGroupsResponse)
    call(run, "list v5, consumer", ListGroupsRequest[5](states_filter=[], types_filter=["consumer"]),
         ListGroupsResponse)
    call(run, "list v5, unknown state", ListGroupsRequest[5](states_filter=["Sleeping"], types_filter=[]),
         ListGroupsResponse)
    close_all(members)


def test_list_groups(differential: Callable[[str], None]) -> None:
    differential("list-groups")


@scenario("find-coordinator")
def find_coordinator(run: Run) -> None:
    g = run.group()
    for version in (0, 1, 3):
        call(run, f"find v{version}", FindCoordinatorRequest[version](key=g, key_type=0), FindCoordinatorResponse)
    call(run, "find v3, empty group id", FindCoordinatorRequest[3](key="", key_type=0), FindCoordinatorResponse)
    for version in (4, 6):
        call(run, f"find v{version}, batched", FindCoordinatorRequest[version](
            key_type=0, coordinator_keys=[g, run.group("other"), ""]), FindCoordinatorResponse)
    call(run, "find v4, no keys", FindCoordinatorRequest[4](key_type=0, coordinator_keys=[]), FindCoordinatorResponse)


def test_find_coordinator(differential: Callable[[str], None]) -> None:
    differential("find-coordinator")


@scenario("api-versions")
def api_versions(run: Run) -> None:
    """Every API and version range each serves; a row of the doc for each one Kafka serves that the server
    does not (or serves over another range)."""
    v3 = call(run, "api versions v3", ApiVersionsRequest[3](client_software_name="differential",
                                                             client_software_version="1"), ApiVersionsResponse)
    conn = Connection((run.target.host, run.target.port), "differential")
    try:
        v0 = conn.call(ApiVersionsRequest[0](), ApiVersionsResponse)
        v4 = conn.call(ApiVersionsRequest[4](client_software_name="differential", client_software_version="1"),
                       ApiVersionsResponse)
    finally:
        conn.close()
    # v4 differs from v3 only in listing supported ranges that start at 0; its features are what is new.
    features = v4.to_dict(json=False)
    run.record("api versions v4", {k: features[k] for k in ("error_code", "supported_features",
                                                            "finalized_features", "finalized_features_epoch")})
    # v0 lists the same ranges; only that is compared, not each range a second time.
    run.record("api versions v0", {"error_code": v0.error_code,
                                   "same ranges as v3": v0.to_dict()["api_keys"] == v3.to_dict()["api_keys"]})


def test_api_versions(differential: Callable[[str], None]) -> None:
    differential("api-versions")
