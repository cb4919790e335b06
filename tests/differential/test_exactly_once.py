"""The same confluent-kafka transactional programs against Apache Kafka and the server: what read_committed
and read_uncommitted consumers read after committed and aborted transactions, how a zombie producer is
fenced, and what a transaction a producer left open does to the last stable offset. Both must give the same
answers (and the answers the programs expect)."""
from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.differential.harness import Target
from tests.integration.eos_support import read_to_end, transactional_producer

TIMEOUT_S = 30


def _bootstrap(target: Target) -> str:
    return f"{target.host}:{target.port}"


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"eos-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT_S)
    return name


def _committed_and_aborted(bootstrap: str) -> dict[str, Any]:
    topic = _topic(bootstrap, 2)
    p = transactional_producer(bootstrap, f"tx-{uuid.uuid4()}")
    p.init_transactions(TIMEOUT_S)
    for name, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, value=f"{name}{i}", partition=i % 2)
        if commit:
            p.commit_transaction(TIMEOUT_S)
        else:
            p.flush(TIMEOUT_S)  # librdkafka purges what it has not sent when it aborts
            p.abort_transaction(TIMEOUT_S)
    return {"committed": read_to_end(bootstrap, topic, 2, "read_committed"),
            "uncommitted": read_to_end(bootstrap, topic, 2, "read_uncommitted")}


def _zombie(bootstrap: str) -> dict[str, Any]:
    topic = _topic(bootstrap, 1)
    tid = f"tx-{uuid.uuid4()}"
    zombie = transactional_producer(bootstrap, tid)
    zombie.init_transactions(TIMEOUT_S)
    zombie.begin_transaction()
    zombie.produce(topic, value="zombie")
    zombie.flush(TIMEOUT_S)
    successor = transactional_producer(bootstrap, tid)
    successor.init_transactions(TIMEOUT_S)
    successor.begin_transaction()
    successor.produce(topic, value="successor")
    successor.commit_transaction(TIMEOUT_S)
    try:
        zombie.produce(topic, value="late")
        zombie.commit_transaction(TIMEOUT_S)
        zombie_outcome = "committed"
    except KafkaException as e:
        zombie_outcome = "fatal" if e.args[0].fatal() else "abortable" if e.args[0].txn_requires_abort() else "other"
    return {"zombie": zombie_outcome, "read": read_to_end(bootstrap, topic, 1)}


def _open_transaction_holds_the_lso(bootstrap: str) -> dict[str, Any]:
    topic = _topic(bootstrap, 1)
    p = transactional_producer(bootstrap, f"tx-{uuid.uuid4()}")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value="open")
    p.flush(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value="plain")
    assert plain.flush(TIMEOUT_S) == 0
    held = read_to_end(bootstrap, topic, 1)
    p.commit_transaction(TIMEOUT_S)
    return {"while_open": held, "after_commit": read_to_end(bootstrap, topic, 1)}


@pytest.mark.parametrize("program", [_committed_and_aborted, _zombie, _open_transaction_holds_the_lso],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_same_program_reads_the_same(targets: list[Target], program: Any) -> None:
    kafka, server = (program(_bootstrap(t)) for t in targets)
    assert server == kafka


def test_the_programs_read_what_they_expect(targets: list[Target]) -> None:
    server = _bootstrap(targets[1])
    assert _committed_and_aborted(server)["committed"] == {0: ["a0", "a2", "c0", "c2"], 1: ["a1", "a3", "c1", "c3"]}
    assert _zombie(server) == {"zombie": "fatal", "read": {0: ["successor"]}}
    assert _open_transaction_holds_the_lso(server) == {"while_open": {0: []}, "after_commit": {0: ["open", "plain"]}}
