"""confluent-kafka driver: Consumer with on_assign/on_revoke/on_lost, commit after processing; the classic
protocol, or with --group-protocol consumer KIP-848's (the coordinator assigns with the server-side assignor
standing for --assignor: range as range, cooperative-sticky as uniform, KIP-848's incremental default)."""
from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer

from tests.interop.drivers.common import Ownership, Stop, emit, parse_args


def produce(args) -> None:  # type: ignore[no-untyped-def]
    conf = {"bootstrap.servers": args.bootstrap, "linger.ms": 5}
    if args.debug:
        conf["debug"] = args.debug
    producer = Producer(conf)
    for i in range(args.count):
        producer.produce(args.topic, value=b"v%d" % i)
        producer.poll(0)
    if producer.flush(30) != 0:
        raise SystemExit("records left unsent")
    emit("produced", count=args.count)


def consume(args) -> None:  # type: ignore[no-untyped-def]
    stop = Stop()
    conf = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "group.protocol": args.group_protocol,
        "client.id": args.client_id or "confluent-kafka",
        # librdkafka requires max.poll.interval.ms >= session.timeout.ms
        "max.poll.interval.ms": max(args.rebalance_timeout_ms, args.session_timeout_ms),
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 5000, "reconnect.backoff.max.ms": 500,
    }
    if args.group_protocol == "consumer":
        # Session timeout and heartbeat interval are the coordinator's (group.consumer.*): not client settings.
        conf["group.remote.assignor"] = "range" if args.assignor == "range" else "uniform"
    else:
        conf.update({"partition.assignment.strategy": args.assignor, "session.timeout.ms": args.session_timeout_ms,
                     "heartbeat.interval.ms": args.heartbeat_interval_ms})
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.debug:
        conf["debug"] = args.debug
    consumer = Consumer(conf)
    own = Ownership(args.stall_revoke_ms)

    def on_assign(c, partitions):  # type: ignore[no-untyped-def]
        own.assigned([tp.partition for tp in partitions])

    def on_revoke(c, partitions):  # type: ignore[no-untyped-def]
        parts = [tp.partition for tp in partitions]
        own.revoked(parts)
        stall = own.take_stall(parts)
        if stall:
            emit("stall", ms=int(stall * 1000))
            time.sleep(stall)
            emit("stall_end")

    def on_lost(c, partitions):  # type: ignore[no-untyped-def]
        own.revoked([tp.partition for tp in partitions], ev="lost")

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        retry_commit = False
        while not stop.requested:
            msgs = consumer.consume(num_messages=500, timeout=0.1)
            recs = []
            for m in msgs:
                if m.error():
                    emit("error", error=str(m.error()))
                    continue
                recs.append([m.partition(), m.offset()])
            if recs:
                emit("records", recs=recs)
            elif not retry_commit:
                continue
            try:
                committed = consumer.commit(asynchronous=False)
                emit("committed", offsets={str(tp.partition): tp.offset for tp in committed or []})
                retry_commit = False
            except KafkaException as e:
                emit("commit_failed", error=str(e))
                # Retried on later polls even without records: after the last batch there may be none.
                retry_commit = "NO_OFFSET" not in str(e)
    finally:
        consumer.close()
        emit("exit")


def main() -> None:
    args = parse_args()
    emit("start", client="confluent-kafka",
         version=f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})")
    produce(args) if args.role == "producer" else consume(args)


if __name__ == "__main__":
    main()
