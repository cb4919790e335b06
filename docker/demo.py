#!/usr/bin/env python3
"""Demo traffic for the coordinator: a producer, and consumers that form one consumer group.

    python docker/demo.py produce [--rate 20] [--duration 0]
    python docker/demo.py consume [--duration 0] [--max-records 0]

Both use kafka-python (a dependency of the server, so it is in the image). Settings come from flags or
DEMO_* variables: DEMO_BOOTSTRAP (default 127.0.0.1:9092), DEMO_TOPIC (demo), DEMO_GROUP (demo-consumers),
DEMO_RATE (records per second, 20), DEMO_DURATION (seconds, 0 = until stopped). Progress goes to stdout as
one JSON object per line; the last line is a summary (`produced` / `consumed` with a `records` count).
Start several consumers with the same group and the coordinator splits the topic's partitions among them.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import warnings
from typing import Any

# Names of the environment variables, also checked by tests/unit/test_docker_files.py.
ENV_VARS = ("DEMO_BOOTSTRAP", "DEMO_TOPIC", "DEMO_GROUP", "DEMO_RATE", "DEMO_DURATION")


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def parse_args(argv: list[str] | None = None, env: dict[str, str] | None = None) -> argparse.Namespace:
    env = dict(os.environ if env is None else env)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("produce", "consume"))
    parser.add_argument("--bootstrap", default=env.get("DEMO_BOOTSTRAP") or "127.0.0.1:9092")
    parser.add_argument("--topic", default=env.get("DEMO_TOPIC") or "demo")
    parser.add_argument("--group", default=env.get("DEMO_GROUP") or "demo-consumers")
    parser.add_argument("--rate", type=float, default=float(env.get("DEMO_RATE") or 20), help="records/s")
    parser.add_argument("--duration", type=float, default=float(env.get("DEMO_DURATION") or 0),
                        help="seconds to run; 0 = until SIGTERM/SIGINT")
    parser.add_argument("--max-records", type=int, default=0, help="consume: stop after this many; 0 = no limit")
    return parser.parse_args(argv)


class Stop:
    """SIGTERM (docker stop) and SIGINT end the loop so consumers leave the group cleanly."""

    def __init__(self, duration_s: float) -> None:
        self.deadline = time.monotonic() + duration_s if duration_s > 0 else None
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True

    def __bool__(self) -> bool:
        return self.requested or (self.deadline is not None and time.monotonic() >= self.deadline)


def produce(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer

    stop = Stop(args.duration)
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, client_id="demo-producer", linger_ms=5,
                             key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode())
    sent = 0
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    next_at = time.monotonic()
    try:
        while not stop:
            producer.send(args.topic, key=f"key-{sent % 64}", value={"seq": sent, "ts_ms": int(time.time() * 1000)})
            sent += 1
            if sent % 100 == 0:
                emit("progress", mode="produce", records=sent)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    emit("produced", records=sent, topic=args.topic)
    return 0


def consume(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer

    stop = Stop(args.duration)
    consumer = KafkaConsumer(
        args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
        client_id=f"demo-consumer-{socket.gethostname()}-{os.getpid()}", auto_offset_reset="earliest",
        enable_auto_commit=True, auto_commit_interval_ms=1000,
    )
    received = 0
    try:
        while not stop and not (args.max_records and received >= args.max_records):
            batches = consumer.poll(timeout_ms=500)
            for records in batches.values():
                received += len(records)
            if batches:
                emit("progress", mode="consume", records=received,
                     assignment=sorted(f"{tp.topic}-{tp.partition}" for tp in consumer.assignment()))
        consumer.commit()
    finally:
        consumer.close()  # commits (auto-commit is on) and sends LeaveGroup
    emit("consumed", records=received, group=args.group)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # kafka-python 3.0.12 loads its protocol schemas with importlib.resources calls deprecated in 3.11.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    return produce(args) if args.mode == "produce" else consume(args)


if __name__ == "__main__":
    sys.exit(main())
