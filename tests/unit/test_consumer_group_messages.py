"""Golden bytes for ConsumerGroupHeartbeat (api key 68) and ConsumerGroupDescribe (api key 69), the KIP-848
messages whose classes come from Kafka 4.x's JSON specs (protocol/consumer_group_messages.py).

The expected bytes are assembled here field by field from the specs (flexible versions: compact strings
and arrays as unsigned varints of length + 1, a nullable struct behind an int8 marker, a tagged-field
count after every struct), so a schema file that drifts from Kafka's fails here, not in a client."""
from __future__ import annotations

import uuid
import warnings

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    from protocol.consumer_group_messages import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )

h = bytes.fromhex
TOPIC_ID = uuid.UUID("0102030405060708090a0b0c0d0e0f10")
NO_TAGS = "00"


def cstr(s: str | None) -> str:
    """A compact (nullable) string: unsigned varint length + 1 (0 = null), then UTF-8."""
    if s is None:
        return "00"
    data = s.encode()
    assert len(data) < 127
    return f"{len(data) + 1:02x}" + data.hex()


def i32(n: int) -> str:
    return (n & 0xFFFFFFFF).to_bytes(4, "big").hex()


def test_heartbeat_request_v0_and_v1_join() -> None:
    body_v0 = (cstr("grp") + cstr("m-1") + i32(0) + cstr("i-1") + cstr(None) + i32(300000)
               + "02" + cstr("orders")  # SubscribedTopicNames: one name
               + cstr("uniform") + "01" + NO_TAGS)  # TopicPartitions: empty
    # v1 adds SubscribedTopicRegex between the topic names and the server assignor.
    body_v1 = (cstr("grp") + cstr("m-1") + i32(0) + cstr("i-1") + cstr(None) + i32(300000)
               + "02" + cstr("orders") + cstr("^ord.*") + cstr("uniform") + "01" + NO_TAGS)
    for version, body, regex in ((0, body_v0, None), (1, body_v1, "^ord.*")):
        decoded = ConsumerGroupHeartbeatRequest.decode(h(body), version=version)
        assert (decoded.group_id, decoded.member_id, decoded.member_epoch) == ("grp", "m-1", 0)
        assert (decoded.instance_id, decoded.rack_id, decoded.rebalance_timeout_ms) == ("i-1", None, 300000)
        assert decoded.subscribed_topic_names == ["orders"]
        assert decoded.server_assignor == "uniform" and decoded.topic_partitions == []
        if version >= 1:
            assert decoded.subscribed_topic_regex == regex
        kwargs = {} if version == 0 else {"subscribed_topic_regex": regex}
        request = ConsumerGroupHeartbeatRequest(
            group_id="grp", member_id="m-1", member_epoch=0, instance_id="i-1", rack_id=None,
            rebalance_timeout_ms=300000, subscribed_topic_names=["orders"], server_assignor="uniform",
            topic_partitions=[], **kwargs)
        assert request.encode(version=version) == h(body)


def test_heartbeat_request_nulls_and_owned_partitions() -> None:
    body = (cstr("grp") + cstr("m-1") + i32(7) + cstr(None) + cstr(None) + i32(-1)
            + "00" + cstr(None) + cstr(None)  # unchanged subscription: null names, regex, assignor
            + "02" + TOPIC_ID.hex + "03" + i32(0) + i32(2) + NO_TAGS  # owns partitions 0 and 2
            + NO_TAGS)
    decoded = ConsumerGroupHeartbeatRequest.decode(h(body), version=1)
    assert decoded.member_epoch == 7 and decoded.rebalance_timeout_ms == -1
    assert decoded.subscribed_topic_names is None and decoded.subscribed_topic_regex is None
    [owned] = decoded.topic_partitions
    assert (owned.topic_id, owned.partitions) == (TOPIC_ID, [0, 2])


def test_heartbeat_response_with_and_without_assignment() -> None:
    cls = ConsumerGroupHeartbeatResponse
    head = i32(0) + "0000" + cstr(None) + cstr("m-1") + i32(4) + i32(5000)
    with_assignment = head + "01" + "02" + TOPIC_ID.hex + "02" + i32(1) + NO_TAGS + NO_TAGS + NO_TAGS
    assignment = cls.Assignment(topic_partitions=[cls.Assignment.TopicPartitions(topic_id=TOPIC_ID, partitions=[1])])
    for version in (0, 1):
        response = cls(throttle_time_ms=0, error_code=0, error_message=None, member_id="m-1", member_epoch=4,
                       heartbeat_interval_ms=5000, assignment=assignment)
        assert response.encode(version=version) == h(with_assignment)
        response.assignment = None
        assert response.encode(version=version) == h(head + "ff" + NO_TAGS)


def test_heartbeat_response_error_message() -> None:
    cls = ConsumerGroupHeartbeatResponse
    response = cls(throttle_time_ms=0, error_code=110, error_message="fenced", member_id=None, member_epoch=-1,
                   heartbeat_interval_ms=0, assignment=None)
    assert response.encode(version=1) == h(i32(0) + "006e" + cstr("fenced") + "00" + i32(-1) + i32(0) + "ff" + NO_TAGS)


def test_describe_request() -> None:
    body = "03" + cstr("a") + cstr("b") + "01" + NO_TAGS
    for version in (0, 1):
        decoded = ConsumerGroupDescribeRequest.decode(h(body), version=version)
        assert decoded.group_ids == ["a", "b"] and decoded.include_authorized_operations is True


@pytest.mark.parametrize("version", [0, 1])
def test_describe_response_member_type_from_v1(version: int) -> None:
    cls = ConsumerGroupDescribeResponse
    group_cls = cls.DescribedGroup
    member_cls = group_cls.Member
    assignment_cls = member_cls.Assignment
    tp = assignment_cls.TopicPartitions(topic_id=TOPIC_ID, topic_name="orders", partitions=[0])
    member = member_cls(member_id="m-1", instance_id=None, rack_id=None, member_epoch=3, client_id="c",
                        client_host="/127.0.0.1", subscribed_topic_names=["orders"], subscribed_topic_regex=None,
                        assignment=assignment_cls(topic_partitions=[tp]),
                        target_assignment=assignment_cls(topic_partitions=[]), member_type=1)
    group = group_cls(error_code=0, error_message=None, group_id="grp", group_state="Stable", group_epoch=3,
                      assignment_epoch=3, assignor_name="uniform", members=[member],
                      authorized_operations=-2147483648)
    member_bytes = (cstr("m-1") + cstr(None) + cstr(None) + i32(3) + cstr("c") + cstr("/127.0.0.1")
                    + "02" + cstr("orders") + cstr(None)
                    + "02" + TOPIC_ID.hex + cstr("orders") + "02" + i32(0) + NO_TAGS + NO_TAGS  # assignment
                    + "01" + NO_TAGS  # target assignment: no partitions
                    + ("01" if version >= 1 else "")  # MemberType: consumer
                    + NO_TAGS)
    expected = (i32(0) + "02" + "0000" + cstr(None) + cstr("grp") + cstr("Stable") + i32(3) + i32(3)
                + cstr("uniform") + "02" + member_bytes + i32(-2147483648) + NO_TAGS + NO_TAGS)
    assert cls(throttle_time_ms=0, groups=[group]).encode(version=version) == h(expected)
