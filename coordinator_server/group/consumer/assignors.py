"""The server-side assignors of KIP-848: `uniform` (the default) and `range`, both sticky.

Pure functions of the members' subscriptions and their previous target assignment to the next target
assignment. Nothing here knows about epochs or reconciliation: moving a partition from one member to
another safely is `reconciliation.py`'s job; here a partition simply has one target owner.

- uniform: every partition of the subscribed topics goes to a subscribed member, the counts differing by
  at most one where the subscriptions allow. Members keep what they had up to their share (Kafka's
  OptimizedUniformAssignmentBuilder when all members subscribe to the same topics; a greedy fill and
  rebalance, in the spirit of its GeneralUniformAssignmentBuilder, otherwise).
- range: topic by topic, each subscribed member gets a contiguous share in member-id order, as the classic
  range assignor; members keep their partitions up to their share, and a partition given out goes to
  the members in the same order for every topic, so topics with the same partition count and the same
  subscribers stay co-partitioned.

Both are deterministic: members are taken in member-id order, topics in name order.
"""
from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .records import Assignment, TopicMetadata

UNIFORM = "uniform"
RANGE = "range"
TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed_topic_ids: frozenset[uuid.UUID]
    assigned: Assignment  # the member's target in the previous epoch: what stickiness keeps
    instance_id: str | None = None
    rack_id: str | None = None


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, TopicMetadata]], dict[str, Assignment]]


class PartitionAssignorError(Exception):
    """Kafka's PartitionAssignorException: the heartbeat answers UNKNOWN_SERVER_ERROR."""


def _to_assignment(partitions: list[TopicPartition]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in partitions:
        out.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(p) for t, p in out.items()}


def _kept(spec: MemberSpec, topics: Mapping[uuid.UUID, TopicMetadata], subscribed: frozenset[uuid.UUID],
          taken: set[TopicPartition]) -> list[TopicPartition]:
    """The member's previous partitions it may keep: still subscribed, still existing, not taken already."""
    kept = []
    for topic_id in sorted(spec.assigned, key=lambda t: topics[t].name if t in topics else ""):
        if topic_id not in subscribed or topic_id not in topics:
            continue
        count = topics[topic_id].num_partitions
        for partition in sorted(spec.assigned[topic_id]):
            tp = (topic_id, partition)
            if partition < count and tp not in taken:
                kept.append(tp)
    return kept


# -- uniform --------------------------------------------------------------------------------------------

def uniform_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicMetadata]) -> dict[str, Assignment]:
    # One filtered set per distinct subscription (a group mostly has one), not one per member.
    existing: dict[frozenset[uuid.UUID], frozenset[uuid.UUID]] = {}
    subscriptions: dict[str, frozenset[uuid.UUID]] = {}
    for member_id, spec in members.items():
        topic_ids = existing.get(spec.subscribed_topic_ids)
        if topic_ids is None:
            topic_ids = existing[spec.subscribed_topic_ids] = frozenset(
                t for t in spec.subscribed_topic_ids if t in topics)
        subscriptions[member_id] = topic_ids
    if len(existing) <= 1 or len(set(existing.values())) <= 1:
        return _uniform_homogeneous(members, topics, subscriptions)
    return _uniform_heterogeneous(members, topics, subscriptions)


def _first(entry: tuple[int, object, object, object, object]) -> int:
    return entry[0]


def _uniform_homogeneous(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicMetadata],
                         subscriptions: Mapping[str, frozenset[uuid.UUID]]) -> dict[str, Assignment]:
    """Members in id order keep what they had up to their quota (one more than the minimum while extras
    last, for a member that had more); the rest is dealt in topic-name and partition order, first to fill
    every member to the minimum, then one extra each to members at the minimum.

    The cost per member is what it holds, not the group's partitions: the partitions taken are kept per
    topic as ints (a topic id is hashed once per member, not once per partition), and a member whose
    previous target survives whole gets that same object back, so the caller sees it unchanged by
    identity and writes no record for it."""
    if not members:
        return {}
    order = sorted(members)
    subscribed = subscriptions[order[0]]
    topic_order = sorted(subscribed, key=lambda t: topics[t].name)
    counts = {t: topics[t].num_partitions for t in topic_order}
    min_quota, extras = divmod(sum(counts.values()), len(order))
    taken: dict[uuid.UUID, set[int]] = {t: set() for t in topic_order}
    # One look-up per topic a member holds (a topic id's hash is computed in Python, per call).
    per_topic = {t: (i, counts[t], taken[t]) for i, t in enumerate(topic_order)}
    result: dict[str, list[TopicPartition]] = {}
    whole: set[str] = set()  # members that kept every partition of a previous target with no empty topic
    for member_id in order:
        assigned = members[member_id].assigned
        kept: list[TopicPartition] = []
        kept_in: list[set[int]] = []  # the taken set of each kept partition's topic
        previous_count = 0
        intact = True
        held = []
        for topic_id, partitions in assigned.items():
            info = per_topic.get(topic_id)
            if info is None or not partitions:
                intact = False
                continue
            held.append((info[0], topic_id, partitions, info[1], info[2]))
        if len(held) > 1:
            held.sort(key=_first)
        for _, topic_id, partitions, count, topic_taken in held:
            previous_count += len(partitions)
            for partition in sorted(partitions) if len(partitions) > 1 else partitions:
                if partition < count and partition not in topic_taken:
                    kept.append((topic_id, partition))
                    kept_in.append(topic_taken)
        quota = min_quota
        if len(kept) > min_quota and extras > 0:
            quota += 1
            extras -= 1
        if len(kept) > quota:
            del kept[quota:]
            del kept_in[quota:]
        for (_, partition), topic_taken in zip(kept, kept_in, strict=True):
            topic_taken.add(partition)
        result[member_id] = kept
        if intact and kept and len(kept) == previous_count:
            whole.add(member_id)
    unassigned = [(t, p) for t in topic_order for p in range(counts[t]) if p not in taken[t]]
    position = 0
    # Fill every member to the minimum first, then hand the extras to members still at the minimum.
    if unassigned:
        for member_id in order:
            need = min_quota - len(result[member_id])
            if need > 0:
                result[member_id].extend(unassigned[position:position + need])
                whole.discard(member_id)
                position += need
        for member_id in order:
            if position >= len(unassigned) or extras <= 0:
                break
            if len(result[member_id]) == min_quota:
                result[member_id].append(unassigned[position])
                whole.discard(member_id)
                position += 1
                extras -= 1
    if position != len(unassigned):
        raise PartitionAssignorError(f"{len(unassigned) - position} partitions left unassigned")
    return {m: members[m].assigned if m in whole else _to_assignment(p) for m, p in result.items()}


def _uniform_heterogeneous(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicMetadata],
                           subscriptions: Mapping[str, frozenset[uuid.UUID]]) -> dict[str, Assignment]:
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id in sorted(members):
        for topic_id in subscriptions[member_id]:
            subscribers.setdefault(topic_id, []).append(member_id)
    taken: set[TopicPartition] = set()
    owned: dict[str, list[TopicPartition]] = {}
    for member_id in sorted(members):
        kept = _kept(members[member_id], topics, subscriptions[member_id], taken)
        taken.update(kept)
        owned[member_id] = kept
    # Topics with the fewest subscribers first: they have the least choice.
    topic_order = sorted(subscribers, key=lambda t: (len(subscribers[t]), topics[t].name))
    for topic_id in topic_order:
        heap = [(len(owned[m]), m) for m in subscribers[topic_id]]
        heapq.heapify(heap)
        for partition in range(topics[topic_id].num_partitions):
            if (topic_id, partition) in taken:
                continue
            while True:  # entries go stale as a member's count grows through other topics
                count, member_id = heapq.heappop(heap)
                if count == len(owned[member_id]):
                    break
                heapq.heappush(heap, (len(owned[member_id]), member_id))
            owned[member_id].append((topic_id, partition))
            heapq.heappush(heap, (count + 1, member_id))
    _balance(owned, subscribers)
    return {m: _to_assignment(p) for m, p in owned.items()}


def _balance(owned: dict[str, list[TopicPartition]], subscribers: Mapping[uuid.UUID, list[str]]) -> None:
    """Move partitions from the most to the least loaded subscribed members while that narrows the gap
    by at least two; bounded so a pathological subscription pattern cannot spin."""
    budget = sum(len(p) for p in owned.values()) + len(owned)
    moved = True
    while moved and budget > 0:
        moved = False
        for heavy in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            load = len(owned[heavy])
            for index in range(len(owned[heavy]) - 1, -1, -1):
                topic_id = owned[heavy][index][0]
                light = min(subscribers[topic_id], key=lambda m: (len(owned[m]), m))
                if len(owned[light]) + 1 < load:
                    owned[light].append(owned[heavy].pop(index))
                    moved = True
                    budget -= 1
                    break
            if moved:
                break


# -- range ----------------------------------------------------------------------------------------------

def range_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicMetadata]) -> dict[str, Assignment]:
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic_id in sorted(topics, key=lambda t: topics[t].name):
        subscribed = [m for m in sorted(members) if topic_id in members[m].subscribed_topic_ids]
        if not subscribed:
            continue
        count = topics[topic_id].num_partitions
        quota, extras = divmod(count, len(subscribed))
        # Which members get one more is decided by member order alone, the same for every topic.
        quotas = {m: quota + (1 if i < extras else 0) for i, m in enumerate(subscribed)}
        taken: set[int] = set()
        shares: dict[str, list[int]] = {}
        for member_id in subscribed:
            previous = sorted(p for p in members[member_id].assigned.get(topic_id, ()) if p < count and p not in taken)
            shares[member_id] = previous[:quotas[member_id]]
            taken.update(shares[member_id])
        free = iter(p for p in range(count) if p not in taken)
        for member_id in subscribed:
            while len(shares[member_id]) < quotas[member_id]:
                shares[member_id].append(next(free))
            result[member_id].extend((topic_id, p) for p in shares[member_id])
    return {m: _to_assignment(p) for m, p in result.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
