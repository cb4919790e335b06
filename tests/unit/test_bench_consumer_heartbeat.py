"""The KIP-848 member driver's hand-built ConsumerGroupHeartbeat frames are the bytes the protocol package's
class builds, and what it reads of an answer is what that class encoded (benchmarks/consumer_heartbeat.py)."""
from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import consumer_heartbeat as hb
from benchmarks.wire import encode
from protocol.consumer_group_messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
topic_ids = st.binary(min_size=16, max_size=16)
partitions = st.dictionaries(topic_ids, st.frozensets(st.integers(0, 2**31 - 1), max_size=300), max_size=3)


def _request_owned(owned: hb.Partitions | None) -> list[object] | None:
    if owned is None:
        return None
    tp = ConsumerGroupHeartbeatRequest.TopicPartitions
    return [tp(topic_id=uuid.UUID(bytes=t), partitions=sorted(p)) for t, p in sorted(owned.items())]


@settings(max_examples=200)
@given(text, text, int32, int32, st.integers(-1, 2**31 - 1), st.one_of(st.none(), st.lists(text, max_size=3)),
       st.one_of(st.none(), text), st.one_of(st.none(), partitions))
def test_heartbeat_frame_is_the_protocol_packages(group_id: str, member_id: str, epoch: int, correlation_id: int,
                                                  rebalance_timeout_ms: int, names: list[str] | None,
                                                  assignor: str | None, owned: hb.Partitions | None) -> None:
    req = ConsumerGroupHeartbeatRequest[hb.VERSION](
        group_id=group_id, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=names, subscribed_topic_regex=None,
        server_assignor=assignor, topic_partitions=_request_owned(owned))
    assert hb.heartbeat_frame(group_id, member_id, epoch, correlation_id, rebalance_timeout_ms=rebalance_timeout_ms,
                              subscribed_topic_names=names, server_assignor=assignor, owned=owned) == \
        encode(req, correlation_id)


@settings(max_examples=200)
@given(st.integers(0, 120), st.one_of(st.none(), text), st.one_of(st.none(), text), int32, int32,
       st.one_of(st.none(), partitions), int32)
def test_answer_reads_as_encoded(error: int, message: str | None, member_id: str | None, epoch: int, interval: int,
                                 assignment: hb.Partitions | None, correlation_id: int) -> None:
    cls = ConsumerGroupHeartbeatResponse
    encoded = None if assignment is None else cls.Assignment(topic_partitions=[
        cls.Assignment.TopicPartitions(topic_id=uuid.UUID(bytes=t), partitions=sorted(p))
        for t, p in sorted(assignment.items())])
    resp = cls[hb.VERSION](throttle_time_ms=0, error_code=error, error_message=message, member_id=member_id,
                           member_epoch=epoch, heartbeat_interval_ms=interval, assignment=encoded)
    resp.with_header(correlation_id=correlation_id)
    framed = bytes(resp.encode(header=True, framed=True))
    assert hb.read_answer(framed[4:]) == hb.Answer(error, message, member_id, epoch, interval, assignment)
    assert int.from_bytes(framed[hb.error_offset():hb.error_offset() + 2], "big") == error
