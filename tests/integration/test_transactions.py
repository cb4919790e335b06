"""The transaction coordinator served on one node, with real clients: confluent-kafka's init_transactions()
succeeds, every InitProducerId of the same transactional id hands out a higher epoch (a second producer
fences the first), and the epochs survive a kill -9 and restart (`__transaction_state` is replayed at start).
The timeout bound and the malformed requests are answered with Kafka's codes."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.integration.conftest import ServerFactory, ServerProcess
from tests.integration.group_client import Connection
from tests.integration.txn_client import TransactionalIdClient, find_transaction_coordinator

pytestmark = pytest.mark.integration

NONE, INVALID_REQUEST, INVALID_PRODUCER_EPOCH, INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED = 0, 42, 47, 50, 90


def producer(srv: ServerProcess, transactional_id: str) -> Producer:
    return Producer({"bootstrap.servers": srv.address, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 60_000})


def epoch_of(srv: ServerProcess, transactional_id: str) -> tuple[int, int]:
    client = TransactionalIdClient(srv.host, srv.port, transactional_id)
    try:
        answer = client.init_producer_id()
        assert answer.error_code == NONE, answer
        return answer.producer_id, answer.producer_epoch
    finally:
        client.close()


def test_find_coordinator_names_this_node_for_a_transactional_id(server: ServerProcess) -> None:
    where = find_transaction_coordinator(server.host, server.port, "orders-tx", timeout_s=0)
    assert (where.error_code, where.host, where.port) == (NONE, server.host, server.port)


@pytest.mark.parametrize("version", [4, 6])
def test_find_coordinator_batched_names_this_node_for_transactional_ids(server: ServerProcess, version: int) -> None:
    conn = Connection((server.host, server.port), "txn-test")
    try:
        resp = conn.call(FindCoordinatorRequest[version](key_type=1, coordinator_keys=["a", "b"]),
                         FindCoordinatorResponse)
    finally:
        conn.close()
    assert [(c.key, c.error_code, c.host, c.port) for c in resp.coordinators] == [
        ("a", NONE, server.host, server.port), ("b", NONE, server.host, server.port)]


def test_init_transactions_succeeds_and_each_init_bumps_the_epoch(server: ServerProcess) -> None:
    tid = f"tx-{uuid.uuid4()}"
    first = producer(server, tid)
    first.init_transactions(30)
    pid, epoch = epoch_of(server, tid)
    assert pid >= 0 and epoch >= 1  # the producer's own init got the one before
    second = producer(server, tid)
    second.init_transactions(30)  # fences the first producer
    pid2, epoch2 = epoch_of(server, tid)
    assert pid2 == pid and epoch2 == epoch + 2
    # Idempotent producers and transactional ids share one producer id space.
    other_pid, other_epoch = epoch_of(server, f"tx-{uuid.uuid4()}")
    assert other_pid != pid and other_epoch == 0
    for p in (first, second):
        p.flush(1)


def test_the_epoch_survives_a_kill_9(server_factory: ServerFactory) -> None:
    srv = server_factory()
    tid = f"tx-{uuid.uuid4()}"
    producer(srv, tid).init_transactions(30)
    pid, before = epoch_of(srv, tid)
    srv.kill9()
    srv.start()
    assert srv.events("transactions_loaded")[-1]["transactional_ids"] == 1  # the restart's load
    again = producer(srv, tid)
    again.init_transactions(30)
    pid_after, after = epoch_of(srv, tid)
    assert pid_after == pid and after == before + 2


def test_kafkas_answers_to_bad_requests(server: ServerProcess) -> None:
    tid = f"tx-{uuid.uuid4()}"
    client = TransactionalIdClient(server.host, server.port, tid)
    try:
        assert client.init_producer_id(timeout_ms=900_001, retry=False).error_code == INVALID_TRANSACTION_TIMEOUT
        assert client.init_producer_id(producer_id=5, producer_epoch=-1, retry=False).error_code == INVALID_REQUEST
        assert client.init_producer_id(transactional_id="", retry=False).error_code == INVALID_REQUEST
        first = client.init_producer_id()
        bumped = client.init_producer_id(producer_id=first.producer_id, producer_epoch=first.producer_epoch)
        assert (bumped.error_code, bumped.producer_epoch) == (NONE, first.producer_epoch + 1)
        stale = dict(producer_id=first.producer_id, producer_epoch=first.producer_epoch - 1 if
                     first.producer_epoch > 0 else 100, retry=False)
        assert client.init_producer_id(**stale).error_code == PRODUCER_FENCED  # type: ignore[arg-type]
        assert client.init_producer_id(version=3, **stale).error_code == INVALID_PRODUCER_EPOCH  # type: ignore[arg-type]
    finally:
        client.close()


def test_a_too_long_transaction_timeout_fails_init_transactions(server: ServerProcess) -> None:
    p = Producer({"bootstrap.servers": server.address, "transactional.id": f"tx-{uuid.uuid4()}",
                  "transaction.timeout.ms": 900_001})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(10)
    assert "INVALID_TRANSACTION_TIMEOUT" in str(raised.value) or "timeout" in str(raised.value).lower()
