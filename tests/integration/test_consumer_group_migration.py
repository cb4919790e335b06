"""KIP-848's migration with real clients: kafka-python consumers (the classic protocol, eager range
assignor) form a classic group; a confluent-kafka consumer with `group.protocol=consumer` joins it, which
upgrades the group to a consumer group whose coordinator now assigns the kafka-python members too; when
the confluent-kafka member leaves, the group goes back to a classic group and the kafka-python members
rebalance among themselves. All the while a keyed stream is consumed: nothing skipped, and no partition
held by two members at once (every member's assign/revoke callbacks on one timeline)."""
from __future__ import annotations

import threading
import time
from itertools import pairwise
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer

from tests.integration.conftest import ServerFactory, ServerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.integration.consumer_protocol_support import (  # noqa: E402 (after the importorskip)
    PARTITIONS,
    TOPIC,
    KeyedStream,
    Member,
    Timeline,
    settled,
    wait_until,
)

pytestmark = pytest.mark.integration

GROUP = "mixed"
# A short initial rebalance delay, not 0: kafka-python 3.0.12 members whose first leader assigns from an
# empty metadata snapshot rejoin at once and can stall (see tests/interop/conftest.py).
FLAGS: dict[str, Any] = dict(
    topic=[f"{TOPIC}:{PARTITIONS}"], initial_rebalance_delay_ms=300, group_consumer_min_heartbeat_interval_ms=100,
    group_consumer_heartbeat_interval_ms=250, group_consumer_min_session_timeout_ms=3000,
    group_consumer_session_timeout_ms=6000,
)


class ClassicMember:
    """A kafka-python consumer (classic protocol) polled by its own thread, reporting to the timeline."""

    def __init__(self, srv: ServerProcess, name: str, timeline: Timeline) -> None:
        self.name = name
        self.timeline = timeline
        self.held: set[int] = set()
        self.errors: list[str] = []
        self.consumer = KafkaConsumer(
            bootstrap_servers=srv.address, group_id=GROUP, client_id=name, auto_offset_reset="earliest",
            enable_auto_commit=True, auto_commit_interval_ms=200, session_timeout_ms=6000,
            heartbeat_interval_ms=300, metadata_max_age_ms=1000, fetch_max_wait_ms=50)
        self.consumer.subscribe([TOPIC], listener=_Listener(self))
        self.consumer.topics()  # metadata after subscribing, before the first join (e2e_clients.py says why)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                batches = self.consumer.poll(timeout_ms=100)
            except Exception as e:  # a rebalance may surface as an error; the member goes on
                self.errors.append(repr(e))
                continue
            now = time.monotonic()
            with self.timeline.lock:
                for tp, records in batches.items():
                    for r in records:
                        self.timeline.messages.append((now, self.name, tp.partition, r.offset, r.key))

    def assignment(self) -> set[int]:
        with self.timeline.lock:
            return set(self.held)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, member: ClassicMember) -> None:
        self.member = member

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.member.timeline.add(self.member.name, "revoke", list(revoked))
        with self.member.timeline.lock:
            self.member.held -= {tp.partition for tp in revoked}

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.member.timeline.add(self.member.name, "assign", list(assigned))
        with self.member.timeline.lock:
            self.member.held |= {tp.partition for tp in assigned}


@pytest.fixture
def srv(server_factory: ServerFactory) -> ServerProcess:
    return server_factory(**FLAGS)


def test_a_classic_group_upgrades_when_a_consumer_protocol_member_joins_and_downgrades_when_it_leaves(
        srv: ServerProcess) -> None:
    timeline = Timeline()
    stream = KeyedStream(srv.address)
    classic = [ClassicMember(srv, f"kp{i}", timeline) for i in range(2)]
    new: Member | None = None
    try:
        wait_until(settled(classic), 30, "two kafka-python members to share the partitions")  # type: ignore[arg-type]
        new = Member(srv.address, "cf", timeline, GROUP)
        srv.wait_for_event("consumer_group_upgraded", timeout_s=20, group_id=GROUP)
        wait_until(settled([*classic, new]), 40, "the three members to share the partitions")  # type: ignore[list-item]
        time.sleep(1.0)
        new.close()
        srv.wait_for_event("consumer_group_downgraded", timeout_s=20, group_id=GROUP)
        wait_until(settled(classic), 40, "the kafka-python members to share everything again")  # type: ignore[arg-type]
        sent = stream.stop()
        wait_until(lambda: {(p, o) for _t, _m, p, o, _k in timeline.messages} >= set(sent), 30,
                   "every record consumed")
    finally:
        stream.stopping.set()
        for m in classic:
            m.close()

    consumed = {(p, o): k for _t, _m, p, o, k in timeline.messages}
    assert all(consumed[po] == key for po, key in sent.items())
    spans = timeline.intervals()
    for partition, held in spans.items():
        held.sort()
        for (_s1, e1, m1), (s2, _e2, m2) in pairwise(held):
            assert e1 <= s2, f"partition {partition} held by {m1} until {e1} and by {m2} from {s2}"
    described = srv.events("consumer_group_upgraded")
    assert described[0]["members"] == 2
