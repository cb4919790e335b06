"""KIP-848 consumer groups on a fake clock: one test per rule of ConsumerGroupHeartbeat (epochs,
reconciliation order, fencing, timeouts, static members, errors with Kafka's messages)."""
from __future__ import annotations

import pytest

from coordinator_server.group.consumer.group import ConsumerGroupState
from coordinator_server.group.consumer.member import MemberState
from coordinator_server.group.consumer.settings import ConsumerGroupConfig
from protocol.errors import Errors
from tests.unit.consumer_group_harness import GROUP, Consumer, ConsumerHarness

ALL = {("orders", p) for p in range(6)}


def settle(*consumers: Consumer, rounds: int = 6) -> None:
    for _ in range(rounds):
        for c in consumers:
            c.poll()


def test_first_member_bumps_a_new_group_from_epoch_one_to_two_and_gets_everything() -> None:
    h = ConsumerHarness()
    result = h.join("m1")
    assert (result.error, result.member_id, result.member_epoch) == (Errors.NONE, "m1", 2)
    assert result.heartbeat_interval_ms == 5000
    assert h.tps(result.assignment) == ALL
    assert (h.group.group_epoch, h.group.assignment_epoch, h.group.state) == (2, 2, ConsumerGroupState.STABLE)


def test_a_first_member_with_no_subscription_joins_a_new_group_at_epoch_one() -> None:
    # Nothing to assign, so no bump: the member reconciles to the new group's empty target of epoch 1.
    h = ConsumerHarness()
    result = h.join("m1", topics=())
    assert (result.error, result.member_epoch, result.assignment) == (Errors.NONE, 1, {})
    assert (h.group.group_epoch, h.group.assignment_epoch, h.group.state) == (1, 1, ConsumerGroupState.STABLE)


def test_v0_member_without_id_gets_one_from_the_coordinator() -> None:
    h = ConsumerHarness()
    result = h.join("", api_version=0)
    assert result.error is Errors.NONE and result.member_id == "generated-1"


def test_v1_member_must_bring_its_own_id() -> None:
    h = ConsumerHarness()
    result = h.join("", api_version=1)
    assert (result.error, result.error_message) == (Errors.INVALID_REQUEST, "MemberId can't be empty.")


def test_a_partition_goes_to_its_new_owner_only_after_the_old_owner_revoked_it() -> None:
    h = ConsumerHarness()
    c1, c2 = Consumer(h, "m1"), Consumer(h, "m2")
    c1.poll()
    assert c1.partitions == ALL
    second = c2.poll()  # joins: group epoch 3, target gives it half, but m1 still owns them
    assert second.member_epoch == 3 and second.assignment == {}
    assert h.group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    first = c1.poll()  # told to revoke: stays at epoch 2 with what it keeps
    assert first.member_epoch == 2 and h.group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    kept = c1.partitions
    assert len(kept) == 3
    # m2 still cannot have them: m1 has not yet reported them gone.
    assert c2.poll().assignment is None and c2.partitions == set()
    c1.poll()  # reports only what it kept: the revoked ones are free, m1 moves to epoch 3
    assert c1.epoch == 3 and h.group.members["m1"].state is MemberState.STABLE
    c2.poll()
    assert c2.partitions == ALL - kept and c2.epoch == 3
    assert h.group.state is ConsumerGroupState.STABLE


def test_members_keeping_their_partitions_never_lose_them() -> None:
    h = ConsumerHarness(topics={"orders": 12})
    consumers = [Consumer(h, f"m{i}") for i in range(3)]
    settle(*consumers)
    before = {c.member_id: c.partitions for c in consumers}
    newcomer = Consumer(h, "m3")
    newcomer.poll()
    for _ in range(6):
        for c in consumers:
            c.poll()
            # What a member keeps is a subset of what it had at every step: never taken away and given back.
            assert before[c.member_id] >= c.partitions or c.partitions >= before[c.member_id]
        newcomer.poll()
    after = {c.member_id: c.partitions for c in consumers}
    for member_id, partitions in after.items():
        assert partitions <= before[member_id]  # sticky: only given up, none moved between old members
        assert len(partitions) == 3
    assert len(newcomer.partitions) == 3


def test_lost_response_previous_epoch_with_subset_is_accepted() -> None:
    h = ConsumerHarness()
    c1, c2 = Consumer(h, "m1"), Consumer(h, "m2")
    c1.poll()
    c2.poll()
    c1.poll()
    owned = tuple((t, tuple(sorted(p))) for t, p in c1.owned.items())
    c1.poll()  # m1 now at epoch 3 with previous epoch 2
    assert c1.epoch == 3
    again = h.heartbeat("m1", 2, owned_partitions=owned)
    assert again.error is Errors.NONE and again.member_epoch == 3


def test_fenced_member_epoch_messages() -> None:
    h = ConsumerHarness()
    h.join("m1")
    ahead = h.heartbeat("m1", 5, owned_partitions=())
    assert ahead.error is Errors.FENCED_MEMBER_EPOCH
    assert ahead.error_message == ("The consumer group member has a greater member epoch (5) than the one known by "
                                   "the group coordinator (2). The member must abandon all its partitions and rejoin.")
    c1, c2 = Consumer(h, "m1"), Consumer(h, "m2")
    c1.epoch, c1.owned = 2, dict(h.group.members["m1"].assigned_partitions)
    settle(c1, c2)
    c2.leave()
    settle(c1)  # m1 at epoch 4, previous epoch 3
    member = h.group.members["m1"]
    assert (member.member_epoch, member.previous_member_epoch) == (4, 3)
    behind = h.heartbeat("m1", 2, owned_partitions=())
    assert behind.error is Errors.FENCED_MEMBER_EPOCH
    assert behind.error_message == ("The consumer group member has a smaller member epoch (2) than the one known by "
                                    "the group coordinator (4). The member must abandon all its partitions and rejoin.")
    # The previous epoch, but owning a partition it was never given in that epoch: fenced too.
    other_topic = h.image.set_topic("other", 1).topic_id
    assert h.heartbeat("m1", 3, owned_partitions=((other_topic, (0,)),)).error is Errors.FENCED_MEMBER_EPOCH


def test_a_fenced_member_rejoins_with_epoch_zero_and_its_own_id() -> None:
    h = ConsumerHarness()
    h.join("m1")
    assert h.heartbeat("m1", 7, owned_partitions=()).error is Errors.FENCED_MEMBER_EPOCH
    rejoin = h.join("m1")
    assert rejoin.error is Errors.NONE and rejoin.member_epoch == 2 and h.tps(rejoin.assignment) == ALL


def test_unknown_member_and_unknown_group() -> None:
    h = ConsumerHarness()
    missing = h.heartbeat("m1", 3, group_id="nope", owned_partitions=())
    assert (missing.error, missing.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Consumer group nope not found.")
    h.join("m1")
    unknown = h.heartbeat("m9", 1, owned_partitions=())
    assert (unknown.error, unknown.error_message) == (Errors.UNKNOWN_MEMBER_ID, f"Member m9 is not a member of group {GROUP}.")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
    ({"owned_partitions": None}, "TopicPartitions must be empty when (re-)joining."),
    ({"instance_id": " "}, "InstanceId can't be empty."),
    ({"rack_id": ""}, "RackId can't be empty."),
])
def test_invalid_join_requests(kwargs: dict[str, object], message: str) -> None:
    h = ConsumerHarness()
    result = h.join("m1", **kwargs)
    assert (result.error, result.error_message) == (Errors.INVALID_REQUEST, message)
    assert h.manager.group(GROUP) is None and h.durable == []


def test_join_without_any_subscription_is_invalid() -> None:
    h = ConsumerHarness()
    result = h.join("m1", topics=None)
    assert result.error_message == ("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                                    "(re-)joining.")


def test_invalid_member_epoch() -> None:
    h = ConsumerHarness()
    result = h.heartbeat("m1", -3)
    assert (result.error, result.error_message) == (Errors.INVALID_REQUEST, "MemberEpoch is invalid.")


def test_unsupported_assignor() -> None:
    h = ConsumerHarness()
    result = h.join("m1", server_assignor="sticky")
    assert result.error is Errors.UNSUPPORTED_ASSIGNOR
    assert result.error_message == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."


def test_group_max_size() -> None:
    h = ConsumerHarness(config=ConsumerGroupConfig(max_size=1))
    h.join("m1")
    full = h.join("m2")
    assert (full.error, full.error_message) == (
        Errors.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of 1 members.")
    assert h.heartbeat("m1", 2, owned_partitions=()).error is Errors.NONE  # members already in are fine


def test_leave_removes_the_member_and_bumps_the_epoch() -> None:
    h = ConsumerHarness()
    c1, c2 = Consumer(h, "m1"), Consumer(h, "m2")
    settle(c1, c2)
    epoch = h.group.group_epoch
    result = c2.leave()
    assert (result.error, result.member_id, result.member_epoch) == (Errors.NONE, "m2", -1)
    assert "m2" not in h.group.members and h.group.group_epoch == epoch + 1
    assert h.group.state is ConsumerGroupState.ASSIGNING
    settle(c1)
    assert c1.partitions == ALL and h.group.state is ConsumerGroupState.STABLE


def test_the_last_member_leaving_brings_the_assignment_epoch_to_the_group_epoch() -> None:
    h = ConsumerHarness()
    c1, c2 = Consumer(h, "m1"), Consumer(h, "m2")
    settle(c1, c2)
    c2.leave()
    settle(c1)
    c1.leave()
    # An empty group's target (empty) is at its epoch: the leave wrote both.
    assert (h.group.group_epoch, h.group.assignment_epoch, h.group.state) == (5, 5, ConsumerGroupState.EMPTY)


def test_session_timeout_fences_a_silent_member() -> None:
    h = ConsumerHarness()
    c1, c2 = Consumer(h, "m1"), Consumer(h, "m2")
    settle(c1, c2)
    for _ in range(10):  # m1 keeps heartbeating, m2 is silent
        h.sleep(5000)
        c1.poll()
    assert "m2" not in h.group.members
    settle(c1)
    assert c1.partitions == ALL


def test_heartbeat_resets_the_session_timer() -> None:
    h = ConsumerHarness()
    c1 = Consumer(h, "m1")
    c1.poll()
    assert h.manager.scheduled_timers()[(GROUP, "m1", "session")] == h.host.now_ms + 45_000
    h.sleep(40_000)
    c1.poll()
    h.sleep(40_000)
    assert "m1" in h.group.members


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    h = ConsumerHarness()
    h.join("m1", rebalance_timeout_ms=10_000)
    h.join("m2")
    everything = tuple((t, tuple(sorted(p))) for t, p in h.group.members["m1"].assigned_partitions.items())
    stuck = h.heartbeat("m1", 2, owned_partitions=everything)
    assert h.group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert stuck.member_epoch == 2
    h.sleep(5_000)
    h.heartbeat("m1", 2, owned_partitions=everything)  # still holding on to what it must give up
    h.sleep(5_000)
    assert "m1" not in h.group.members


def test_static_member_restart_keeps_its_partitions_without_a_rebalance() -> None:
    h = ConsumerHarness(topics={"orders": 4})
    a, b = Consumer(h, "a-1", instance_id="a"), Consumer(h, "b-1", instance_id="b")
    settle(a, b)
    before, epoch = a.partitions, h.group.group_epoch
    left = a.leave(static=True)
    assert left.member_epoch == -2
    assert h.group.members["a-1"].member_epoch == -2  # still in the group, partitions kept
    restarted = Consumer(h, "a-2", instance_id="a")
    result = restarted.poll()
    assert result.error is Errors.NONE
    assert restarted.partitions == before and h.group.group_epoch == epoch
    assert "a-1" not in h.group.members
    b_before = b.partitions
    settle(b, restarted)
    assert b.partitions == b_before


def test_static_member_instance_in_use_is_unreleased() -> None:
    h = ConsumerHarness()
    h.join("a-1", instance_id="a")
    result = h.join("a-2", instance_id="a")
    assert result.error is Errors.UNRELEASED_INSTANCE_ID
    assert result.error_message == ("Static member a-2 with instance id a cannot join the group because the instance "
                                    "id is owned by a-1 member.")


def test_static_member_with_another_member_id_is_fenced() -> None:
    h = ConsumerHarness()
    h.join("a-1", instance_id="a")
    result = h.heartbeat("a-2", 1, instance_id="a", owned_partitions=())
    assert (result.error, result.error_message) == (
        Errors.FENCED_INSTANCE_ID, "Static member a-2 with instance id a was fenced by member a-1.")


def test_static_member_that_left_for_good_is_removed() -> None:
    h = ConsumerHarness()
    h.join("a-1", instance_id="a")
    assert h.heartbeat("a-1", -1, instance_id="a").error is Errors.NONE
    assert h.group.members == {}


def test_static_member_away_past_its_session_is_removed() -> None:
    h = ConsumerHarness()
    a = Consumer(h, "a-1", instance_id="a")
    a.poll()
    a.leave(static=True)
    h.sleep(45_000)
    assert h.group.members == {} and h.group.state is ConsumerGroupState.EMPTY


def test_subscription_change_revokes_the_topic_no_longer_subscribed() -> None:
    h = ConsumerHarness(topics={"orders": 2, "payments": 2})
    c = Consumer(h, "m1", topics=("orders", "payments"))
    settle(c)
    assert len(c.partitions) == 4
    r = h.heartbeat("m1", c.epoch, subscribed_topic_names=("orders",),
                    owned_partitions=tuple((t, tuple(p)) for t, p in c.owned.items()))
    assert h.tps(r.assignment) == {("orders", 0), ("orders", 1)}


def test_new_partitions_are_assigned_at_the_next_heartbeat() -> None:
    h = ConsumerHarness(topics={"orders": 2})
    c = Consumer(h, "m1")
    settle(c)
    h.image.set_topic("orders", 4)
    settle(c)
    assert c.partitions == {("orders", p) for p in range(4)}


def test_response_assignment_only_when_it_changed_or_on_a_full_request() -> None:
    h = ConsumerHarness()
    c = Consumer(h, "m1")
    settle(c)
    quiet = h.heartbeat("m1", c.epoch, owned_partitions=None)
    assert quiet.assignment is None
    full = h.heartbeat("m1", c.epoch, rebalance_timeout_ms=300_000, subscribed_topic_names=("orders",),
                       owned_partitions=tuple((t, tuple(p)) for t, p in c.owned.items()))
    assert h.tps(full.assignment) == ALL


def test_empty_classic_group_gives_way_keeping_its_offsets() -> None:
    h = ConsumerHarness()
    h.host.classic[GROUP] = {("orders", 0): "committed"}
    result = h.join("m1")
    assert result.error is Errors.NONE
    assert h.group.offsets == {("orders", 0): "committed"}
    from coordinator_server.group.records import GroupMetadataRecord
    assert h.durable[0] == GroupMetadataRecord(GROUP, None)


def test_a_failed_write_answers_the_mapped_error() -> None:
    h = ConsumerHarness()
    h.failing = Errors.KAFKA_STORAGE_ERROR
    assert h.join("m1").error is Errors.NOT_COORDINATOR


def test_response_waits_for_the_records() -> None:
    h = ConsumerHarness()
    h.holding = True
    answers: list[object] = []
    from coordinator_server.group.consumer.api import ConsumerGroupHeartbeatInput
    h.manager.handle_heartbeat(ConsumerGroupHeartbeatInput(GROUP, "m1", 0, rebalance_timeout_ms=1000,
                                                           subscribed_topic_names=("orders",), owned_partitions=()),
                               answers.append)
    assert answers == [] and h.durable == []
    h.release()
    assert len(answers) == 1 and h.durable


def test_gate_error_answers_without_touching_the_group() -> None:
    h = ConsumerHarness()
    h.host.gate = Errors.NOT_COORDINATOR
    assert h.join("m1").error is Errors.NOT_COORDINATOR
    assert h.manager.group(GROUP) is None


def test_records_replayed_give_the_same_group() -> None:
    h = ConsumerHarness(topics={"orders": 5, "payments": 3})
    consumers = [Consumer(h, f"m{i}", topics=("orders", "payments")) for i in range(3)]
    settle(*consumers)
    consumers[1].leave()
    settle(consumers[0], consumers[2])
    live, replayed = h.group, h.replayed()
    assert replayed.members == live.members
    assert (replayed.group_epoch, replayed.assignment_epoch) == (live.group_epoch, live.assignment_epoch)
    assert replayed.target_assignment == live.target_assignment
    assert replayed.partition_owners == live.partition_owners
    assert replayed.subscription_metadata == live.subscription_metadata
    assert replayed.state is live.state
