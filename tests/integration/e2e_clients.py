"""The client processes of the end-to-end tests: real Kafka clients, each in its own OS process
(tests/integration/e2e_support.py starts them and checks what they report).

Run as a script, this file *is* the client process (stdlib imports only at the top, so it runs with
`.venv/bin/python tests/integration/e2e_clients.py ...` outside pytest):

    e2e_clients.py consumer --client kafka-python|aiokafka --bootstrap H:P --group G --topic T --name N
    e2e_clients.py producer --client kafka-python|aiokafka --bootstrap H:P --topic T --total N

Every process writes JSON lines on stdout (flushed per line), each with `t` = time.time() at emission:

    consumer: {"ev": "started"}
              {"ev": "assigned", "gen": G, "partitions": [...]}       (rebalance listener)
              {"ev": "revoked", "partitions": [...]}
              {"ev": "recs", "p": P, "o": [offsets...], "k": [keys...]}  one per partition per poll
              {"ev": "commit", "offsets": {"P": offset}}            an OffsetCommit the server acknowledged
              {"ev": "final_commit", "offsets": {...}}              after the `pause` command's commit()
              {"ev": "closed"}
    producer: {"ev": "acks", "a": [[key, partition, offset], ...]}  acknowledged records
              {"ev": "error", "key": K, "error": "..."}             a record the producer gave up on
              {"ev": "done", "acked": N}

A consumer reads commands on stdin: `pause` (stop polling, commit the current positions synchronously,
report them as final_commit; kafka-python's commit() returns after the ack) and `close` (pause if not
yet, then close the client, which sends LeaveGroup, and exit 0). SIGKILL is a real crash.

"commit" events come from instrumenting the client's one commit coroutine (kafka-python's
`ConsumerCoordinator._send_offset_commit_request`, aiokafka's `GroupCoordinator._do_commit_offsets`):
the wrapper reports the offsets after the coroutine returned without raising, i.e. after the server
acknowledged every partition. Automatic, pre-rebalance and explicit commits all go through it.
"""
from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from typing import Any

_out_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    line = json.dumps({"ev": ev, "t": time.time(), **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _stdin_commands() -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("eof")

    threading.Thread(target=read, daemon=True).start()
    return q


def _offsets_json(offsets: dict[Any, Any]) -> dict[str, int]:
    return {str(tp.partition): int(getattr(om, "offset", om)) for tp, om in offsets.items()}


def kafka_python_consumer(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name, enable_auto_commit=True,
        auto_commit_interval_ms=a.auto_commit_interval_ms, session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_interval_ms, auto_offset_reset="earliest",
        max_poll_records=a.max_poll_records, request_timeout_ms=10_000, reconnect_backoff_max_ms=200,
    )
    coord = consumer._coordinator
    original = coord._send_offset_commit_request

    async def reporting_commit(offsets: Any) -> Any:
        result = await original(offsets)  # raises unless every partition was acknowledged
        emit("commit", offsets=_offsets_json(offsets))
        return result

    coord._send_offset_commit_request = reporting_commit

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", gen=coord._generation.generation_id, partitions=sorted(tp.partition for tp in assigned))

    # Topic metadata after subscribing and before the first join: otherwise a leader may assign from empty
    # metadata and rejoin when it arrives, and kafka-python 3.0.12 drops that rejoin's SyncGroup result if
    # a poll(timeout_ms) expires between its JoinGroup and SyncGroup responses (ConsumerCoordinator.
    # need_rejoin() is then False, so join_group_async never collects the finished join task): the member
    # stays REBALANCING with heartbeats disabled and no assignment, until its session expires. The
    # coordinator's metadata snapshot is of the subscribed topics, rebuilt only when a metadata response
    # arrives, so the round trip must come after `subscribe` (`topics()` always makes one; metadata fetched
    # before it left the snapshot empty, and every first assignment was followed by the leader's rejoin).
    consumer.subscribe([a.topic], listener=Listener())
    assert a.topic in consumer.topics(), f"no metadata for {a.topic}"
    commands = _stdin_commands()
    emit("started")
    paused = False
    failing_since: float | None = None
    while True:
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            cmd = ""
        if cmd in ("pause", "close", "eof") and not paused:
            paused = True
            positions = {TopicPartition(a.topic, tp.partition): consumer.position(tp) for tp in consumer.assignment()}
            offsets = {tp: OffsetAndMetadata(pos, "", -1) for tp, pos in positions.items()}
            consumer.commit(offsets)  # synchronous: returns once the server acknowledged it
            emit("final_commit", offsets=_offsets_json(offsets))
        if cmd in ("close", "eof"):
            consumer.close(autocommit=False)
            emit("closed")
            return
        if paused:
            time.sleep(0.02)
            continue
        # kafka-python 3.0.12 raises a retriable connection error out of poll() when a metadata refresh it
        # waits on fails while the server is down (seen on CI in the server-restart step: its coordinator
        # lookup awaited the refresh, which met ECONNREFUSED). An application keeps polling through an
        # outage; so does this worker, for up to a minute, and says so on its event stream.
        try:
            batches = consumer.poll(timeout_ms=100)
            failing_since = None
        except KafkaError as e:
            emit("poll_error", error=repr(e), retriable=bool(getattr(e, "retriable", False)))
            failing_since = failing_since or time.monotonic()
            if not getattr(e, "retriable", False) or time.monotonic() - failing_since > 60:
                raise
            time.sleep(0.1)
            continue
        for tp, records in batches.items():
            emit("recs", p=tp.partition, o=[r.offset for r in records], k=[r.key.decode() for r in records])


def aiokafka_consumer(a: argparse.Namespace) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    async def main() -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue[str] = asyncio.Queue()

        def read_stdin() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(commands.put_nowait, line.strip())
            loop.call_soon_threadsafe(commands.put_nowait, "eof")

        threading.Thread(target=read_stdin, daemon=True).start()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name, enable_auto_commit=True,
            auto_commit_interval_ms=a.auto_commit_interval_ms, session_timeout_ms=a.session_timeout_ms,
            heartbeat_interval_ms=a.heartbeat_interval_ms, auto_offset_reset="earliest",
            max_poll_records=a.max_poll_records, request_timeout_ms=10_000, retry_backoff_ms=100,
        )

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                emit("revoked", partitions=sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned: Any) -> None:
                emit("assigned", gen=consumer._coordinator.generation,
                     partitions=sorted(tp.partition for tp in assigned))

        consumer.subscribe([a.topic], listener=Listener())
        await consumer.start()
        coord = consumer._coordinator
        original = coord._do_commit_offsets

        async def reporting_commit(assignment: Any, offsets: Any) -> Any:
            result = await original(assignment, offsets)  # raises unless every partition was acknowledged
            if offsets:
                emit("commit", offsets=_offsets_json(offsets))
            return result

        coord._do_commit_offsets = reporting_commit
        emit("started")
        paused = False
        while True:
            cmd = "" if commands.empty() else commands.get_nowait()
            if cmd in ("pause", "close", "eof") and not paused:
                paused = True
                offsets = {}
                for tp in consumer.assignment():
                    offsets[TopicPartition(a.topic, tp.partition)] = OffsetAndMetadata(await consumer.position(tp), "")
                await consumer.commit(offsets)
                emit("final_commit", offsets=_offsets_json(offsets))
            if cmd in ("close", "eof"):
                await consumer.stop()
                emit("closed")
                return
            if paused:
                await asyncio.sleep(0.02)
                continue
            batch = await consumer.getmany(timeout_ms=100)
            for tp, records in batch.items():
                emit("recs", p=tp.partition, o=[r.offset for r in records], k=[r.key.decode() for r in records])

    asyncio.run(main())


def key_of(i: int) -> str:
    return f"k{i:06d}"


def kafka_python_producer(a: argparse.Namespace) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=a.bootstrap, client_id="e2e-producer", linger_ms=5,
                             reconnect_backoff_max_ms=200)  # otherwise default settings: idempotent, acks=all
    lock = threading.Lock()
    acked: list[list[Any]] = []
    total_acked = 0

    def drain() -> None:
        nonlocal total_acked
        with lock:
            batch, acked[:] = list(acked), []
        if batch:
            total_acked += len(batch)
            emit("acks", a=batch)

    for start in range(0, a.total, a.chunk):
        for i in range(start, min(start + a.chunk, a.total)):
            key = key_of(i)
            fut = producer.send(a.topic, key=key.encode(), value=b"value-%d" % i)
            fut.add_callback(lambda md, k=key: _locked_append(lock, acked, [k, md.partition, md.offset]))
            fut.add_errback(lambda e, k=key: emit("error", key=k, error=repr(e)))
        drain()
        time.sleep(a.interval_s)
    producer.flush(timeout=60)
    drain()
    producer.close(timeout=10)
    emit("done", acked=total_acked)


def _locked_append(lock: threading.Lock, out: list[Any], item: Any) -> None:
    with lock:
        out.append(item)


def aiokafka_producer(a: argparse.Namespace) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=a.bootstrap, client_id="e2e-producer", linger_ms=5,
                                    enable_idempotence=True, retry_backoff_ms=100)
        await producer.start()
        acked: list[list[Any]] = []
        total_acked = 0
        pending: set[Any] = set()

        def done(fut: Any, key: str) -> None:
            pending.discard(fut)
            if fut.cancelled():
                emit("error", key=key, error="cancelled")
            elif fut.exception() is not None:
                emit("error", key=key, error=repr(fut.exception()))
            else:
                md = fut.result()
                acked.append([key, md.partition, md.offset])

        def drain() -> None:
            nonlocal total_acked
            if acked:
                total_acked += len(acked)
                emit("acks", a=list(acked))
                acked.clear()

        try:
            for start in range(0, a.total, a.chunk):
                for i in range(start, min(start + a.chunk, a.total)):
                    key = key_of(i)
                    fut = await producer.send(a.topic, key=key.encode(), value=b"value-%d" % i)
                    pending.add(fut)
                    fut.add_done_callback(lambda f, k=key: done(f, k))
                drain()
                await asyncio.sleep(a.interval_s)
            await producer.flush()
            while pending:
                await asyncio.sleep(0.01)
            drain()
        finally:
            await producer.stop()
        emit("done", acked=total_acked)

    asyncio.run(main())


def worker_main(argv: list[str]) -> None:
    import logging

    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["consumer", "producer"])
    p.add_argument("--client", choices=["kafka-python", "aiokafka"], required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="e2e")
    p.add_argument("--name", default="c")
    p.add_argument("--session-timeout-ms", type=int, default=3000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=300)
    p.add_argument("--auto-commit-interval-ms", type=int, default=200)
    p.add_argument("--max-poll-records", type=int, default=500)
    p.add_argument("--total", type=int, default=0)
    p.add_argument("--chunk", type=int, default=500)
    p.add_argument("--interval-s", type=float, default=0.1)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {a.role}/{a.name} %(levelname)s %(name)s: %(message)s")
    {("consumer", "kafka-python"): kafka_python_consumer, ("consumer", "aiokafka"): aiokafka_consumer,
     ("producer", "kafka-python"): kafka_python_producer, ("producer", "aiokafka"): aiokafka_producer,
     }[(a.role, a.client)](a)


if __name__ == "__main__":
    worker_main(sys.argv[1:])
