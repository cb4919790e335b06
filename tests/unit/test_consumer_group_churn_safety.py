"""Revoke-before-assign under churn: a Hypothesis state machine over the KIP-848 core on a fake clock.

Members join, leave, change their subscription, heartbeat, revoke slowly (keep reporting partitions they
were told to give up) and go silent until their session expires. After every step:
- the coordinator never has a partition in two members' owned sets (assigned or pending revocation);
- the owned sets the members themselves hold are disjoint among the members the coordinator still knows
  (an expired member may still believe it owns what was freed: it learns so from its next answer, as any
  consumer does, and that is what the session timeout is for);
- a member's epoch only grows while it stays in the group.
"""
from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.errors import Errors

from .consumer_group_harness import ConsumerHarness

MEMBERS = [f"member-{i}" for i in range(5)]
SUBSCRIPTIONS = [("orders",), ("orders", "payments"), ("payments",)]
SESSION_MS = 45_000


class _Client:
    """A member as its client sees itself: what it owns, its epoch, whether it revokes slowly."""

    def __init__(self, topics: tuple[str, ...]) -> None:
        self.topics = topics
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.joined = False
        self.subscription_changed = False
        self.slow = False
        self.to_release: dict[uuid.UUID, frozenset[int]] = {}  # told to give up, not yet given up (slow)


class ChurnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = ConsumerHarness(topics={"orders": 6, "payments": 4})
        self.clients: dict[str, _Client] = {}
        self.server_epochs: dict[str, int] = {}

    def _answer(self, member_id: str, client: _Client, result: object) -> None:
        assert result is not None
        if result.error is Errors.NONE:  # type: ignore[attr-defined]
            assert result.member_epoch >= client.epoch or not client.joined, (member_id, result)  # type: ignore[attr-defined]
            client.epoch = result.member_epoch  # type: ignore[attr-defined]
            client.joined = True
            client.subscription_changed = False
            assignment = result.assignment  # type: ignore[attr-defined]
            if assignment is not None:
                new = {t: frozenset(p) for t, p in assignment.items() if p}
                if client.slow:
                    # Take the new partitions, keep the revoked ones until a later heartbeat.
                    released = {t: frozenset(ps - new.get(t, frozenset())) for t, ps in client.owned.items()}
                    client.to_release = {t: ps for t, ps in released.items() if ps}
                    merged = dict(new)
                    for t, ps in client.to_release.items():
                        merged[t] = merged.get(t, frozenset()) | ps
                    client.owned = merged
                else:
                    client.owned = new
                    client.to_release = {}
        elif result.error in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):  # type: ignore[attr-defined]
            client.epoch, client.owned, client.joined, client.to_release = 0, {}, False, {}
        else:
            raise AssertionError(f"unexpected answer to {member_id}: {result}")

    @rule(member_id=st.sampled_from(MEMBERS), topics=st.sampled_from(SUBSCRIPTIONS), slow=st.booleans())
    def join(self, member_id: str, topics: tuple[str, ...], slow: bool) -> None:
        client = self.clients.get(member_id)
        if client is not None and client.joined:
            return
        client = self.clients[member_id] = _Client(topics)
        client.slow = slow
        self._answer(member_id, client, self.h.join(member_id, topics))

    @rule(member_id=st.sampled_from(MEMBERS))
    def heartbeat(self, member_id: str) -> None:
        client = self.clients.get(member_id)
        if client is None or not client.joined:
            return
        kwargs: dict[str, object] = {}
        if client.subscription_changed:
            kwargs["subscribed_topic_names"] = client.topics
        owned = tuple((t, tuple(sorted(p))) for t, p in client.owned.items())
        self._answer(member_id, client, self.h.heartbeat(member_id, client.epoch, owned_partitions=owned, **kwargs))

    @rule(member_id=st.sampled_from(MEMBERS))
    def finish_revoking(self, member_id: str) -> None:
        """A slow member is done with the partitions it was told to give up (reported at its next heartbeat)."""
        client = self.clients.get(member_id)
        if client is None or not client.to_release:
            return
        client.owned = {t: frozenset(ps - client.to_release.get(t, frozenset())) for t, ps in client.owned.items()}
        client.owned = {t: ps for t, ps in client.owned.items() if ps}
        client.to_release = {}

    @rule(member_id=st.sampled_from(MEMBERS), topics=st.sampled_from(SUBSCRIPTIONS))
    def change_subscription(self, member_id: str, topics: tuple[str, ...]) -> None:
        client = self.clients.get(member_id)
        if client is None or not client.joined or client.topics == topics:
            return
        client.topics = topics
        client.subscription_changed = True
        self.heartbeat(member_id)

    @rule(member_id=st.sampled_from(MEMBERS))
    def leave(self, member_id: str) -> None:
        client = self.clients.get(member_id)
        if client is None or not client.joined:
            return
        result = self.h.heartbeat(member_id, -1)
        # An expired member's leave is answered UNKNOWN_MEMBER_ID: it is gone either way.
        assert result is not None and result.error in (Errors.NONE, Errors.UNKNOWN_MEMBER_ID), result
        if result.error is Errors.UNKNOWN_MEMBER_ID:
            assert member_id not in (self.h.manager.group("cg") or self.h.group).members
        client.epoch, client.owned, client.joined, client.to_release = 0, {}, False, {}

    @rule(ms=st.sampled_from([100, 5_000, SESSION_MS + 1]))
    def sleep(self, ms: int) -> None:
        """Time passes; a member that did not heartbeat for a session timeout is expired."""
        self.h.sleep(ms)

    @invariant()
    def coordinator_owns_each_partition_once(self) -> None:
        group = self.h.manager.group("cg")
        if group is None:
            return
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        other = seen.setdefault((topic_id, p), member.member_id)
                        assert other == member.member_id, f"{(topic_id, p)} owned by {other} and {member.member_id}"

    @invariant()
    def live_members_own_each_partition_once(self) -> None:
        group = self.h.manager.group("cg")
        live = set(group.members) if group is not None else set()
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for member_id, client in self.clients.items():
            if member_id not in live or not client.joined:
                continue
            for topic_id, partitions in client.owned.items():
                for p in partitions:
                    other = seen.setdefault((topic_id, p), member_id)
                    assert other == member_id, f"{(topic_id, p)} held by {other} and {member_id} at once"

    @invariant()
    def epochs_only_grow(self) -> None:
        group = self.h.manager.group("cg")
        members = group.members if group is not None else {}
        for member_id in list(self.server_epochs):
            if member_id not in members:
                del self.server_epochs[member_id]
        for member_id, member in members.items():
            previous = self.server_epochs.get(member_id)
            assert previous is None or member.member_epoch >= previous, (member_id, previous, member.member_epoch)
            self.server_epochs[member_id] = member.member_epoch


ChurnMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
TestChurnSafety = ChurnMachine.TestCase
