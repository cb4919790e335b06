"""A Spark standalone cluster on this machine, from the installed pyspark: a master and N workers.

    with standalone.cluster(workers=2, log_dir=Path("build/pipeline/cluster/logs")) as c:
        coordinator-server pipeline all ... --master c.master_url      (or spark-submit --master ...)

Theory of operation. The pip-installed pyspark carries Spark's jars and `bin/spark-class` but not the
`sbin/start-*.sh` daemons' scripts, and those would daemonize anyway, leaving processes nobody owns. So
the master and each worker are `spark-class org.apache.spark.deploy.{master.Master,worker.Worker}`
subprocesses of this one, each in a session (process group) of its own: a worker's executors and their
Python workers are its children in that group, so stopping a daemon is one signal to its group, and
nothing outlives `stop()`. Ctrl-C in a terminal reaches only the foreground group (this process), whose
`finally` then stops the cluster in order.

Ports: the master's RPC and every worker port are 0 (the kernel picks a free one; the master's JSON then
names its `spark://` URL), so only the master's web UI port is chosen here, with Spark's port retries off:
a port taken meanwhile fails the start loudly instead of silently binding the next one, and the start is
retried on another port. A worker counts as up once the master's `/json` lists it ALIVE, which is when
the master will give it executors. Logs: `master.log`, `worker-N.log` and each worker's work directory
(`worker-N/app-*/K/stderr`: the executors' logs) under `log_dir`.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 120.0  # two JVMs starting on a loaded 2-core machine can take a while
STOP_GRACE_S = 15.0
START_ATTEMPTS = 3


class ClusterError(RuntimeError):
    """The cluster did not come up; the message names the log to read."""


def spark_home() -> Path:
    """SPARK_HOME if set, else the pyspark package itself (a pip install holds bin/ and jars/)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def master_command(home: Path, host: str, webui_port: int) -> list[str]:
    return [str(home / "bin" / "spark-class"), MASTER_CLASS, "--host", host, "--port", "0",
            "--webui-port", str(webui_port)]


def worker_command(home: Path, host: str, master_url: str, cores: int, memory: str, work_dir: Path) -> list[str]:
    return [str(home / "bin" / "spark-class"), WORKER_CLASS, "--host", host, "--port", "0", "--webui-port", "0",
            "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir), master_url]


def daemon_env(base: Mapping[str, str], home: Path, host: str, daemon_memory: str) -> dict[str, str]:
    env = dict(base)
    env["SPARK_HOME"] = str(home)
    env["SPARK_LOCAL_IP"] = host  # no lookup of the machine's hostname, no warning about loopback
    env["SPARK_DAEMON_MEMORY"] = daemon_memory  # the master and worker JVMs' heap (not the executors')
    # Fail on a taken web UI port rather than bind the next one, where another master may be listening.
    # No REST submission server: jobs are submitted in client mode, and its fixed port (6066) made a second
    # master on the machine (two test workers, or a user's own) fail to start.
    env["SPARK_DAEMON_JAVA_OPTS"] = (env.get("SPARK_DAEMON_JAVA_OPTS", "")
                                     + " -Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false").strip()
    return env


def alive_workers(status: Mapping[str, Any]) -> int:
    """How many workers the master's `/json` lists as ALIVE (dead ones stay listed for a while)."""
    return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class StandaloneCluster:
    host: str
    webui_port: int
    log_dir: Path
    master_url: str = ""
    daemons: list[_Daemon] = field(default_factory=list)

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def status(self) -> dict[str, Any]:
        """The master's own JSON: url, workers, activeapps, completedapps, ..."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=10) as response:
            status: dict[str, Any] = json.load(response)
            return status

    def stop(self) -> None:
        """Workers first (with their executors), then the master: SIGTERM to each group, SIGKILL after a grace."""
        for daemon in reversed(self.daemons):
            _signal_group(daemon.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for daemon in reversed(self.daemons):
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Executors and Python workers may outlive their worker JVM: the group goes regardless.
            _signal_group(daemon.process, signal.SIGKILL)
            daemon.process.wait()
        self.daemons.clear()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The daemon leads its own group (start_new_session); its pid is the group id even after it exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _spawn(name: str, command: list[str], env: Mapping[str, str], log_dir: Path) -> _Daemon:
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(env), start_new_session=True)
    return _Daemon(name, process, log)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait(cluster: StandaloneCluster, ready: Callable[[dict[str, Any]], Any], what: str,
          deadline: float) -> dict[str, Any]:
    """Poll the master's JSON until `ready(status)`; a daemon that exits meanwhile fails the start."""
    while True:
        for daemon in cluster.daemons:
            if not daemon.alive():
                raise ClusterError(f"{daemon.name} exited with {daemon.process.returncode} while waiting for "
                                   f"{what}; {daemon.log}:\n{_tail(daemon.log)}")
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            status = cluster.status()
            if ready(status):
                return status
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}; logs in {cluster.log_dir}")
        time.sleep(0.5)


def _start_master(home: Path, host: str, log_dir: Path, env: Mapping[str, str], deadline: float) -> StandaloneCluster:
    for attempt in range(START_ATTEMPTS):
        cluster = StandaloneCluster(host, free_port(host), log_dir)
        cluster.daemons.append(_spawn("master", master_command(home, host, cluster.webui_port), env, log_dir))
        try:
            status = _wait(cluster, lambda s: s.get("status") == "ALIVE" and s.get("url"), "the master", deadline)
        except ClusterError:
            cluster.stop()
            if attempt == START_ATTEMPTS - 1 or time.monotonic() > deadline:
                raise
            continue  # most likely its web UI port was taken between free_port() and the bind
        cluster.master_url = status["url"]
        return cluster
    raise AssertionError("unreachable")


def start(workers: int = 1, worker_cores: int = 1, worker_memory: str = "1g", log_dir: Path | None = None,
          host: str = "127.0.0.1", daemon_memory: str = "512m",
          timeout_s: float = START_TIMEOUT_S) -> StandaloneCluster:
    """Start a master and `workers` workers and return once every worker registered with the master."""
    home = spark_home()
    log_dir = Path(log_dir or "spark-standalone-logs").resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    env = daemon_env(os.environ, home, host, daemon_memory)
    deadline = time.monotonic() + timeout_s
    cluster = _start_master(home, host, log_dir, env, deadline)
    try:
        for i in range(workers):
            work_dir = log_dir / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            command = worker_command(home, host, cluster.master_url, worker_cores, worker_memory, work_dir)
            cluster.daemons.append(_spawn(f"worker-{i}", command, env, log_dir))
        _wait(cluster, lambda s: alive_workers(s) >= workers, f"{workers} worker(s) to register", deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def cluster(**kwargs: Any) -> Iterator[StandaloneCluster]:
    """`start(**kwargs)`, and `stop()` however the block ends (an error, Ctrl-C)."""
    running = start(**kwargs)
    try:
        yield running
    finally:
        running.stop()
