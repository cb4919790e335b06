"""aiokafka driver: AIOKafkaConsumer with a ConsumerRebalanceListener, commit after each processed batch."""
from __future__ import annotations

import asyncio
import logging
import signal
import sys

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import CommitFailedError, KafkaError

from tests.interop.drivers.common import Ownership, emit, parse_args

ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}


class Listener(ConsumerRebalanceListener):
    def __init__(self, own: Ownership) -> None:
        self.own = own

    async def on_partitions_revoked(self, revoked):  # type: ignore[no-untyped-def]
        parts = [tp.partition for tp in revoked]
        self.own.revoked(parts)
        stall = self.own.take_stall(parts)
        if stall:
            emit("stall", ms=int(stall * 1000))
            await asyncio.sleep(stall)  # heartbeats go on; the rejoin waits for this listener
            emit("stall_end")

    async def on_partitions_assigned(self, assigned):  # type: ignore[no-untyped-def]
        self.own.assigned([tp.partition for tp in assigned])


async def produce(args) -> None:  # type: ignore[no-untyped-def]
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(args.topic, value=b"v%d" % i) for i in range(args.count)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    emit("produced", count=args.count)


async def consume(args) -> None:  # type: ignore[no-untyped-def]
    if args.assignor not in ASSIGNORS:
        raise SystemExit(f"aiokafka has no {args.assignor} assignor")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id or "aiokafka",
        group_instance_id=args.instance_id, enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=args.heartbeat_interval_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms, max_poll_interval_ms=args.rebalance_timeout_ms,
        partition_assignment_strategy=(ASSIGNORS[args.assignor],), metadata_max_age_ms=5000,
        retry_backoff_ms=100,
    )
    own = Ownership(args.stall_revoke_ms)
    consumer.subscribe([args.topic], listener=Listener(own))
    await consumer.start()
    try:
        # A failed commit (a rebalance in between) is retried on later polls even when they bring no
        # records: after the last batch there may be none, and the positions must still land.
        retry_commit = False
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            recs = [[tp.partition, m.offset] for tp, msgs in batches.items() for m in msgs]
            if recs:
                emit("records", recs=recs)
            elif not retry_commit:
                continue
            try:
                await consumer.commit()  # everything consumed so far
                emit("committed", offsets={str(tp.partition): await consumer.position(tp)
                                           for tp in consumer.assignment()})
                retry_commit = False
            except (CommitFailedError, KafkaError) as e:
                emit("commit_failed", error=repr(e))
                retry_commit = True
    finally:
        await consumer.stop()
        emit("exit")


def main() -> None:
    args = parse_args()
    if args.debug:
        logging.basicConfig(stream=sys.stderr, level=logging.DEBUG,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
        logging.getLogger("aiokafka").setLevel(logging.DEBUG)
    emit("start", client="aiokafka", version=aiokafka.__version__)
    asyncio.run(produce(args) if args.role == "producer" else consume(args))


if __name__ == "__main__":
    main()
