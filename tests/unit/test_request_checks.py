"""net/request_checks.py: a null where the schema refuses one is found, with its path; nulls the schema
allows, at the version asked, are not."""
from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.consumer import OffsetCommitRequest

from coordinator_server.net.request_checks import null_in_non_nullable
from protocol.apis import API_TABLE

Topic = OffsetCommitRequest.OffsetCommitRequestTopic
Partition = Topic.OffsetCommitRequestPartition
FIELDS = API_TABLE[8].request.json["fields"]


def commit(version: int, **changes: Any) -> Any:
    fields: dict[str, Any] = dict(
        group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, retention_time_ms=-1,
        topics=[Topic(name="t", partitions=[Partition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                      commit_timestamp=-1, committed_metadata=None)])])
    fields.update(changes)
    return OffsetCommitRequest[version](**fields)


@pytest.mark.parametrize(("changes", "found"), [
    ({}, None),  # group_instance_id and committed_metadata are nullable at v8
    ({"topics": None}, "Topics"),
    ({"group_id": None}, "GroupId"),
    ({"topics": [Topic(name=None, partitions=[])]}, "Topics[0].Name"),
    ({"topics": [Topic(name="x", partitions=[]), Topic(name="y", partitions=None)]}, "Topics[1].Partitions"),
])
def test_nulls_are_found_where_the_schema_refuses_them(changes: dict[str, Any], found: str | None) -> None:
    assert null_in_non_nullable(commit(8, **changes), FIELDS, 8) == found


def test_the_answer_depends_on_the_version() -> None:
    # GroupInstanceId exists from v7 only: at v6 the attribute is there (kafka-python) but not checked.
    assert null_in_non_nullable(commit(6), FIELDS, 6) is None
    assert null_in_non_nullable(commit(8), FIELDS, 8) is None
    # The same plan is reused: asking twice gives the same answer.
    assert null_in_non_nullable(commit(8, topics=None), FIELDS, 8) == "Topics"
