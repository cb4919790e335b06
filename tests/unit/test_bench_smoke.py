"""Keeps the benchmark machinery from rotting: a few seconds of each moving part on a tiny scale, no timing
assertions (figures come from `make bench`, never from tests)."""
from __future__ import annotations

import os
from pathlib import Path

from benchmarks import preload, render, scenarios, wire
from benchmarks.procs import Floor, Server, run_json, run_loadgen


def test_floor_and_loadgen_count_heartbeats() -> None:
    floor = Floor(wire.heartbeat_response())
    try:
        frames = scenarios.heartbeat_frames([(preload.group_id(0), 1, preload.member_id(0, m)) for m in range(8)], 2)
        result = run_loadgen("127.0.0.1", floor.port, frames, connections=2, warmup_s=0.2, duration_s=0.5,
                             error_offset=wire.heartbeat_error_offset())
    finally:
        floor.stop()
    assert result["requests"] > 0
    assert result["errors"] == 0


def test_preloaded_members_heartbeat_and_a_small_rebalance(tmp_path: Path) -> None:
    data = tmp_path / "members"
    run_json("benchmarks.preload", "members", str(data), "3", "10", str(scenarios.SESSION_MS))
    srv = Server(data, {"max_session_timeout_ms": scenarios.MAX_SESSION_MS, "initial_rebalance_delay_ms": 0,
                                "topic": "t:1"}).start()
    try:
        members = [(preload.group_id(g), 1, preload.member_id(g, m)) for g in range(3) for m in range(10)]
        result = run_loadgen("127.0.0.1", srv.port, scenarios.heartbeat_frames(members, 2), connections=2,
                             warmup_s=0.2, duration_s=0.5, error_offset=wire.heartbeat_error_offset())
        # The preloaded members are Stable at generation 1: every heartbeat is answered NONE.
        assert result["requests"] > 0 and result["errors"] == 0, result
        rebalance = run_json("benchmarks.members", "rebalance", "127.0.0.1", str(srv.port), "5")
        assert rebalance["members"] == 5 and rebalance["generation"] >= 1
        # The final generation's timeline counts every member synced; on stop every member left the group
        # (a consumer's close()), so later runs on the same server do not carry it.
        assert rebalance["timeline"][str(rebalance["generation"])]["sync"] == 5, rebalance["timeline"]
        assert rebalance["left"] == 5
        topic = "t"
        commit = run_loadgen("127.0.0.1", srv.port, [[wire.commit_frame("c", topic, 1)]], connections=1,
                             warmup_s=0.1, duration_s=0.3, error_offset=wire.commit_error_offset(topic))
        assert commit["requests"] > 0 and commit["errors"] == 0, commit["first_error"]
    finally:
        assert srv.stop() == 0


def test_recovery_log_compacts_and_renders(tmp_path: Path) -> None:
    data = tmp_path / "commits"
    written = run_json("benchmarks.preload", "commits", str(data), "2000", "100")
    assert written["records"] == 2000
    compacted = run_json("benchmarks.compact", str(data))
    assert compacted["bytes_after"] <= compacted["bytes_before"]
    res = {"rebalance": [{"members": 500, "seconds": 0.1}, {"members": 5000, "seconds": 1.0}],
           "empty_server": {"rss_bytes": 1 << 20}}
    assert "rebalance growth" in render.table(res)
    render.plot(res, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_loadgen_sends_each_connection_to_its_own_address() -> None:
    # The cluster scenario's commits: each committer talks to its own group's coordinator.
    floors = [Floor(wire.heartbeat_response()) for _ in range(2)]
    try:
        frames = scenarios.heartbeat_frames([(preload.group_id(0), 1, preload.member_id(0, m)) for m in range(4)], 2)
        result = run_loadgen("127.0.0.1", -1, frames, connections=2, warmup_s=0.2, duration_s=0.5,
                             error_offset=wire.heartbeat_error_offset(),
                             addresses=[("127.0.0.1", f.port) for f in floors])
    finally:
        for f in floors:
            f.stop()
    assert result["requests"] > 0 and result["errors"] == 0


def test_cluster_rows_render_figures_and_a_failure() -> None:
    commit = {"rps": 100.0, "p50_us": 1000.0, "errors": 0, "first_error": None}
    res = {"cluster": {
        "commits": [{"committers": 16, "single": {**commit, "rps": 400.0}, "cluster": commit, "cluster_vs_single": 0.25}],
        "failover": {"groups": 1000, "moved": 340, "seconds": 4.5, "first_s": 3.1, "p50_s": 3.6, "rejoins": 0,
                     "zookeeper_session_timeout_ms": 3000, "partitions_moved": 17, "partition_load_s_max": 0.05,
                     "partition_load_s_median": 0.01}}}
    table = render.table(res)
    assert "| cluster failover, 1,000 groups | 4.50 s" in table
    assert "| cluster failover, partition load on the new leader | 50 ms" in table
    assert "| replicated commits (3 nodes, RF 3, min ISR 2) vs single node, 16 committers | 100/s" in table
    assert "0.25x" in table
    assert render.figures(res)["replicated_commits_vs_single"] == {"16": 0.25}
    assert "failed: RuntimeError('no ZooKeeper')" in render.table({"cluster": {"error": "RuntimeError('no ZooKeeper')"}})


def test_consumer_group_scenario_converges_and_renders() -> None:
    from benchmarks import consumer_groups

    res = {"assignor": consumer_groups.assignor([10, 50], 200, repeats=1),
           "converge": consumer_groups.converge(50, 200), "kafka_uniform_5000_ms": 1.7}
    assert res["converge"]["converged"] and res["converge"]["rounds"] <= 3
    assert (res["converge"]["share_min"], res["converge"]["share_max"]) == (3, 4)
    rows = render.consumer_rows(res)
    assert len(rows) == 3 and "KIP-848 convergence" in rows[-1]


def test_pipeline_replay_side_counts_every_record_and_the_rows_render(tmp_path: Path) -> None:
    """The replay half of the `pipeline` scenario on a small log (the decode half needs Spark: the bench
    runs it), its CPU measured; then the rows, the 0.5x target and `--merge-into` on made-up figures."""
    from benchmarks import pipeline, run

    data = tmp_path / "commits"
    run_json("benchmarks.preload", "commits", str(data), "2000", "100")
    replay = run_json("benchmarks.pipeline", "replay", str(data))
    assert replay["records"] == 2000 and replay["cpu_s"] > 0
    assert pipeline.tree_cpu_s(os.getpid()) > 0
    decode = {"cpu_s": 4.0, "wall_s": 2.0, "tasks": 4, "cores": 2}
    logs = [{"records": n, "bytes": n * 80, "segments": 400, "replay": {"cpu_s": 1.0}, "decode": decode,
             "replay_records_per_cpu_s": n / 1.0, "decode_records_per_cpu_s": n / 4.0, "decode_records_per_s": n / 2.0,
             "decode_vs_replay": ratio} for n, ratio in ((2_000_000, 0.25), (20_000_000, 0.6))]
    split = {"records": 2_000_000, "segment_bytes": 151 << 20, "split_s": 2.0, "whole_s": 3.0, "split_tasks": 4,
             "whole_tasks": 1, "split_speedup": 1.5}
    later = {"pipeline": {"logs": logs, "split": split}, "date": "d", "machine": {"git": "abc"}, "total_seconds": 9}
    merged = run.merge({"e2e": {"records_per_s": 1.0, "consumed": 1, "records": 1}}, later, ["pipeline"])
    table = render.table(merged)
    assert "| 0.25x | ≥ 0.5x: **not met** |" in table and "| 0.60x | ≥ 0.5x: met |" in table
    assert "split | 2.0 s (4 tasks) | read whole: 3.0 s (1 task) | 1.50x |" in table and "end to end" in table
    assert render.figures(merged)["pipeline_vs_replay"] == {"2000000": 0.25, "20000000": 0.6}
    assert "The pipeline rows are from a later run, of d at commit abc" in render._merged(merged)


def test_rebalance_cpu_in_process_completes_a_rebalance() -> None:
    out = run_json("benchmarks.rebalance_cpu", "20", "--repeat", "2")
    assert out["members"] == 20 and len(out["runs"]) == 2
    assert all(r["server_cpu_s"] > 0 and r["members_cpu_s"] > 0 for r in out["runs"])


def test_commit_cpu_in_process_answers_commits() -> None:
    out = run_json("benchmarks.commit_cpu", "4", "0.3", "--fsync", "never")
    assert out["committers"] == 4 and out["fsync"] == "never" and out["commits_per_s"] > 0
    assert out["server_cpu_us_per_commit"] > 0 and out["commits_per_round"] >= 1


def test_commit_floor_answers_what_the_server_answers() -> None:
    # The floor's canned commit answer is byte for byte the server's own (net/apis/offset_commit.py),
    # so the commit floor row compares like with like.
    from coordinator_server.net.apis.offset_commit import offset_commit_response_frame, parse_offset_commit

    frame = wire.commit_frame("g", "bench-topic", 7, correlation_id=42)
    req = parse_offset_commit(bytes(frame[4:]))
    assert req is not None
    assert offset_commit_response_frame(req, {("bench-topic", 0): 0}) == wire.commit_response("bench-topic", correlation_id=42)
    res = {"commits": [{"fsync": fsync, "committers": n, "rps": rps, "server_cpu_us_per_request": 20.0}
                       for fsync, n, rps in (("always", 1, 1000.0), ("always", 128, 12000.0),
                                             ("never", 1, 5000.0), ("never", 128, 30000.0))],
           "commit_floor": {"committers": 128, "rps": 40000.0, "p50_us": 900.0, "server_cpu_us_per_request": 6.0}}
    rows = render.table(res)
    assert "| group commit ceiling: the floor's 128 committers vs 1 durable committer | 40.0x |" in rows
    assert "durable: 0.30x the floor; 20x asks 0.50x" in rows


def test_durable_floor_writes_each_commit_before_answering_it(tmp_path: Path) -> None:
    # Every commit answered was written to one of the floor's partition files first (the answers wait for
    # a syncfs that started after the write), and the rows render against the server's.
    data = tmp_path / "durable-floor"
    floor = Floor(wire.commit_response(scenarios.COMMIT_TOPIC), "durable", data)
    frames = [[wire.commit_frame(f"committer-{c}", scenarios.COMMIT_TOPIC, o, correlation_id=o) for o in range(4)]
              for c in range(6)]
    try:
        result = run_loadgen("127.0.0.1", floor.port, frames, connections=6, warmup_s=0.0, duration_s=0.5,
                             error_offset=wire.commit_error_offset(scenarios.COMMIT_TOPIC))
    finally:
        floor.stop()
    assert result["requests"] > 0 and result["errors"] == 0
    written = sum(f.stat().st_size for f in data.glob("*.log"))
    assert written >= result["requests"] * min(len(f) for row in frames for f in row)
    assert len([f for f in data.glob("*.log") if f.stat().st_size > 0]) == 6  # one partition per connection

    res = {"commits": [{"fsync": fsync, "committers": n, "rps": rps, "server_cpu_us_per_request": 20.0}
                       for fsync, n, rps in (("always", 1, 2000.0), ("always", 128, 16000.0),
                                             ("never", 1, 5000.0), ("never", 128, 30000.0))],
           "durable_floor": [{"committers": n, "rps": rps, "p50_us": 150.0, "server_cpu_us_per_request": 16.0}
                             for n, rps in ((1, 6000.0), (128, 48000.0))]}
    rows = render.table(res)
    assert "| durable floor (write + syncfs, canned answer), 128 committers | 48,000/s, p50 150 µs" in rows
    assert "| durable floor group commit: 128 vs 1 committer | 8.0x |" in rows
    assert "| durable commits, 128 committers, x durable floor | 0.33x |" in rows
    assert "20x one durable committer asks 0.83x" in rows
