"""The classic group state machine as data.

What each request does in each state:
- Empty: no members. Join (new member) starts the initial delayed join; Sync/Heartbeat get UNKNOWN_MEMBER_ID.
- PreparingRebalance: joins park until every member has rejoined (or the rebalance timeout);
  Sync gets REBALANCE_IN_PROGRESS; Heartbeat keeps the member alive and answers REBALANCE_IN_PROGRESS.
- CompletingRebalance: join responses are out; members park SyncGroup until the leader's assignment is
  durable. A join with unchanged metadata gets the current result again; a changed one rebalances.
- Stable: assignments delivered; Heartbeat answers NONE; the leader's join (or changed metadata) rebalances.
- Dead: unloaded or deleted; everything gets COORDINATOR_NOT_AVAILABLE.
"""
from __future__ import annotations

from enum import Enum
from typing import Final

from mypy_extensions import mypyc_attr


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


# `Final`, and the module compiled with the core (setup.py): the compiled modules read them as C statics,
# not by a dictionary lookup of the name on every use (a heartbeat tests three).
EMPTY: Final = GroupState.EMPTY
PREPARING_REBALANCE: Final = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE: Final = GroupState.COMPLETING_REBALANCE
STABLE: Final = GroupState.STABLE
DEAD: Final = GroupState.DEAD

# Kafka's ClassicGroupState: the states each state may be entered from.
VALID_PREVIOUS_STATES: Final[dict[GroupState, frozenset[GroupState]]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}


# Compiled (setup.py), a subclass of a built-in exception other than Exception must stay a Python class.
@mypyc_attr(native_class=False)
class IllegalStateTransition(RuntimeError):
    """A bug in the coordinator, never a client mistake: it raises instead of answering."""


def assert_valid_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalStateTransition(f"group {group_id} cannot go from {current} to {target}")
