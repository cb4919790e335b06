"""kcat driver: `kcat -G group topic` (balanced consumer, librdkafka underneath) with `-J` JSON records.

kcat reports its rebalances on stderr ("% Group g rebalanced (memberid ...): assigned: t [0], t [1]",
or with the COOPERATIVE protocol "...: incremental assignment of 2 partition(s) (...): t [0], t [1]");
this wrapper turns them and the `-J` records into the common JSON lines. Offsets are auto-committed
by librdkafka every 200 ms (kcat has no manual commit). SIGTERM is forwarded: kcat closes the consumer
(LeaveGroup). Run it in its own process group so that kill -9 of the group takes kcat with it.
"""
from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
from typing import IO, Any

from tests.interop.drivers.common import Ownership, emit, parse_args

REBALANCE = re.compile(r"% Group \S+ rebalanced")
PARTITION = re.compile(r"\[(\d+)\]")


def kcat_version() -> str:
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"Version (\S+) \(.*librdkafka (\S+)", out)
    return f"{m.group(1)} (librdkafka {m.group(2)})" if m else "unknown"


def forward_signals(proc: subprocess.Popen[Any]) -> None:
    def handler(signum: int, _frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def props(args) -> list[str]:  # type: ignore[no-untyped-def]
    x = {"reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 5000}
    if args.debug:
        x["debug"] = args.debug
    return [a for k, v in x.items() for a in ("-X", f"{k}={v}")]


def produce(args) -> None:  # type: ignore[no-untyped-def]
    data = "".join(f"v{i}\n" for i in range(args.count))
    subprocess.run(["kcat", "-P", "-b", args.bootstrap, "-t", args.topic, "-X", "linger.ms=5", *props(args)],
                   input=data, text=True, check=True, timeout=60)
    emit("produced", count=args.count)


def read_records(stream: IO[str]) -> None:
    for line in stream:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        emit("records", recs=[[m["partition"], m["offset"]]])


def read_rebalances(stream: IO[str], own: Ownership) -> None:
    for line in stream:
        sys.stderr.write(line)  # kept for the test's failure report
        if not REBALANCE.search(line):
            continue
        head, _, tail = line.partition("):")
        if "protocol" in tail.split(":", 1)[0]:  # cooperative: "(memberid ..., COOPERATIVE rebalance protocol): t [0]"
            tail = tail.split("):", 1)[-1]
        parts = [int(p) for p in PARTITION.findall(tail)]
        if "revoke" in head or "revoked" in tail.split(":", 1)[0]:
            own.revoked(parts)
        elif "assign" in head or "assigned" in tail.split(":", 1)[0]:
            own.assigned(parts)
    sys.stderr.flush()


def consume(args) -> None:  # type: ignore[no-untyped-def]
    if args.stall_revoke_ms:
        raise SystemExit("kcat has no rebalance callback to stall in (the test uses SIGSTOP)")
    x = {
        "partition.assignment.strategy": args.assignor, "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "max.poll.interval.ms": max(args.rebalance_timeout_ms, args.session_timeout_ms),
        "auto.offset.reset": "earliest", "enable.auto.commit": "true", "auto.commit.interval.ms": 200,
        "client.id": args.client_id or "kcat",
    }
    if args.instance_id:
        x["group.instance.id"] = args.instance_id
    argv = ["kcat", "-b", args.bootstrap, "-G", args.group, "-J", "-u", *props(args)]
    argv += [a for k, v in x.items() for a in ("-X", f"{k}={v}")]
    argv.append(args.topic)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    forward_signals(proc)
    own = Ownership()
    # The rebalance callback's own stderr lines: kcat changes them between eager and cooperative.
    # Eager:       "... rebalanced (memberid X): assigned: t [0], t [1]"  /  "...: revoked: t [0]"
    # Cooperative: "... rebalanced: incremental assignment of 2 partition(s) (memberid X, ...): t [0], t [1]"
    threads = [threading.Thread(target=read_records, args=(proc.stdout,), daemon=True),
               threading.Thread(target=read_rebalances, args=(proc.stderr, own), daemon=True)]
    for t in threads:
        t.start()
    code = proc.wait()
    for t in threads:
        t.join(5)
    emit("exit", code=code)


def main() -> None:
    args = parse_args()
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not installed (make interop-deps)")
    emit("start", client="kcat", version=kcat_version())
    produce(args) if args.role == "producer" else consume(args)


if __name__ == "__main__":
    main()
