"""Why a classic group is rebalancing and who it is waiting for: the facts the rebalance log lines carry
(`preparing_rebalance`, `join_completed`, `group_empty`, `group_stable`) that the group's own state
does not keep.

Soft state for observability only: never written to a record and never read by a decision, so a
restart loses nothing but the explanation of a rebalance that was in progress. Times are the core's
monotonic `now_ms` (durations); the lines also carry `state_time_ms`, the wall clock the records use.
`coordinator-server pipeline explain` turns these lines into one explanation per generation
(docs/pipeline.md#the-rebalance-explainer), so the field names here are an interface: add, don't rename.
"""
from __future__ import annotations

from typing import Literal, Protocol

# What moved the group into PreparingRebalance. Finer than the metric label `RebalanceReason` (rebalance.py):
# a JoinGroup starts a rebalance as a new member, as a member whose metadata changed, or as the leader.
RebalanceTrigger = Literal[
    "member_joined",  # a new member (or a static member's first join)
    "member_left",  # LeaveGroup, or an admin removal of a static member
    "session_expired",  # no heartbeat within the member's session timeout
    "new_member_timeout",  # a new member did not rejoin within the new-member join timeout
    "sync_timeout",  # members joined but sent no SyncGroup within the rebalance timeout
    "static_member_replaced",  # a static member rejoined under a new member id and could not be swapped in place
    "metadata_changed",  # a member rejoined with other protocol metadata (a subscription change)
    "leader_rejoined",  # the leader rejoined with the same metadata (changes the metadata does not show)
    "group_max_size",  # a member was removed because the group is over group.max.size
    "group_loaded",  # the group was over group.max.size when it was loaded
    "storage_error",  # the leader's assignment could not be written
    "protocol_migration",  # a consumer (KIP-848) group went back to the classic protocol
]

# How a join phase ended.
JoinEnd = Literal["all_joined", "rebalance_timeout", "initial_rebalance_delay"]


class _Member(Protocol):
    @property
    def member_id(self) -> str: ...

    @property
    def client_id(self) -> str: ...

    @property
    def group_instance_id(self) -> str | None: ...


def member_fields(member: _Member | None) -> dict[str, str | None]:
    """The member a log line is about, as every rebalance line names it."""
    if member is None:
        return {}
    return {"member_id": member.member_id, "client_id": member.client_id,
            "group_instance_id": member.group_instance_id}


class RebalanceTrace:
    __slots__ = ("from_empty", "join_completed_ms", "join_started_ms", "last_arrival_ms", "last_client_id",
                 "last_member_id", "phases", "rebalance_started_ms", "trigger")

    def __init__(self, trigger: RebalanceTrigger, now_ms: int, from_empty: bool,
                 previous: RebalanceTrace | None = None) -> None:
        self.trigger: RebalanceTrigger = trigger
        # A rebalance that restarts before its generation became Stable (a member changed during
        # CompletingRebalance) keeps its start: the group has not consumed since then.
        self.rebalance_started_ms: int = previous.rebalance_started_ms if previous is not None else now_ms
        self.phases: int = previous.phases + 1 if previous is not None else 1
        self.join_started_ms = now_ms
        self.from_empty = from_empty
        self.last_member_id: str | None = None
        self.last_client_id: str | None = None
        self.last_arrival_ms: int | None = None
        self.join_completed_ms: int | None = None

    def on_arrival(self, member: _Member, now_ms: int) -> None:
        """A member's JoinGroup was parked in this join phase; the latest one is who the phase waited for."""
        self.last_member_id = member.member_id
        self.last_client_id = member.client_id
        self.last_arrival_ms = now_ms

    def on_join_completed(self, now_ms: int, not_rejoined: list[str], pending_members: int) -> dict[str, object]:
        """The fields of `join_completed` / `group_empty`; remembers the time for `group_stable`."""
        self.join_completed_ms = now_ms
        ended_by: JoinEnd
        if self.from_empty and self.phases == 1:
            ended_by = "initial_rebalance_delay"  # the first join of an empty group always waits the delay
        elif not_rejoined or pending_members:
            ended_by = "rebalance_timeout"  # a phase completes early only once everyone is in
        else:
            ended_by = "all_joined"
        return {
            "trigger": self.trigger,
            "join_ms": now_ms - self.join_started_ms,
            "rebalance_ms": now_ms - self.rebalance_started_ms,
            "ended_by": ended_by,
            "last_joined_member_id": self.last_member_id,
            "last_joined_client_id": self.last_client_id,
            "last_joined_after_ms": None if self.last_arrival_ms is None else self.last_arrival_ms - self.join_started_ms,
            "not_rejoined": not_rejoined,
            "pending_members": pending_members,
        }

    def on_stable(self, now_ms: int) -> dict[str, object]:
        """The fields of `group_stable`: `rebalance_ms` is how long the group was not consuming."""
        return {
            "trigger": self.trigger,
            "rebalance_ms": now_ms - self.rebalance_started_ms,
            "sync_ms": None if self.join_completed_ms is None else now_ms - self.join_completed_ms,
        }
