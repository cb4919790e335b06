"""The server-side assignors `uniform` and `range`: every subscribed partition to exactly one subscribed
member, balance, stickiness across epochs, and range's co-partitioning (properties with Hypothesis)."""
from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.group.consumer.assignors import MemberSpec, range_assign, uniform_assign
from coordinator_server.group.consumer.records import Assignment, TopicMetadata

TOPICS = {name: TopicMetadata(uuid.uuid5(uuid.NAMESPACE_OID, name), name, n)
          for name, n in (("a", 7), ("b", 3), ("c", 12), ("d", 1))}
BY_ID = {t.topic_id: t for t in TOPICS.values()}


def ids(*names: str) -> frozenset[uuid.UUID]:
    return frozenset(TOPICS[n].topic_id for n in names)


def flat(assignment: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def check_complete(members: dict[str, MemberSpec], result: dict[str, Assignment]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for tp in flat(assignment):
            assert tp not in seen, f"{tp} given to {seen[tp]} and {member_id}"
            assert tp[0] in members[member_id].subscribed_topic_ids
            seen[tp] = member_id
    subscribed = set().union(*(m.subscribed_topic_ids for m in members.values())) if members else set()
    assert set(seen) == {(t, p) for t in subscribed for p in range(BY_ID[t].num_partitions)}


def test_uniform_single_member_gets_everything() -> None:
    members = {"m": MemberSpec(ids("a", "b"), {})}
    assert len(flat(uniform_assign(members, BY_ID)["m"])) == 10


def test_uniform_homogeneous_is_balanced_and_sticky() -> None:
    members = {f"m{i}": MemberSpec(ids("a", "c"), {}) for i in range(4)}
    first = uniform_assign(members, BY_ID)
    check_complete(members, first)
    assert sorted(len(flat(a)) for a in first.values()) == [4, 5, 5, 5]
    members = {m: MemberSpec(ids("a", "c"), first[m]) for m in members}
    members["m4"] = MemberSpec(ids("a", "c"), {})
    second = uniform_assign(members, BY_ID)
    check_complete(members, second)
    assert sorted(len(flat(a)) for a in second.values()) == [3, 4, 4, 4, 4]
    moved = sum(len(flat(first[m]) - flat(second[m])) for m in first)
    assert moved == len(flat(second["m4"])) == 3  # only what the newcomer needs


def test_uniform_heterogeneous_respects_subscriptions_and_balances() -> None:
    members = {"x": MemberSpec(ids("a"), {}), "y": MemberSpec(ids("a", "c"), {}), "z": MemberSpec(ids("c"), {})}
    result = uniform_assign(members, BY_ID)
    check_complete(members, result)
    counts = sorted(len(flat(a)) for a in result.values())
    assert counts[-1] - counts[0] <= 1


def test_range_co_partitions_topics_with_the_same_partition_count() -> None:
    topics = {t.topic_id: t for t in (TopicMetadata(uuid.uuid4(), "left", 5), TopicMetadata(uuid.uuid4(), "right", 5))}
    both = frozenset(topics)
    members = {f"m{i}": MemberSpec(both, {}) for i in range(3)}
    result = range_assign(members, topics)
    for assignment in result.values():
        left, right = (sorted(assignment.get(t, ())) for t in sorted(topics, key=lambda t: topics[t].name))
        assert left == right
    assert [sorted(result[m][next(iter(topics))]) for m in sorted(result)] == [[0, 1], [2, 3], [4]]


def test_range_is_sticky() -> None:
    members = {f"m{i}": MemberSpec(ids("c"), {}) for i in range(3)}
    first = range_assign(members, BY_ID)
    members = {m: MemberSpec(ids("c"), first[m]) for m in ("m0", "m2")}
    second = range_assign(members, BY_ID)
    for m in members:
        assert flat(first[m]) <= flat(second[m])


@st.composite
def groups(draw: st.DrawFn) -> dict[str, MemberSpec]:
    count = draw(st.integers(1, 8))
    names = sorted(TOPICS)
    members = {}
    for i in range(count):
        subscribed = draw(st.sets(st.sampled_from(names), min_size=1))
        members[f"m{i}"] = MemberSpec(ids(*subscribed), {})
    return members


@settings(max_examples=150, deadline=None)
@given(groups(), st.integers(0, 2**32))
def test_assignors_are_complete_and_keep_what_they_can(members: dict[str, MemberSpec], seed: int) -> None:
    for assign in (uniform_assign, range_assign):
        first = assign(members, BY_ID)
        check_complete(members, first)
        # Same members again: nothing moves.
        again = {m: MemberSpec(s.subscribed_topic_ids, first[m]) for m, s in members.items()}
        assert assign(again, BY_ID) == first
        # One member leaves: the others keep everything they had.
        leaving = sorted(members)[seed % len(members)]
        rest = {m: s for m, s in again.items() if m != leaving}
        if rest:
            after = assign(rest, BY_ID)
            check_complete(rest, after)
            if assign is uniform_assign and len({s.subscribed_topic_ids for s in members.values()}) == 1:
                for m in rest:
                    assert flat(first[m]) <= flat(after[m])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.sampled_from(sorted(TOPICS)))
def test_uniform_homogeneous_counts_differ_by_at_most_one(count: int, extra_topic: str) -> None:
    members = {f"m{i}": MemberSpec(ids("c", extra_topic), {}) for i in range(count)}
    result = uniform_assign(members, BY_ID)
    counts = [len(flat(a)) for a in result.values()]
    assert max(counts) - min(counts) <= 1


def _full_homogeneous(members: dict[str, MemberSpec]) -> dict[str, Assignment]:
    """The homogeneous uniform assignment recomputed from nothing but its rule, written plainly: members in id
    order keep their previous partitions (topic-name, partition order) up to the minimum, or one more while
    extras last for a member that had more; the rest in topic-name, partition order fills members to the
    minimum, then one extra each to members at the minimum."""
    order = sorted(members)
    subscribed = members[order[0]].subscribed_topic_ids
    every = [(t, p) for t in sorted(subscribed, key=lambda t: BY_ID[t].name) for p in range(BY_ID[t].num_partitions)]
    min_quota, extras = divmod(len(every), len(order))
    taken: set[tuple[uuid.UUID, int]] = set()
    out: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for m in order:
        previous = members[m].assigned
        kept = [(t, p) for t in sorted(previous, key=lambda t: BY_ID[t].name) if t in subscribed
                for p in sorted(previous[t]) if p < BY_ID[t].num_partitions and (t, p) not in taken]
        quota = min_quota + (1 if len(kept) > min_quota and extras > 0 else 0)
        extras -= quota - min_quota
        out[m] = kept[:quota]
        taken.update(out[m])
    free = iter(tp for tp in every if tp not in taken)
    for m in order:
        while len(out[m]) < min_quota:
            out[m].append(next(free))
    for m in order:
        if extras > 0 and len(out[m]) == min_quota:
            nxt = next(free, None)
            if nxt is None:
                break
            out[m].append(nxt)
            extras -= 1
    return {m: {t: frozenset(p for tt, p in tps if tt == t) for t, _ in tps} for m, tps in out.items()}


@st.composite
def settled_then_changed(draw: st.DrawFn) -> dict[str, MemberSpec]:
    """A homogeneous group whose previous targets came from an earlier assignment (a settled group), then
    joins, leaves and stale partitions (a partition number beyond the topic's count, one held twice)."""
    names = draw(st.lists(st.sampled_from(sorted(TOPICS)), min_size=1, max_size=4, unique=True))
    topic_ids = ids(*names)
    before = draw(st.lists(st.integers(0, 40), min_size=1, max_size=25, unique=True))
    settled = uniform_assign({f"m{i:02d}": MemberSpec(topic_ids, {}) for i in before}, BY_ID)
    after = draw(st.lists(st.integers(0, 40), min_size=1, max_size=25, unique=True))
    members = {}
    for i in after:
        assigned = dict(settled.get(f"m{i:02d}", {}))
        if assigned and draw(st.booleans()):
            t = draw(st.sampled_from(sorted(assigned)))
            assigned[t] = assigned[t] | {draw(st.integers(0, 15))}  # stale or another member's
        members[f"m{i:02d}"] = MemberSpec(topic_ids, assigned)
    return members


@given(settled_then_changed())
@settings(max_examples=300, deadline=None)
def test_uniform_homogeneous_is_the_full_recomputation(members: dict[str, MemberSpec]) -> None:
    """The per-member fast path (ints per topic, previous targets handed back whole) gives exactly what the
    rule recomputed in full gives: the same balance (counts differ by at most one) and the same stickiness."""
    result = uniform_assign(members, BY_ID)
    check_complete(members, result)
    expected = _full_homogeneous(members)
    assert {m: flat(a) for m, a in result.items()} == {m: flat(a) for m, a in expected.items()}
    counts = [len(flat(a)) for a in result.values()]
    assert max(counts) - min(counts) <= 1
    for m, spec in members.items():
        if result[m] is spec.assigned:  # handed back whole: only when nothing changed
            assert flat(result[m]) == flat(spec.assigned) and all(spec.assigned.values())
