"""kafka-python driver: KafkaConsumer with a ConsumerRebalanceListener, commit after each processed batch."""
from __future__ import annotations

import logging
import os
import sys
import time
import traceback
import warnings

warnings.filterwarnings("ignore")  # kafka-python 3.0.12's importlib.resources deprecations, on stderr

import kafka  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.consumer.subscription_state import ConsumerRebalanceListener  # noqa: E402
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor  # noqa: E402
from kafka.coordinator.assignors.range import RangePartitionAssignor  # noqa: E402
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # noqa: E402
from kafka.errors import KafkaError  # noqa: E402

from tests.client_contract import kafka_python_subscribe  # noqa: E402
from tests.interop.drivers.common import Ownership, Stop, emit, parse_args  # noqa: E402

ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
             "cooperative-sticky": CooperativeStickyAssignor}


class Listener(ConsumerRebalanceListener):
    def __init__(self, own: Ownership, consumer: KafkaConsumer) -> None:
        self.own = own
        self.consumer = consumer

    def _generation(self) -> int | None:
        try:
            return int(self.consumer._coordinator._generation.generation_id)  # private, informative only
        except Exception:
            return None

    def on_partitions_revoked(self, revoked):  # type: ignore[no-untyped-def]
        parts = [tp.partition for tp in revoked]
        self.own.revoked(parts)
        stall = self.own.take_stall(parts)
        if stall:
            emit("stall", ms=int(stall * 1000))
            time.sleep(stall)
            emit("stall_end")

    def on_partitions_assigned(self, assigned):  # type: ignore[no-untyped-def]
        self.own.assigned([tp.partition for tp in assigned], generation=self._generation())

    def on_partitions_lost(self, lost):  # type: ignore[no-untyped-def]
        self.own.revoked([tp.partition for tp in lost], ev="lost")


def produce(args) -> None:  # type: ignore[no-untyped-def]
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, linger_ms=5)
    futures = [producer.send(args.topic, value=b"v%d" % i) for i in range(args.count)]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    producer.close()
    emit("produced", count=args.count)


def consume(args) -> None:  # type: ignore[no-untyped-def]
    stop = Stop()
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id or "kafka-python",
        group_instance_id=args.instance_id, enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.rebalance_timeout_ms, partition_assignment_strategy=(ASSIGNORS[args.assignor],),
        metadata_max_age_ms=5000, reconnect_backoff_max_ms=500,
    )
    own = Ownership(args.stall_revoke_ms)
    # Subscribe, then metadata: the order that keeps the leader from rejoining after its first assignment,
    # the precondition of kafka-python 3.0.12's lost-join hang (tests/client_contract.py says why).
    kafka_python_subscribe(consumer, [args.topic], Listener(own, consumer))
    try:
        # A commit that failed (a rebalance in between) is retried on the next poll even if that poll
        # brings no records: after the last batch there may be none, and the positions must still land.
        retry_commit = False
        failing_since: float | None = None
        while not stop.requested:
            # kafka-python 3.0.12 can raise a connection error out of poll() while every broker is down
            # (seen once on CI in the server-restart scenario: ECONNREFUSED during the restart window).
            # An application keeps polling through an outage; so does this driver, for up to a minute.
            try:
                batches = consumer.poll(timeout_ms=500)
                failing_since = None
            except KafkaError as e:
                emit("poll_error", error=repr(e), retriable=bool(getattr(e, "retriable", False)),
                     trace=traceback.format_exc(limit=12))
                failing_since = failing_since or time.monotonic()
                if not getattr(e, "retriable", False) or time.monotonic() - failing_since > 60:
                    raise
                time.sleep(0.2)
                continue
            recs = [[tp.partition, m.offset] for tp, msgs in batches.items() for m in msgs]
            if recs:
                emit("records", recs=recs)
            elif not retry_commit:
                continue
            try:
                consumer.commit()  # the positions consumed so far, synchronously
                emit("committed", offsets={str(tp.partition): consumer.position(tp)
                                           for tp in consumer.assignment()})
                retry_commit = False
            except Exception as e:
                emit("commit_failed", error=repr(e))
                retry_commit = True
    finally:
        consumer.close(autocommit=False)
        emit("exit")


def main() -> None:
    args = parse_args()
    if args.debug or os.environ.get("INTEROP_CLIENT_DEBUG"):
        logging.basicConfig(stream=sys.stderr, level=logging.DEBUG,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
        logging.getLogger("kafka").setLevel(logging.DEBUG)
    emit("start", client="kafka-python", version=kafka.__version__)
    produce(args) if args.role == "producer" else consume(args)


if __name__ == "__main__":
    main()
