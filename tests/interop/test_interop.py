"""The interop matrix: client library x scenario, every cell against a real server subprocess.

Scenarios (one consumer group, topic `t` with 10 partitions):
  join[assignor]   1 → 3 → 5 members; after each step every partition is owned by exactly one member, and
                   no partition is ever held by two members at once; the server selects that assignor.
                   cooperative-sticky: a member only ever revokes partitions that then move away.
  leave            one of 3 members closes (LeaveGroup); the other two take over everything, well before
                   the (long) session timeout.
  crash            kill -9 of one of 3 members; its session times out; the other two take over.
  slow-member      a member stops polling in the middle of a rebalance (sleeps in its revoke callback; kcat
                   and kafkajs have no such callback, so the process is SIGSTOPped): it is dropped after the
                   rebalance timeout and the others own every partition while it still sleeps.
  server-restart   2 members consume and commit 200 records; the server is kill -9ed and restarted on the
                   same port and data dir; 100 more are produced; the group re-forms and no record below
                   the committed offsets is delivered again.
  static-membership three static members (group.instance.id); one is kill -9ed (KIP-848: closed, which
                   leaves with epoch -2) and restarted within its session timeout: it gets its partitions
                   back, nobody else revokes anything, and the server completes no new rebalance.
  mixed[assignor]  members of different libraries in one group, sharing one assignor.

A client named `<client>+consumer` speaks KIP-848's protocol (group.protocol=consumer): the coordinator
assigns with its `range` (join-range) or `uniform` (join-cooperative-sticky: incremental, like
cooperative-sticky) assignor, and the server's own evidence is its consumer group log lines.
"""
from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import ALL, CLIENTS, CONSUMER_PROTOCOL_SUFFIX, PARTITIONS, Harness, Member

pytestmark = pytest.mark.interop

NO_RANGE = {
    "kafkajs": "kafkajs ships only its RoundRobinAssigner; it has no range assignor",
    "platformatic-kafka": "@platformatic/kafka ships only its roundRobinAssigner (protocol `roundrobin`); it has no "
                          "range assignor",
}
NO_COOP = {
    "aiokafka": "aiokafka implements only the eager rebalance protocol (no cooperative-sticky assignor, KIP-429)",
    "kafkajs": "kafkajs implements only the eager rebalance protocol (no cooperative rebalancing, KIP-429)",
    "sarama": "Sarama 1.22 implements only the eager protocol with its range and roundrobin strategies "
              "(balance_strategy.go: no sticky or cooperative-sticky, KIP-429)",
    "kafka-go": "kafka-go 0.2.1 implements only the eager protocol with its range and roundrobin group balancers "
                "(groupbalancer.go; no cooperative rebalancing, KIP-429)",
    "platformatic-kafka": "@platformatic/kafka's classic consumer is eager only (no cooperative rebalancing, KIP-429)",
    "kafka-go-0.4": "kafka-go 0.4.51 implements only the eager protocol with its range, roundrobin and rack-affinity "
                    "group balancers (groupbalancer.go; a ConsumerGroup generation ends all its partitions, "
                    "consumergroup.go; no cooperative rebalancing, KIP-429)",
}
NO_LEAVE = {
    "kafka-go": "kafka-go 0.2.1 never sends LeaveGroup: Reader.Close cancels the reader's context (r.stop()) "
                "before it dials the coordinator with that context to leave (reader.go), so the dial fails; its "
                "members go by session timeout, as in the crash cell",
}
NO_STATIC = {
    "kafkajs": "kafkajs has no group.instance.id (static membership, KIP-345)",
    "sarama": "Sarama 1.22 has no group.instance.id (static membership, KIP-345, came in a later release)",
    "kafka-go": "kafka-go 0.2.1 has no group.instance.id (static membership, KIP-345)",
    "franz-go+consumer": "franz-go 1.22.3's KIP-848 leave of a static member (epoch -2, leave848 in "
                         "consumer_group_848.go) carries no InstanceId, which the coordinator rejects as Kafka does "
                         "(INVALID_REQUEST: InstanceId can't be null.), so the instance id stays held until its "
                         "session expires and the restarted member gets UNRELEASED_INSTANCE_ID",
    "kafka-go-0.4": "kafka-go 0.4.51's consumer group has no group.instance.id (ConsumerGroupConfig; it joins with "
                    "JoinGroup v1 or v2, before static membership, KIP-345)",
}
NO_CLIENT_ASSIGNOR = {
    "confluent-kafka+consumer": "with KIP-848 the coordinator assigns; its assignors are uniform and range (no "
                                "round-robin)",
    "franz-go+consumer": "franz-go speaks KIP-848 only when its first balancer is range or (cooperative-)sticky "
                         "(consumer_group_848.go, should848: any other falls back to the classic protocol); the "
                         "coordinator's assignors are uniform and range (no round-robin)",
    "java+consumer": "with group.protocol=consumer the Java client takes no partition.assignment.strategy "
                     "(ConsumerConfig refuses it, as it refuses session.timeout.ms and heartbeat.interval.ms): the "
                     "coordinator assigns, naming its assignor by group.remote.assignor, and its assignors are "
                     "uniform and range (no round-robin)",
}
# Clients with no rebalance callback to sleep in: the slow member is SIGSTOPped instead.
NO_REVOKE_CALLBACK = {"kcat", "kafkajs", "kafka-go", "platformatic-kafka"}
ROUNDROBIN_ONLY = {"kafkajs", "platformatic-kafka"}
# Clients that refuse a rebalance timeout below the session timeout.
REBALANCE_AT_LEAST_SESSION = {"confluent-kafka", "kcat", "platformatic-kafka"}

# Server bugs found by this suite: {(client, scenario): reason}. Such cells are xfail(strict=True).
SERVER_BUGS: dict[tuple[str, str], str] = {}

SCENARIOS = ["join-range", "join-roundrobin", "join-cooperative-sticky", "leave", "crash", "slow-member",
             "server-restart", "static-membership"]


def default_assignor(client: str) -> str:
    return "roundrobin" if client in ROUNDROBIN_ONLY else "range"


def protocol_name(client: str, assignor: str) -> str:
    return "RoundRobinAssigner" if client == "kafkajs" and assignor == "roundrobin" else assignor


def unsupported_reason(client: str, scenario: str) -> str | None:
    if scenario == "join-range":
        return NO_RANGE.get(client)
    if scenario == "join-roundrobin":
        return NO_CLIENT_ASSIGNOR.get(client)
    if scenario == "join-cooperative-sticky":
        return NO_COOP.get(client)
    if scenario == "static-membership":
        return NO_STATIC.get(client)
    if scenario == "leave":
        return NO_LEAVE.get(client)
    return None


def cells() -> list[object]:
    out = []
    for client in CLIENTS:
        for scenario in SCENARIOS:
            marks: list[pytest.MarkDecorator] = []
            reason = unsupported_reason(client, scenario)
            if reason:
                marks.append(pytest.mark.unsupported(reason))
            if (client, scenario) in SERVER_BUGS:
                marks.append(pytest.mark.xfail(strict=True, reason="server bug: " + SERVER_BUGS[client, scenario]))
            out.append(pytest.param(client, scenario, marks=marks, id=f"{client}:{scenario}"))
    return out


# ------------------------------------------------------------------------------------------ checks


def owned_at(members: list[Member], t: float) -> dict[str, set[int]]:
    state: dict[str, set[int]] = {}
    for m in members:
        owned: set[int] = set()
        for e in m.evs("assigned", "revoked", "lost"):
            if e["t"] > t:
                break
            owned = set(e["owned"])
        state[m.name] = owned
    return state


def shared(state: dict[str, set[int]]) -> set[int]:
    seen: set[int] = set()
    dup: set[int] = set()
    for s in state.values():
        dup |= seen & s
        seen |= s
    return dup


def assert_never_shared(h: Harness, members: list[Member], grace_s: float = 0.5) -> None:
    """No partition owned by two members at once (beyond `grace_s`: the reports cross process boundaries)."""
    times = sorted(e["t"] for m in members for e in m.evs("assigned", "revoked", "lost"))
    for t in times:
        dup = shared(owned_at(members, t))
        if dup and dup & shared(owned_at(members, t + grace_s)):
            raise AssertionError(f"partitions {sorted(dup)} owned by two members at t={t:.3f}: "
                                 f"{owned_at(members, t)}\n{h.report()}")


def join_completions(h: Harness) -> list[dict[str, object]]:
    return [e for e in h.srv.events("join_completed") if e.get("group_id") == "interop"]


def consumer_protocol(client: str) -> bool:
    return client.endswith(CONSUMER_PROTOCOL_SUFFIX)


def rebalances(h: Harness, client: str) -> list[dict[str, object]]:
    """Completed classic rebalances, or KIP-848 target assignments: what a rebalance leaves in the log."""
    if consumer_protocol(client):
        return [e for e in h.srv.events("consumer_group_target_assigned") if e.get("group_id") == "interop"]
    return join_completions(h)


def removal_reasons(h: Harness, client: str) -> list[str]:
    event = "consumer_member_removed" if consumer_protocol(client) else "member_removed"
    return [str(e["reason"]) for e in h.srv.events(event)]


# ------------------------------------------------------------------------------------------- cells


@pytest.mark.parametrize(("client", "scenario"), cells())
def test_interop(harness: Harness, client: str, scenario: str) -> None:
    harness._record("client", client)
    harness._record("scenario", scenario)
    SCENARIO_FUNCS[scenario](harness, client)


def scenario_join(h: Harness, client: str, assignor: str) -> None:
    def new(name: str) -> Member:
        return h.start(client, name, group="interop", assignor=assignor, session_timeout_ms=6000)

    members = [new("m1")]
    h.wait_partitioned(members, what="1 member")
    members += [new("m2"), new("m3")]
    h.wait_partitioned(members, what="3 members")
    members += [new("m4"), new("m5")]
    final = h.wait_partitioned(members, what="5 members")
    assert sorted(len(s) for s in final.values()) == [2] * 5
    assert_never_shared(h, members)
    if consumer_protocol(client):  # the coordinator's assignor, by the name KIP-848 gives it
        assignors = {e.get("assignor") for e in rebalances(h, client)}
        assert assignors == {"range" if assignor == "range" else "uniform"}, assignors
    else:
        protocols = {e.get("protocol") for e in join_completions(h)}
        assert protocols == {protocol_name(client, assignor)}, protocols
    if assignor == "cooperative-sticky":
        # KIP-429: a member revokes only what moves to someone else, never a partition it keeps.
        for m in members:
            kept_but_revoked = m.revoked_since(0) & m.owned
            assert not kept_but_revoked, f"{m.name} revoked {sorted(kept_but_revoked)} and kept them\n{h.report()}"
        first = members[0]
        assert first.evs("assigned")[-1]["owned"], "m1 kept some partitions"
        assert len(first.revoked_since(0)) == PARTITIONS - 2, first.describe()


def scenario_leave(h: Harness, client: str) -> None:
    # A long session timeout: the takeover can only come from the LeaveGroup.
    members = [h.start(client, f"m{i}", group="interop", assignor=default_assignor(client),
                       session_timeout_ms=30_000) for i in (1, 2, 3)]
    h.wait_partitioned(members, timeout_s=40)
    leaving = members[2]
    start = time.monotonic()
    assert leaving.terminate() == 0, leaving.describe()
    h.wait_partitioned(members[:2], timeout_s=20, what="the two remaining members")
    assert time.monotonic() - start < 20
    reasons = removal_reasons(h, client)
    left = "the member left the group" if consumer_protocol(client) else "LeaveGroup"
    assert any(r.startswith(left) for r in reasons), reasons


def scenario_crash(h: Harness, client: str) -> None:
    members = [h.start(client, f"m{i}", group="interop", assignor=default_assignor(client),
                       session_timeout_ms=3000) for i in (1, 2, 3)]
    h.wait_partitioned(members, timeout_s=40)
    members[1].kill9()
    h.wait_partitioned([members[0], members[2]], timeout_s=30, what="the two survivors")
    reasons = removal_reasons(h, client)
    assert ("the member session expired" if consumer_protocol(client) else "session timeout") in reasons, reasons


def scenario_slow(h: Harness, client: str) -> None:
    assignor = default_assignor(client)
    by_signal = client in NO_REVOKE_CALLBACK
    common = {"group": "interop", "assignor": assignor, "rebalance_timeout_ms": 3000}
    # The slow member keeps its session alive (heartbeat thread) where the client can; librdkafka and
    # @platformatic/kafka need the rebalance timeout (max.poll.interval.ms) >= the session timeout, so there
    # the two are equal.
    session = 3000 if client in REBALANCE_AT_LEAST_SESSION else 10_000
    # "other" first, so that the slow member has nothing to revoke (and no reason to stall) when it joins.
    other = h.start(client, "other", session_timeout_ms=session, **common)
    h.wait_partitioned([other], timeout_s=30)
    slow = h.start(client, "slow", session_timeout_ms=session,
                   stall_revoke_ms=None if by_signal else 30_000, **common)
    h.wait_partitioned([slow, other], timeout_s=40)
    if by_signal:
        slow.pause()
    started = time.monotonic()
    joiner = h.start(client, "joiner", session_timeout_ms=session, **common)
    h.wait_partitioned([other, joiner], timeout_s=25, what="the two members without the slow one")
    took = time.monotonic() - started
    if not by_signal:
        assert slow.evs("stall") and not slow.evs("stall_end"), "the slow member was not stalled\n" + h.report()
    assert took < 25
    assert removal_reasons(h, client), h.report()


def scenario_restart(h: Harness, client: str) -> None:
    assignor = default_assignor(client)
    members = [h.start(client, f"m{i}", group="interop", assignor=assignor, session_timeout_ms=10_000)
               for i in (1, 2)]
    h.wait_partitioned(members, timeout_s=40)
    h.produce(client, 200)

    def consumed() -> set[tuple[int, int]]:
        return {r for m in h.members for r in m.records()}

    h.wait(lambda: len(consumed()) >= 200, 40, "200 records consumed")
    ends: dict[int, int] = {}
    for p, o in consumed():
        ends[p] = max(ends.get(p, 0), o + 1)
    assert sum(ends.values()) == 200, ends
    # A client may also commit offset 0 for a partition that got no records (kafka-python commits every
    # assigned position): that is a true statement, not a difference.
    h.wait(lambda: _nonzero(committed(h), ends) == ends, 30, f"committed offsets {ends}")
    at_kill = committed(h)

    h.srv.kill9()
    time.sleep(1.0)  # the members notice, and retry against nothing
    restarted_at = time.time()
    h.srv.restart(port=h.srv.port)
    if client == "kcat":
        # kcat exits by design when every broker connection is down ("All broker connections are down:
        # terminating"): start its members again, from the committed offsets.
        h.wait(lambda: not any(m.alive for m in members), 20, "kcat to exit with every broker down")
        members = [h.start(client, f"m{i}-again", group="interop", assignor=assignor, session_timeout_ms=10_000)
                   for i in (1, 2)]
    else:
        assert all(m.alive for m in members), h.report()
    h.produce(client, 100)
    h.wait(lambda: len(consumed()) >= 300, 60, "300 records consumed after the restart")
    assert all(m.alive for m in members), h.report()
    h.wait_partitioned(members, timeout_s=30, what="the re-formed group")
    again = [(p, o) for m in members for p, o in m.records(since=restarted_at) if o < at_kill.get(p, 0)]
    assert not again, f"re-delivered below the committed offsets {at_kill}: {sorted(again)[:20]}\n{h.report()}"


def _nonzero(offsets: dict[int, int], expected: dict[int, int]) -> dict[int, int]:
    return {p: o for p, o in offsets.items() if o != 0 or p in expected}


def committed(h: Harness) -> dict[int, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=h.srv.address, request_timeout_ms=5000)
    try:
        offsets = admin.list_group_offsets({"interop": None})["interop"]
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == "t" and meta.offset >= 0}


def scenario_static(h: Harness, client: str) -> None:
    assignor = default_assignor(client)

    def new(i: int) -> Member:
        return h.start(client, f"s{i}" + ("-restarted" if i == 22 else ""), group="interop", assignor=assignor,
                       instance_id=f"inst-{i % 10 if i == 22 else i}", session_timeout_ms=15_000)

    s1 = new(1)
    h.wait_partitioned([s1], timeout_s=30)
    s2, s3 = new(2), new(3)
    before = h.wait_partitioned([s1, s2, s3], timeout_s=40)
    completions = len(rebalances(h, client))
    killed_at = time.time()
    if consumer_protocol(client):
        # KIP-848: an instance id is released only by a leave with epoch -2 (a clean close); a new process
        # with it while the old member still holds it gets UNRELEASED_INSTANCE_ID, fatal for librdkafka, as
        # in Kafka. So the member closes, then comes back within its session timeout.
        assert s2.terminate() == 0, s2.describe()
    else:
        s2.kill9()
    s2b = new(22)
    h.wait(lambda: s2b.owned == before["s2"], 20, f"the restarted static member to own {sorted(before['s2'])}")
    time.sleep(2.0)  # a rebalance, if one were coming, would show by now (heartbeats every 300 ms)
    assert {s1.name: s1.owned, s3.name: s3.owned} == {"s1": before["s1"], "s3": before["s3"]}, h.report()
    assert not (s1.revoked_since(killed_at) | s3.revoked_since(killed_at)), f"revocations\n{h.report()}"
    assert len(rebalances(h, client)) == completions, f"a rebalance happened\n{h.report()}"
    assert h.srv.events("static_member_replaced"), h.report()


SCENARIO_FUNCS = {
    "join-range": lambda h, c: scenario_join(h, c, "range"),
    "join-roundrobin": lambda h, c: scenario_join(h, c, "roundrobin"),
    "join-cooperative-sticky": lambda h, c: scenario_join(h, c, "cooperative-sticky"),
    "leave": scenario_leave,
    "crash": scenario_crash,
    "slow-member": scenario_slow,
    "server-restart": scenario_restart,
    "static-membership": scenario_static,
}


# ------------------------------------------------------------------------------------ mixed groups

# id -> (assignor, members). The last member leaves (LeaveGroup) and the second is kill -9ed.
MIXED: dict[str, tuple[str, list[str]]] = {
    "range": ("range", ["kafka-python", "confluent-kafka", "java", "aiokafka", "sarama", "kcat"]),
    # kafkajs's RoundRobinAssigner renamed "roundrobin" (same algorithm) so that it can join the vote.
    "roundrobin": ("roundrobin", ["kafka-python", "confluent-kafka", "aiokafka", "kcat", "sarama",
                                  "platformatic-kafka", "kafkajs"]),
    # kafka-go 0.2.1 labels its subscription ConsumerProtocolSubscription v1 but writes the v0 layout (no
    # OwnedPartitions, KIP-429): a leader that parses v1 as Kafka defines it (librdkafka, kafka-python,
    # aiokafka) cannot read it and assigns kafka-go nothing. So it shares a group with the clients that read
    # only the v0 fields, whichever of them leads; it is the one kill -9ed (it cannot leave, see NO_LEAVE).
    "roundrobin-kafka-go": ("roundrobin", ["sarama", "kafka-go", "platformatic-kafka", "kafkajs"]),
    # The current Go clients with the two cooperative-sticky implementations of librdkafka and kafka-python.
    # In "range-go" kafka-go 0.4 writes the short subscription kafka-go 0.2.1 does; franz-go and both Saramas
    # read a version-1 subscription that ends early as version 0 (franz-go's group_balancer.go, Sarama's
    # consumer_group_members.go; Sarama 1.22 reads only version 0), so whichever of them leads assigns it.
    "cooperative-sticky": ("cooperative-sticky", ["kafka-python", "franz-go", "confluent-kafka", "ibm-sarama",
                                                  "java"]),
    "range-go": ("range", ["franz-go", "kafka-go-0.4", "ibm-sarama", "sarama"]),
    # KIP-848's three consumers in one consumer group, the coordinator assigning with its range assignor; the
    # Java member is the one kill -9ed.
    "consumer-range": ("range", ["franz-go+consumer", "java+consumer", "confluent-kafka+consumer"]),
}


@pytest.mark.parametrize("group", sorted(MIXED), ids=[f"mixed:{g}" for g in sorted(MIXED)])
def test_mixed_group(harness: Harness, group: str) -> None:
    h = harness
    assignor, clients = MIXED[group]
    h._record("client", "+".join(clients))
    h._record("scenario", f"mixed-{group}")
    members = []
    for i, client in enumerate(clients):
        extra = {"protocol_name": "roundrobin"} if client == "kafkajs" else {}
        members.append(h.start(client, f"{client}-{i}", group="interop", assignor=assignor,
                               session_timeout_ms=6000, **extra))
    h.wait_partitioned(members, timeout_s=45, what="the mixed group")
    if all(consumer_protocol(c) for c in clients):
        assert {e.get("assignor") for e in rebalances(h, clients[0])} == {assignor}
    else:
        assert {e.get("protocol") for e in join_completions(h)} == {assignor}
    # One leaves (LeaveGroup), one crashes: the rest still split the topic.
    assert members[-1].terminate() == 0, members[-1].describe()
    members[1].kill9()
    rest = [m for m in members if m.alive]
    h.wait_partitioned(rest, timeout_s=30, what="the mixed group after a leave and a crash")
    assert frozenset().union(*(m.owned for m in rest)) == ALL
    assert_never_shared(h, rest)


# ------------------------------------------------------------------- subscriptions by regex

# Clients whose KIP-848 consumer hands the coordinator a regular expression (SubscribedTopicRegex) to
# resolve, instead of matching topic names itself: the Java client's subscribe(SubscriptionPattern).
REGEX_CLIENTS = ["java+consumer"]
REGEX = "rx-.*"


def owned_topics(m: Member) -> dict[str, frozenset[int]]:
    changes = m.evs("assigned", "revoked", "lost")
    topics = changes[-1].get("topics", {}) if changes else {}
    return {t: frozenset(ps) for t, ps in topics.items() if ps}


def wait_topics_split(h: Harness, members: list[Member], want: dict[str, int], what: str) -> None:
    """Until each member owns something and together they own each partition of `want`'s topics once."""

    def split() -> bool:
        owned = [owned_topics(m) for m in members]
        if not all(owned):
            return False
        pairs = [(t, p) for o in owned for t, ps in o.items() for p in ps]
        return sorted(pairs) == sorted((t, p) for t, n in want.items() for p in range(n))

    def settled() -> bool:
        if not split():
            return False
        time.sleep(1.0)
        return split()

    h.wait(settled, 45, what)


@pytest.mark.parametrize("client", REGEX_CLIENTS, ids=[f"regex:{c}" for c in REGEX_CLIENTS])
def test_regex_subscription(harness: Harness, client: str) -> None:
    """Two members subscribe by a regular expression that the coordinator resolves: they split the matching
    topic; a second matching topic, created later, is split too (within the coordinator's refresh of the
    regex's topics) and its records read, while a topic that does not match stays out."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    h = harness
    h._record("client", client)
    h._record("scenario", "regex-subscription")
    admin = KafkaAdminClient(bootstrap_servers=h.srv.address, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic("rx-a", 4, 1)])
        members = [h.start(client, f"m{i}", group="interop", assignor="range", topic_regex=REGEX)
                   for i in (1, 2)]
        wait_topics_split(h, members, {"rx-a": 4}, "the members to split rx-a")
        admin.create_topics([NewTopic("rx-b", 4, 1), NewTopic("other", 2, 1)])
    finally:
        admin.close()
    wait_topics_split(h, members, {"rx-a": 4, "rx-b": 4}, "the members to split rx-a and rx-b")
    producer = KafkaProducer(bootstrap_servers=h.srv.address)
    try:
        for i in range(40):
            producer.send("rx-b", value=b"v%d" % i, partition=i % 4)
        producer.flush(30)
    finally:
        producer.close(5)

    def read_from_rx_b() -> int:
        return len({(p, o) for m in members for e in m.evs("records") for p, o in e.get("topics", {}).get("rx-b", [])})

    h.wait(lambda: read_from_rx_b() >= 40, 30, "the 40 records of rx-b read")
    resolved = [e for e in h.srv.events("consumer_group_regex_resolved") if e.get("regex") == REGEX]
    assert resolved and resolved[-1].get("topics") == 2, resolved


# ------------------------------------------------------------------------------- admin: kadm


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_kadm_lists_and_describes_groups(harness: Harness, protocol: str) -> None:
    """franz-go's admin client (kadm) lists the groups and describes one as its members see it: the classic
    DescribeGroups (members, protocol, each member's assignment) or, for a KIP-848 group, ConsumerGroupDescribe
    (members, epochs, the coordinator's assignor, each member's current assignment)."""
    h = harness
    client = "franz-go" if protocol == "classic" else "franz-go+consumer"
    h._record("client", client)
    h._record("scenario", f"kadm-{protocol}")
    members = [h.start(client, f"m{i}", group="interop", assignor="range", session_timeout_ms=6000,
                       client_id=f"kadm-m{i}") for i in (1, 2)]
    before = h.wait_partitioned(members, timeout_s=40)

    def describe() -> dict[str, dict[str, Any]]:
        admin = h.start("franz-go", f"admin-{len(h.members)}", role="admin")
        assert admin.wait_exit(30) == 0, admin.describe()
        admin.cleanup()
        return {e["op"]: e for e in admin.evs("admin")}

    # The members own their partitions before the coordinator has seen every one of them acknowledge its
    # assignment (a KIP-848 member says so in its next heartbeat): the group is described until it is Stable.
    ops = describe()
    deadline = time.monotonic() + 20
    while {g["group"]: g["state"] for g in ops["list_groups"]["groups"]}.get("interop") != "Stable":
        assert time.monotonic() < deadline, f"the group never showed Stable: {ops}\n{h.report()}"
        time.sleep(0.5)
        ops = describe()
    after = {m.name: m.owned for m in members}
    assert after == before, f"the group rebalanced while it was described\n{h.report()}"
    listed = {g["group"]: g for g in ops["list_groups"]["groups"]}
    assert listed["interop"]["protocol_type"] == "consumer", listed
    assert listed["interop"]["state"] == "Stable", listed
    owned_by_client = {f"kadm-{m.name}": sorted(m.owned) for m in members}
    if protocol == "classic":
        described = ops["describe_groups"]
        assert (described["state"], described["protocol"]) == ("Stable", "range"), described
        got = {m["client_id"]: m["partitions"] for m in described["members"]}
    else:
        assert listed["interop"]["group_type"] == "consumer", listed
        described = ops["describe_consumer_groups"]
        assert "error" not in described, described
        assert (described["state"], described["assignor"]) == ("Stable", "range"), described
        got = {m["client_id"]: m["partitions"] for m in described["members"]}
    assert got == owned_by_client, f"described {got}, owned {owned_by_client}\n{h.report()}"
