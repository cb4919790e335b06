"""Transactional requests built by hand for the tests, against the server or Kafka alike: find an id's
transaction coordinator and call InitProducerId on it, retrying what a client retries, so that the answers
(error codes, epochs) can be compared."""
from __future__ import annotations

import time
from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

from tests.integration.group_client import Connection

TRANSACTION_KEY = 1  # FindCoordinator's key type of a transactional id
# What a producer's init_transactions() retries.
RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def find_transaction_coordinator(host: str, port: int, transactional_id: str, timeout_s: float = 60.0) -> Any:
    """FindCoordinator v3 for a transactional id, retried while the coordinator is not available (Kafka
    creates `__transaction_state` on the first lookup and answers COORDINATOR_NOT_AVAILABLE meanwhile)."""
    conn = Connection((host, port), "txn-test")
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            answer = conn.call(FindCoordinatorRequest[3](key=transactional_id, key_type=TRANSACTION_KEY),
                               FindCoordinatorResponse)
            if answer.error_code not in RETRIABLE or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)
    finally:
        conn.close()


class TransactionalIdClient:
    """One connection to the id's transaction coordinator."""

    def __init__(self, host: str, port: int, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        where = find_transaction_coordinator(host, port, transactional_id)
        assert where.error_code == 0, where
        self.conn = Connection((where.host, where.port), "txn-test")

    def init_producer_id(self, *, version: int = 4, timeout_ms: int = 60_000, producer_id: int = -1,
                         producer_epoch: int = -1, retry: bool = True, transactional_id: str | None = None,
                         timeout_s: float = 60.0) -> Any:
        fields: dict[str, Any] = {"transactional_id": self.transactional_id if transactional_id is None
                                  else transactional_id, "transaction_timeout_ms": timeout_ms}
        if version >= 3:
            fields.update(producer_id=producer_id, producer_epoch=producer_epoch)
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self.conn.call(InitProducerIdRequest[version](**fields), InitProducerIdResponse)
            if not retry or answer.error_code not in RETRIABLE or time.monotonic() > deadline:
                return answer
            time.sleep(0.1)

    def add_partitions(self, producer_id: int, producer_epoch: int, partitions: dict[str, list[int]], *,
                       version: int = 3, retry: bool = True, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn (v0-3); each partition's error code. CONCURRENT_TRANSACTIONS (the previous
        transaction's markers still being written) is retried, as producers do."""
        request = AddPartitionsToTxnRequest[version](
            v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in partitions.items()])
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self.conn.call(request, AddPartitionsToTxnResponse)
            codes = {(t.name, r.partition_index): r.partition_error_code
                     for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition}
            if not retry or set(codes.values()) != {51} or time.monotonic() > deadline:
                return codes
            time.sleep(0.05)

    def add_offsets(self, producer_id: int, producer_epoch: int, group_id: str, *, version: int = 3) -> int:
        return self.conn.call(AddOffsetsToTxnRequest[version](
            transactional_id=self.transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            group_id=group_id), AddOffsetsToTxnResponse).error_code

    def end_txn(self, producer_id: int, producer_epoch: int, commit: bool, *, version: int = 3,
                retry: bool = False, timeout_s: float = 30.0) -> int:
        """EndTxn; with `retry`, CONCURRENT_TRANSACTIONS (the markers still being written) is retried, as a
        producer retries its commit, so that the answer does not depend on how fast the markers went."""
        request = EndTxnRequest[version](transactional_id=self.transactional_id, producer_id=producer_id,
                                         producer_epoch=producer_epoch, committed=commit)
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.conn.call(request, EndTxnResponse).error_code
            if not retry or code != 51 or time.monotonic() > deadline:
                return code
            time.sleep(0.05)

    def close(self) -> None:
        self.conn.close()
