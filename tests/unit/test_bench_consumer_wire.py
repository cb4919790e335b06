"""Keeps the KIP-848 wire driver from rotting: a handful of members on a tiny topic converge, are heartbeated
by the load generator and leave; the rows render a figure, a cut-off and a failure. No timing assertions."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks import consumer_wire, render
from benchmarks.procs import Server, run_json


def test_members_converge_heartbeat_and_leave(tmp_path: Path) -> None:
    flags = dict(consumer_wire.SERVER_FLAGS, topic="t:12")
    srv = Server(tmp_path / "data", flags).start()
    try:
        spec = {"host": "127.0.0.1", "port": srv.port, "pid": srv.pid, "members": 5, "topic": "t", "partitions": 12,
                "assignor": consumer_wire.ASSIGNOR, "cutoff_s": 30.0,
                "steady": {"warmup_s": 0.2, "duration_s": 0.5, "connections": 2},
                "session_timeout_ms": consumer_wire.SESSION_TIMEOUT_MS}
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        out = run_json("benchmarks.consumer_members", str(tmp_path / "spec.json"), timeout_s=120)
    finally:
        assert srv.stop() == 0
    assert out["converged"], out
    assert out["describe"]["holding_target"] == 5 and out["describe"]["group_epoch"] == out["epoch"]
    assert out["worst_overlap"] == 0 and out["worst_live_overlap"] == 0 and out["rejoins"] == 0 and out["heartbeat_interval_ms"] == 1000
    assert out["steady"]["requests"] > 0 and out["steady"]["errors"] == 0
    assert out["left"] == 5


def test_rows_show_a_cut_off_against_kafka_and_a_failure() -> None:
    converged = {"members": 200, "converged": True, "seconds": 2.0, "cutoff_s": 120.0, "epoch": 201, "rejoins": 0,
                 "worst_overlap": 0, "server_cpu_s": 1.0,
                 "steady": {"ok_rps": 40_000.0, "p50_us": 700.0, "p99_us": 2000.0, "server_cpu_us_per_ok": 30.0}}
    cut_off = {"members": 200, "converged": False, "seconds": None, "cutoff_s": 120.0, "epoch": 150, "rejoins": 3,
               "worst_overlap": 40, "worst_live_overlap": 0, "max_latency_s": 50.0, "server_cpu_s": 100.0, "holding": 20, "joined": 190,
               "describe": {"holding_target": 17}}
    rows = render.consumer_wire_rows({"topic_partitions": 1000, "kafka_version": "4.4.0", "server": [cut_off],
                                      "kafka": [converged], "errors": [{"part": "kafka 1000", "error": "Boom('x')"}]})
    text = "\n".join(rows)
    assert "did not converge in 120 s: 17 of 200 members hold their target" in text
    assert "worst overlap 40 partitions (0 while the earlier holder's session was alive)" in text
    assert "< 0.02x (cut off)" in text and "failed: Boom('x')" in text and "40,000/s error-0" in text
    assert all(row.count("|") == 7 for row in rows)
