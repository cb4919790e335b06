"""A classic group's metadata (Kafka's GroupMetadata / ClassicGroup).

Pure bookkeeping: membership, static-member map, pending members, protocol support counts, leader,
generation and state. Decisions about what to do live in the coordinator.
"""
from __future__ import annotations

from collections import Counter

from protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from protocol.errors import Errors

from .api import JoinGroupMember, JoinGroupResult, SyncGroupResult
from .member import MemberMetadata
from .rebalance_trace import RebalanceTrace
from .records import OffsetCommitValue
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, GroupState, assert_valid_transition


class GroupMetadata:
    __slots__ = (
        "generation_id",
        "group_id",
        "leader_id",
        "members",
        "new_member_added",
        "num_members_awaiting_join",
        "offsets",
        "pending_evictions",
        "pending_members",
        "pending_offset_commits",
        "pending_sync_members",
        "previous_state",
        "protocol_name",
        "protocol_type",
        "rebalance_trace",
        "state",
        "state_timestamp_ms",
        "static_members",
        "subscribed_topics",
        "supported_protocols",
    )

    def __init__(self, group_id: str, state_timestamp_ms: int = -1) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state = EMPTY
        self.state_timestamp_ms = state_timestamp_ms  # wall clock; -1 = unknown
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # KIP-394: ids handed out, not yet joined; a dict for its order, so the oldest is evicted first
        self.pending_members: dict[str, None] = {}
        self.pending_evictions = 0
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        # The initial delayed join waits again while members keep arriving.
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], OffsetCommitValue] = {}
        # Commits written but not yet durable, per partition: never expired meanwhile.
        self.pending_offset_commits: dict[tuple[str, int], int] = {}
        # Topics the consumer-protocol members subscribe to; None = unknown, i.e. all of them.
        self.subscribed_topics: set[str] | None = None
        # Why the current rebalance started and who it waits for, for the log lines only (rebalance_trace.py).
        self.rebalance_trace: RebalanceTrace | None = None

    # -- state ---------------------------------------------------------------------------------------

    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def removed(self) -> bool:
        """Dead (deleted or unloaded): a commit completing now must not resurrect its offsets."""
        return self.state is DEAD

    def transition_to(self, target: GroupState, wall_ms: int) -> None:
        assert_valid_transition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = wall_ms

    # -- membership ----------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        for name in member.protocol_names():
            self.supported_protocols[name] += 1
        if member.awaiting_join is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._dec_supported_protocols(member)
            if member.awaiting_join is not None:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            # Kafka takes the first key in hash-map order; ours is insertion order.
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: object | None,
    ) -> None:
        self._dec_supported_protocols(member)
        member.supported_protocols = protocols
        for name in member.protocol_names():
            self.supported_protocols[name] += 1
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and member.awaiting_join is None:
            self.num_members_awaiting_join += 1
        elif callback is None and member.awaiting_join is not None:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback  # type: ignore[assignment]

    def _dec_supported_protocols(self, member: MemberMetadata) -> None:
        for name in member.protocol_names():
            self.supported_protocols[name] -= 1
            if self.supported_protocols[name] <= 0:
                del self.supported_protocols[name]

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        member = self.members.pop(old_member_id)
        # Fence a duplicate still parked under the old id right away.
        self.maybe_invoke_join_callback(member, JoinGroupResult(error=Errors.FENCED_INSTANCE_ID, member_id=old_member_id))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(error=Errors.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def maybe_elect_new_joined_leader(self) -> bool:
        """At join completion the leader must be a member that rejoined (a static leader may not have)."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member_id, member in self.members.items():
            if member.awaiting_join is not None:
                self.leader_id = member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------------------

    def supports_protocols(self, member_protocol_type: str, member_protocols: set[str]) -> bool:
        if self.state is EMPTY:
            return bool(member_protocol_type) and bool(member_protocols)
        n = len(self.members)
        return self.protocol_type == member_protocol_type and any(
            self.supported_protocols.get(p, 0) == n for p in member_protocols
        )

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        # Most votes wins; Kafka leaves ties to hash-map order, we take the first vote cast.
        return votes.most_common(1)[0][0]

    def init_next_generation(self, wall_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(COMPLETING_REBALANCE, wall_ms)
        else:
            self.protocol_name = None
            self.transition_to(EMPTY, wall_ms)
        self.update_subscribed_topics()
        self.pending_sync_members.clear()

    def update_subscribed_topics(self) -> None:
        protocol = self.protocol_name
        if self.protocol_type == CONSUMER_PROTOCOL_TYPE and protocol is not None and self.members:
            self.subscribed_topics = subscribed_topics(m.metadata(protocol) for m in self.members.values())
        else:
            self.subscribed_topics = None

    def current_member_metadata(self) -> list[JoinGroupMember]:
        protocol = self.protocol_name
        if protocol is None:
            raise ValueError(f"group {self.group_id} has no selected protocol")
        return [JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values()]

    # -- parked requests -----------------------------------------------------------------------------

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> bool:
        callback = member.awaiting_join
        if callback is None:
            return False
        member.awaiting_join = None
        self.num_members_awaiting_join -= 1
        callback(result)
        return True

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

