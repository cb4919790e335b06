"""`make cluster` / `make cluster-down`: ZooKeeper and three coordinator nodes on 127.0.0.1 (docs/cluster.md).

    python scripts/cluster.py up [--dir build/cluster] [--base-port 9092] [--nodes 3]
    python scripts/cluster.py down [--dir build/cluster]

`up` starts ZooKeeper (Debian's package, via coordinator_server/tools/local_zookeeper.py) and the nodes in the
background, each with its data directory and log file under --dir, waits until every node listens and
`__consumer_offsets` has a leader for every partition, and prints where everything is. `down` stops the
nodes with SIGTERM (a controlled shutdown each) and then ZooKeeper. What was started is kept in
<dir>/cluster.json, so `down` stops exactly that.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from coordinator_server.tools.local_zookeeper import LocalZooKeeper
from tests.integration.group_client import Connection

STATE = "cluster.json"


def up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    if (root / STATE).exists() and any(_alive(p) for p in json.loads((root / STATE).read_text())["pids"]):
        print(f"a cluster is already running from {root} (make cluster-down first)", file=sys.stderr)
        return 1
    root.mkdir(parents=True, exist_ok=True)
    zk = LocalZooKeeper.start(root / "zookeeper", args.zookeeper_port)
    connect = f"{zk.connect_string}/coordinator"
    pids = [zk.proc.pid]
    nodes = []
    for i in range(args.nodes):
        port = args.base_port + i
        log_path = root / f"node-{i}.log"
        cmd = [sys.executable, "-m", "coordinator_server", "--node-id", str(i), "--host", "127.0.0.1",
               "--port", str(port), "--data-dir", str(root / f"node-{i}"), "--zookeeper-connect", connect,
               "--offsets-replication-factor", str(min(3, args.nodes)),
               "--min-insync-replicas", str(min(2, args.nodes)),
               "--default-replication-factor", str(min(3, args.nodes)), "--log-format", "json"]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        pids.append(proc.pid)
        nodes.append({"node_id": i, "port": port, "pid": proc.pid, "log": str(log_path),
                      "data_dir": str(root / f"node-{i}")})
    (root / STATE).write_text(json.dumps({"pids": pids, "zookeeper": zk.connect_string, "nodes": nodes}))
    deadline = time.monotonic() + 60
    for node in nodes:
        while '"listening"' not in Path(node["log"]).read_text(errors="replace"):
            if time.monotonic() > deadline or not _alive(node["pid"]):
                print(f"node {node['node_id']} did not start; see {node['log']}", file=sys.stderr)
                down(args)
                return 1
            time.sleep(0.2)
    while not _coordinators_ready(nodes[0]["port"]):
        if time.monotonic() > deadline:
            print("__consumer_offsets has no leaders after 60 s; see the node logs", file=sys.stderr)
            return 1
        time.sleep(0.2)
    print(f"zookeeper    {connect}   (log {zk.log_path})")
    for node in nodes:
        print(f"node {node['node_id']}       127.0.0.1:{node['port']}   data {node['data_dir']}   log {node['log']}")
    bootstrap = ",".join(f"127.0.0.1:{n['port']}" for n in nodes)
    print(f"bootstrap.servers={bootstrap}")
    print(f"status with: .venv/bin/coordinator-server cluster status --bootstrap-server {bootstrap}")
    print("stop with: make cluster-down")
    return 0


def _coordinators_ready(port: int) -> bool:
    try:
        conn = Connection(("127.0.0.1", port), "make-cluster")
        try:
            resp = conn.call(FindCoordinatorRequest[3](key="make-cluster-probe", key_type=0), FindCoordinatorResponse,
                             timeout_s=5)
        finally:
            conn.close()
    except OSError:
        return False
    return resp.error_code == 0


def down(args: argparse.Namespace) -> int:
    state_path = Path(args.dir).resolve() / STATE
    if not state_path.exists():
        print(f"no cluster state in {state_path.parent}", file=sys.stderr)
        return 0
    state = json.loads(state_path.read_text())
    zk_pid, node_pids = state["pids"][0], state["pids"][1:]
    for pid in node_pids:  # nodes first (each one a controlled shutdown), ZooKeeper last
        _stop(pid, 30)
    _stop(zk_pid, 10)
    state_path.unlink()
    print("cluster stopped")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(pid: int, grace_s: float) -> None:
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--dir", default="build/cluster")
    parser.add_argument("--base-port", type=int, default=9092)
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    return up(args) if args.command == "up" else down(args)


if __name__ == "__main__":
    sys.exit(main())
