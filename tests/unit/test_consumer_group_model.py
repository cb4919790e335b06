"""A Hypothesis state machine over the KIP-848 consumer group core: members join, heartbeat (some slowly,
some holding on to partitions they must revoke), leave, leave for a static restart, go silent; classic
members (JoinGroup/SyncGroup/Heartbeat, eager like kafka-python's range) join the group too (KIP-848's
migration); topics grow; time passes and timeouts fence. After every step no partition is owned by two members — neither
in the coordinator's books nor by two clients it still counts as members — and what the log holds
replays to the same group. At the end, once every member heartbeats a few times, every subscribed
partition is owned and the group is Stable."""
from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator_server.group.api import JoinGroupInput, LeaveGroupInput, LeaveMember, SyncGroupInput
from coordinator_server.group.consumer.classic_members import ClassicMembers
from coordinator_server.group.consumer.group import ConsumerGroupState
from protocol.consumer_protocol import decode_assignment
from protocol.errors import Errors
from tests.unit.consumer_group_harness import GROUP, Consumer, ConsumerHarness

TOPIC_CHOICES = (("orders",), ("orders", "payments"), ("payments",))


class ClassicClient:
    """A classic member inside the consumer group: it gives up everything before it rejoins (eager), and
    owns what SyncGroup gave it."""

    def __init__(self, h: ConsumerHarness, classic: ClassicMembers, topics: tuple[str, ...]) -> None:
        self.h, self.classic, self.topics = h, classic, topics
        self.member_id = ""
        self.instance_id = None
        self.generation = -1
        self.owned: dict[uuid.UUID, frozenset[int]] = {}

    def join(self) -> None:
        self.owned = {}
        group = self.h.manager.group(GROUP)
        if group is None or not group.members:
            return  # an empty or absent group would be a classic group's (the façade's business)
        inp = JoinGroupInput(GROUP, self.member_id, None, 10_000, 300_000, "consumer",
                             (("range", _subscription(self.topics)),), 3, "client", "/127.0.0.1")
        replies: list = []  # type: ignore[type-arg]
        self.classic.join(group, inp, replies.append)
        [joined] = replies
        if joined.error is not Errors.NONE:
            return
        self.member_id, self.generation = joined.member_id, joined.generation_id
        self.classic.sync(group, SyncGroupInput(GROUP, self.generation, self.member_id, None, "consumer", "range", (), 5),
                          replies.append)
        synced = replies[-1]
        if synced.error is Errors.NONE:
            self.owned = {self.h.topic_id(t): frozenset(p) for t, p in decode_assignment(synced.assignment).items() if p}

    def poll(self) -> None:
        group = self.h.manager.group(GROUP)
        if group is None or self.member_id not in group.members:
            self.owned, self.member_id = {}, ""
            self.join()
            return
        error = self.classic.heartbeat(group, self.member_id, None, self.generation)
        if error is not Errors.NONE:
            self.join()

    def leave(self, static: bool = False) -> None:
        group = self.h.manager.group(GROUP)
        if group is not None and self.member_id in group.members:
            self.classic.leave(group, LeaveGroupInput(GROUP, (LeaveMember(self.member_id, None),), 3))
        self.owned = {}


def _subscription(topics: tuple[str, ...]) -> bytes:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
    return bytes(ConsumerProtocolSubscription(version=1, topics=list(topics), user_data=None,
                                              owned_partitions=[]).encode(version=1))


class ConsumerGroupModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = ConsumerHarness(topics={"orders": 5, "payments": 3})
        self.clients: dict[str, Consumer | ClassicClient] = {}
        self.classic = ClassicMembers(self.h.manager)
        self.stubborn: set[str] = set()  # clients that do not give up what they must revoke
        self.told: dict[str, dict[uuid.UUID, frozenset[int]]] = {}  # what a stubborn client was last told
        self.next_id = 0

    # -- rules ---------------------------------------------------------------------------------------------

    @rule(topics=st.sampled_from(TOPIC_CHOICES), static=st.booleans())
    def join(self, topics: tuple[str, ...], static: bool) -> None:
        if len(self.clients) >= 6:
            return
        self.next_id += 1
        member_id = f"m{self.next_id}"
        client = Consumer(self.h, member_id, topics=topics, instance_id=f"i{self.next_id}" if static else None)
        self.clients[member_id] = client
        client.poll()

    @rule(topics=st.sampled_from(TOPIC_CHOICES))
    def classic_join(self, topics: tuple[str, ...]) -> None:
        if len(self.clients) >= 6:
            return
        client = ClassicClient(self.h, self.classic, topics)
        client.join()
        if client.member_id:
            self.clients[client.member_id] = client

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        if isinstance(client, ClassicClient):
            client.poll()
        elif client.member_id in self.stubborn and client.epoch > 0:
            kept = dict(client.owned)
            result = client.poll()
            if result is not None and result.error is Errors.NONE:
                if result.assignment is not None:
                    self.told[client.member_id] = dict(client.owned)
                client.owned = kept  # ignores the revocation, keeps reporting everything
        else:
            client.poll()

    @precondition(lambda self: any(isinstance(c, Consumer) for c in self.clients.values()))
    @rule(data=st.data())
    def turn_stubborn_or_back(self, data: st.DataObject) -> None:
        member_id = data.draw(st.sampled_from(sorted(m for m, c in self.clients.items() if isinstance(c, Consumer))))
        self._come_round(member_id) if member_id in self.stubborn else self.stubborn.add(member_id)

    def _come_round(self, member_id: str) -> None:
        """A stubborn client gives up at last: it now owns what it was last told (as a late revocation)."""
        self.stubborn.discard(member_id)
        told = self.told.pop(member_id, None)
        if told is not None and member_id in self.clients:
            self.clients[member_id].owned = told

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        client = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        self.stubborn.discard(client.member_id)
        client.leave()

    @precondition(lambda self: any(isinstance(c, Consumer) and c.instance_id for c in self.clients.values()))
    @rule(data=st.data())
    def static_restart(self, data: st.DataObject) -> None:
        candidates = sorted(m for m, c in self.clients.items() if isinstance(c, Consumer) and c.instance_id)
        old = self.clients.pop(data.draw(st.sampled_from(candidates)))
        assert isinstance(old, Consumer)
        self.stubborn.discard(old.member_id)
        old.leave(static=True)
        self.next_id += 1
        new = Consumer(self.h, f"m{self.next_id}", topics=old.topics, instance_id=old.instance_id)
        self.clients[new.member_id] = new
        new.poll()

    @rule(ms=st.sampled_from([1_000, 5_000, 20_000, 50_000]))
    def time_passes(self, ms: int) -> None:
        self.h.sleep(ms)

    @rule(partitions=st.integers(5, 8))
    def orders_grows(self, partitions: int) -> None:
        current = self.h.image.topic("orders")
        assert current is not None
        if partitions > current.num_partitions:
            self.h.image.set_topic("orders", partitions)

    # -- invariants -----------------------------------------------------------------------------------------

    @invariant()
    def no_partition_owned_twice(self) -> None:
        group = self.h.manager.group(GROUP)
        if group is None:
            return
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        assert (topic_id, p) not in owners, f"{topic_id}-{p}: {owners[(topic_id, p)]} and {member.member_id}"
                        owners[(topic_id, p)] = member.member_id
        # Clients the coordinator still counts as members own only what it gave them.
        for client in self.clients.values():
            member = group.members.get(client.member_id)
            if member is None or member.member_epoch < 0:
                continue
            for topic_id, partitions in client.owned.items():
                for p in partitions:
                    assert owners.get((topic_id, p)) == client.member_id, (client.member_id, topic_id, p)

    @invariant()
    def the_log_replays_to_the_same_group(self) -> None:
        group = self.h.manager.group(GROUP)
        if group is None:
            return
        replayed = self.h.replayed()
        assert replayed.members == group.members
        assert replayed.partition_owners == group.partition_owners
        assert replayed.target_assignment == group.target_assignment
        assert (replayed.group_epoch, replayed.assignment_epoch, replayed.state) == (
            group.group_epoch, group.assignment_epoch, group.state)

    def teardown(self) -> None:
        for member_id in list(self.stubborn):
            self._come_round(member_id)
        group = self.h.manager.group(GROUP)
        for _ in range(8):
            for client in list(self.clients.values()):
                client.poll()
        group = self.h.manager.group(GROUP)
        if group is None or not group.members:
            return
        assert group.state is ConsumerGroupState.STABLE, group.state
        subscribed = set()
        for client in self.clients.values():
            if client.member_id in group.members:
                subscribed |= set(client.topics)
        image = self.h.image
        expected = {(image.topic(t).topic_id, p) for t in subscribed for p in range(image.topic(t).num_partitions)}  # type: ignore[union-attr]
        owned = {(t, p) for m in group.members.values() for t, ps in m.assigned_partitions.items() for p in ps}
        assert owned == expected


ConsumerGroupModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestConsumerGroupModel = ConsumerGroupModel.TestCase
