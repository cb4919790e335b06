"""One consumer-group member for `pipeline.demo_data`, in a process of its own so it can really crash.

    python -m pipeline.demo_client --bootstrap HOST:PORT --group G --topic T [--topic T2] --client-id C

A stock kafka-python `KafkaConsumer` with manual commits: after every poll that returned records it
commits the next offset of each partition it read (synchronously, with the client id as metadata).
It reports what it did on stdout, one JSON object per line, flushed at once so a `kill -9` loses
nothing that was reported:

    {"event": "assigned", "member_id": ..., "generation": N, "partitions": [[topic, p], ...]}
    {"event": "commit", "topic": ..., "partition": p, "offset": o, "metadata": ..., "generation": N}
    {"event": "commit_failed", "error": ...}        (a rebalance overtook the commit: not committed)
    {"event": "closed"}                             (after LeaveGroup, on "stop" from stdin)

`--slow` reads a few records per poll and sleeps, so its group falls behind the producer.
`--group-instance-id` makes it a static member (KIP-345); `--max-poll-interval-ms` is its rebalance
timeout. A line `subscribe T1,T2` on stdin changes its subscription (it rejoins with new metadata).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

_out_lock = threading.Lock()


def emit(**event: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.consumer: KafkaConsumer | None = None

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        # Called after SyncGroup, so the generation and member id are the ones the coordinator recorded.
        # kafka-python 3 calls listeners on its IO thread; its public group_metadata() takes the
        # coordinator's lock, which the application thread can hold while it waits for that IO thread
        # (a commit or poll during a quick second rebalance): the member hung, never committing again.
        # The generation was set on this thread just before the call, so it is read without the lock.
        assert self.consumer is not None
        generation = self.consumer._coordinator._generation
        emit(event="assigned", member_id=generation.member_id, generation=generation.generation_id,
             partitions=sorted([tp.topic, tp.partition] for tp in assigned))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.demo_client")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--slow", action="store_true")
    parser.add_argument("--group-instance-id")
    parser.add_argument("--max-poll-interval-ms", type=int, default=10000)
    args = parser.parse_args(argv)

    stop = threading.Event()
    resubscribe: list[list[str]] = []  # handed to the polling thread: the consumer is not thread-safe

    def read_stdin() -> None:
        for line in sys.stdin:
            command = line.split()
            if command == ["stop"]:
                break
            if command[:1] == ["subscribe"] and len(command) == 2:
                resubscribe.append(command[1].split(","))
        stop.set()  # "stop" or the parent went away

    threading.Thread(target=read_stdin, daemon=True).start()
    listener = _Listener()
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=300,
        # The rebalance timeout: short, so a rebalance that waits for a member is over in seconds.
        max_poll_interval_ms=args.max_poll_interval_ms, max_poll_records=3 if args.slow else 500,
        fetch_max_wait_ms=200, group_instance_id=args.group_instance_id,
    )
    listener.consumer = consumer
    # Subscribe, then load metadata (topics() always asks the cluster): kafka-python's coordinator keeps a
    # snapshot of the metadata of the *subscribed* topics, rebuilt only when a metadata answer arrives.
    # Metadata loaded before subscribing leaves that snapshot empty, so the leader's first assignment is
    # followed by its own rejoin, the precondition of kafka-python 3.0.12's lost join (a member left
    # rebalancing with its heartbeats off, never committing again).
    consumer.subscribe(topics=args.topic, listener=listener)
    consumer.topics()
    while not stop.is_set():
        if resubscribe:
            consumer.subscribe(topics=resubscribe.pop(0), listener=listener)
            consumer.topics()
        polled = consumer.poll(timeout_ms=200)
        if not polled:
            continue
        offsets = {TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(records[-1].offset + 1,
                                                                             args.client_id, -1)
                   for tp, records in polled.items()}
        generation = consumer.group_metadata().generation_id
        try:
            consumer.commit(offsets)
        except KafkaError as e:
            emit(event="commit_failed", error=type(e).__name__)
        else:
            for tp, om in sorted(offsets.items()):
                emit(event="commit", topic=tp.topic, partition=tp.partition, offset=om.offset,
                     metadata=om.metadata, generation=generation)
        if args.slow:
            time.sleep(0.4)
    consumer.close()  # LeaveGroup
    emit(event="closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
