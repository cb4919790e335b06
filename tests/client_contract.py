"""How a test joins a group and commits with a real client: the way each client's documentation tells an
application to, so that no test depends on one client's timing.

One helper a client, used by every test that drives that client through a rebalance:

- **Join** = subscribe, then wait for the assignment *through the client's own poll* (the client joins, syncs
  and heartbeats inside poll; nothing else makes it progress). The wait is over when the assignment is the one
  the test needs, not after a sleep.
- **Commit** = commit, and if the client reports that the group is rebalancing (REBALANCE_IN_PROGRESS or its
  CommitFailed, both documented as "rejoin and retry"), poll so that the client rejoins, then commit again,
  as an application's commit loop does. Only those two errors are retried: any other error fails the test.

kafka-python: its coordinator snapshots the metadata of the *subscribed* topics and rebuilds the snapshot
only when a metadata response arrives. Metadata loaded before `subscribe` leaves the snapshot empty until
the leader's first assignment asks for metadata again, and that answer differs, so every first assignment
is followed by the leader's rejoin — the precondition of kafka-python 3.0.12's lost-join hang (a rejoin
that sets no rejoin flag can leave the member REBALANCING with its heartbeats off). `topics()` always makes
a round trip, so calling it right after `subscribe` fills the snapshot before the first join.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kafka import errors as kafka_errors

# What kafka-python raises for a commit refused because the group is rebalancing (its docs: "rejoin and retry").
KAFKA_PYTHON_REBALANCING = (kafka_errors.CommitFailedError, kafka_errors.RebalanceInProgressError)
POLL_MS = 100


def _no_diagnostics() -> str:
    return ""


def kafka_python_subscribe(consumer: Any, topics: Collection[str], listener: Any = None) -> None:
    """Subscribe, then load metadata for what is subscribed (the module docstring says why the order matters)."""
    if listener is None:
        consumer.subscribe(list(topics))
    else:
        consumer.subscribe(list(topics), listener=listener)
    known = consumer.topics()
    missing = set(topics) - set(known)
    assert not missing, f"no metadata for {sorted(missing)}"


def kafka_python_wait_assigned(consumer: Any, partitions: int | Callable[[set[Any]], bool], timeout_s: float = 20.0,
                               diagnostics: Callable[[], str] = _no_diagnostics) -> set[Any]:
    """Poll until the consumer's assignment has `partitions` partitions (or satisfies the predicate); the
    records those polls return are consumed, as in any application's first polls."""
    done = partitions if callable(partitions) else (lambda assigned: len(assigned) == partitions)
    deadline = time.monotonic() + timeout_s
    while not done(assigned := set(consumer.assignment())):
        assert time.monotonic() < deadline, f"assignment {sorted(assigned)} after {timeout_s} s\n{diagnostics()}"
        consumer.poll(POLL_MS)
    return assigned


def kafka_python_join(consumer: Any, topics: Collection[str], partitions: int | Callable[[set[Any]], bool],
                      timeout_s: float = 20.0, listener: Any = None,
                      diagnostics: Callable[[], str] = _no_diagnostics) -> set[Any]:
    """Subscribe and wait for the assignment through poll; returns the assigned TopicPartitions."""
    kafka_python_subscribe(consumer, topics, listener)
    return kafka_python_wait_assigned(consumer, partitions, timeout_s, diagnostics)


def kafka_python_commit(consumer: Any, offsets: Mapping[Any, Any] | None = None, timeout_s: float = 20.0) -> None:
    """Commit synchronously (the given offsets, or the positions consumed), polling and retrying while the
    group is rebalancing."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.commit(dict(offsets) if offsets is not None else None)
            return
        except KAFKA_PYTHON_REBALANCING as e:
            assert time.monotonic() < deadline, f"commit still refused after {timeout_s} s: {e!r}"
            consumer.poll(POLL_MS)


async def aiokafka_wait_assigned(consumer: Any, partitions: int | Callable[[set[Any]], bool],
                                 timeout_s: float = 20.0) -> set[Any]:
    """Wait until the consumer's assignment has `partitions` partitions (or satisfies the predicate). aiokafka
    joins in its own task once subscribed; `getmany` keeps the application's side going as it would."""
    done = partitions if callable(partitions) else (lambda assigned: len(assigned) == partitions)
    deadline = time.monotonic() + timeout_s
    while not done(assigned := set(consumer.assignment())):
        assert time.monotonic() < deadline, f"assignment {sorted(assigned)} after {timeout_s} s"
        await consumer.getmany(timeout_ms=POLL_MS)
    return assigned


async def aiokafka_commit(consumer: Any, offsets: Mapping[Any, Any] | None = None, timeout_s: float = 20.0) -> None:
    """Commit, retrying while the group is rebalancing (aiokafka's CommitFailedError and RebalanceInProgress)
    once the consumer holds its assignment again."""
    from aiokafka import errors as aio_errors

    rebalancing = (aio_errors.CommitFailedError, aio_errors.RebalanceInProgressError, aio_errors.IllegalStateError)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await consumer.commit(dict(offsets) if offsets is not None else None)
            return
        except rebalancing as e:
            assert time.monotonic() < deadline, f"commit still refused after {timeout_s} s: {e!r}"
            await asyncio.sleep(POLL_MS / 1000)


def confluent_commit(consumer: Any, timeout_s: float = 20.0, **commit_args: Any) -> Any:
    """confluent-kafka: a synchronous commit (`asynchronous=False` added), polling and retrying while the
    group is rebalancing (REBALANCE_IN_PROGRESS, or ILLEGAL_GENERATION for a generation that just ended)."""
    from confluent_kafka import KafkaError, KafkaException

    rebalancing = (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.commit(asynchronous=False, **commit_args)
        except KafkaException as e:
            if e.args[0].code() not in rebalancing or time.monotonic() >= deadline:
                raise
            consumer.poll(POLL_MS / 1000)
