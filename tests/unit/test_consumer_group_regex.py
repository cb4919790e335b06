"""Subscriptions by regular expression: RE2's syntax checked, whole names matched, new topics picked up
at the next refresh (at most every 10 s, as Kafka batches them)."""
from __future__ import annotations

import pytest

from coordinator_server.group.consumer import regex
from coordinator_server.group.consumer.records import ConsumerGroupRegularExpressionRecord
from protocol.errors import Errors
from tests.unit.consumer_group_harness import Consumer, ConsumerHarness


@pytest.mark.parametrize(("pattern", "problem"), [
    ("ord(?=ers)", "lookaround assertions are not supported"),
    ("(?<!x)ord", "lookaround assertions are not supported"),
    ("(o)\\1", "backreferences are not supported"),
    ("(a+)+", "nested repetition is not supported"),
    ("[", "unterminated character set at position 0"),
])
def test_patterns_re2_would_refuse_or_that_could_backtrack_are_invalid(pattern: str, problem: str) -> None:
    with pytest.raises(regex.InvalidRegularExpression) as e:
        regex.validate(pattern)
    assert str(e.value) == f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {problem}."


def test_the_whole_name_must_match() -> None:
    assert regex.resolve("ord", ["orders", "ord"]) == {"ord"}
    assert regex.resolve("ord.*|pay[a-z]+", ["orders", "payments", "xorders"]) == {"orders", "payments"}


def test_member_subscribed_by_regex_gets_the_matching_topics() -> None:
    h = ConsumerHarness(topics={"orders": 2, "payments": 2, "audit": 1})
    c = Consumer(h, "m1", regex="orders|pay.*")
    c.poll()
    assert c.partitions == {("orders", 0), ("orders", 1), ("payments", 0), ("payments", 1)}
    [record] = [r for r in h.durable if isinstance(r, ConsumerGroupRegularExpressionRecord)]
    assert record.value is not None and record.value.topics == {"orders", "payments"}


def test_a_topic_created_later_is_picked_up_at_the_next_refresh() -> None:
    h = ConsumerHarness(topics={"orders": 2})
    c = Consumer(h, "m1", regex="ord.*")
    c.poll()
    h.image.set_topic("ordinals", 2)
    c.poll()
    assert ("ordinals", 0) not in c.partitions  # within 10 s of the last resolution
    h.sleep(10_000)
    c.poll()
    c.poll()
    assert c.partitions == {("orders", 0), ("orders", 1), ("ordinals", 0), ("ordinals", 1)}


def test_invalid_regex_is_refused_with_kafkas_error() -> None:
    h = ConsumerHarness()
    result = h.heartbeat("m1", 0, subscribed_topic_regex="(a+)+", rebalance_timeout_ms=1000, owned_partitions=())
    assert result.error is Errors.INVALID_REGULAR_EXPRESSION
    assert result.error_message == "SubscribedTopicRegex `(a+)+` is not a valid regular expression: nested repetition is not supported."


def test_the_last_member_leaving_drops_the_regex() -> None:
    h = ConsumerHarness(topics={"orders": 2})
    c = Consumer(h, "m1", regex="ord.*")
    c.poll()
    c.leave()
    assert h.group.resolved_regexes == {}
    assert any(isinstance(r, ConsumerGroupRegularExpressionRecord) and r.value is None for r in h.durable)
