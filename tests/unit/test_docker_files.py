"""docker/: the Dockerfile, docker-compose.yml, healthcheck.py, demo.py, prometheus.yml and Grafana's
provisioning and dashboard, checked against the code.

No Docker engine runs here, so the files are parsed and compared with what the server accepts: every
COORDINATOR_* variable is one `coordinator_server.config` knows, paths and ports agree between the files,
the image runs as non-root with a healthcheck, the healthcheck itself passes against a live server and
fails against a closed port, Prometheus scrapes the metrics port the server is given, and the dashboard
only queries metrics `coordinator_server.metrics` exports. (The demo script runs against a real server in
tests/integration/test_metrics_endpoint.py.) docker-compose.yml is read with PyYAML when it is installed,
otherwise with a small parser for the block-style YAML subset the file is written in.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator_server import metrics
from coordinator_server.config import _OPTIONS, Config, load_config

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "docker-compose.yml"
HEALTHCHECK = DOCKER / "healthcheck.py"
DEMO = DOCKER / "demo.py"
PROMETHEUS = DOCKER / "prometheus.yml"
GRAFANA = DOCKER / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "coordinator.json"
SERVICE = "coordinator"
DEMO_SERVICES = ("producer", "consumer")
# The `cluster` profile (docs/cluster.md): ZooKeeper and three nodes, started only with --profile cluster.
CLUSTER_PROFILE = "cluster"
ZOOKEEPER = "zookeeper"
CLUSTER_NODES = ("coordinator-1", "coordinator-2", "coordinator-3")
ZOOKEEPER_CLIENT_PORT = 2181  # the official image's clientPort

KNOWN_ENV = {"COORDINATOR_" + attr.upper() for _flag, attr, _typ, _help in _OPTIONS} | {"COORDINATOR_TOPIC"}


# ------------------------------------------------------------------------------------------ parsers


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        instruction, _, args = full.partition(" ")
        out.append((instruction.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def exec_form_or_words(args: str) -> list[str]:
    if args.startswith("["):
        value = json.loads(args)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return shlex.split(args)


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in instructions:
        if instruction == "ENV":
            for word in shlex.split(args):
                key, sep, value = word.partition("=")
                assert sep, f"use ENV KEY=VALUE, not {word!r}"
                env[key] = value
    return env


def _scalar(text: str) -> Any:
    text = text.strip()
    if text == "" or text in ("~", "null"):
        return None
    if text[0] in "\"'":
        assert text[-1] == text[0], f"unterminated string {text!r}"
        return text[1:-1]
    return text


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def parse_simple_yaml(text: str) -> Any:
    """Block mappings, block sequences and plain or quoted scalars: the subset docker-compose.yml uses."""
    lines: list[tuple[int, str]] = []
    for raw in text.splitlines():
        assert "\t" not in raw, "tabs are not valid YAML indentation"
        line = _strip_comment(raw)
        if line.strip():
            lines.append((len(line) - len(line.lstrip(" ")), line.strip()))

    def block(i: int, indent: int) -> tuple[Any, int]:
        if lines[i][1].startswith("- "):
            items: list[Any] = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                items.append(_scalar(lines[i][1][2:]))
                i += 1
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and lines[i][0] == indent:
            key, sep, rest = lines[i][1].partition(":")
            assert sep and not key.startswith("- "), f"unsupported YAML line {lines[i][1]!r}"
            i += 1
            if rest.strip():
                mapping[_scalar(key)] = _scalar(rest)
            elif i < len(lines) and lines[i][0] > indent:
                mapping[_scalar(key)], i = block(i, lines[i][0])
            elif i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                mapping[_scalar(key)], i = block(i, indent)  # a sequence may sit at its key's indent
            else:
                mapping[_scalar(key)] = None
        return mapping, i

    value, end = block(0, lines[0][0])
    assert end == len(lines), f"could not parse YAML from line {lines[end][1]!r}"
    return value


def load_compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def load_yaml(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:
        data = parse_simple_yaml(text)
    else:
        data = yaml.safe_load(text)
    assert isinstance(data, dict), path
    return data


# --------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def instructions() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def service(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"][SERVICE]


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the "- KEY=VALUE" form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def single(instructions: list[tuple[str, str]], name: str) -> str:
    found = [args for instruction, args in instructions if instruction == name]
    assert len(found) == 1, f"expected one {name}, found {found}"
    return found[0]


# ------------------------------------------------------------------------------ the simple parser


def test_simple_yaml_parser_handles_the_compose_subset() -> None:
    text = """
# comment
a:
  b: "x # not a comment"   # a comment
  list:
    - "1:2"
    - plain
  seq_at_key_indent:
  - one
  empty:
top: 'q'
"""
    assert parse_simple_yaml(text) == {
        "a": {"b": "x # not a comment", "list": ["1:2", "plain"], "seq_at_key_indent": ["one"], "empty": None},
        "top": "q",
    }


# ----------------------------------------------------------------------------------- Dockerfile


def test_dockerfile_base_user_and_entrypoint(instructions: list[tuple[str, str]]) -> None:
    base = single(instructions, "FROM")
    assert base.startswith("python:3.11-slim"), base
    user = single(instructions, "USER").split(":")[0]
    assert user not in ("root", "0", ""), user
    # The USER must come after every RUN that needs root, i.e. be the last RUN-relevant switch.
    names = [i for i, _ in instructions]
    assert names.index("USER") > max(idx for idx, n in enumerate(names) if n == "RUN")
    assert exec_form_or_words(single(instructions, "ENTRYPOINT")) == ["coordinator-server"]


def test_dockerfile_env_is_accepted_by_the_config(instructions: list[tuple[str, str]]) -> None:
    env = dockerfile_env(instructions)
    coordinator_env = {k: v for k, v in env.items() if k.startswith("COORDINATOR_")}
    assert set(coordinator_env) <= KNOWN_ENV, set(coordinator_env) - KNOWN_ENV
    config = load_config([], coordinator_env)
    assert (config.host, config.data_dir, config.log_format) == ("0.0.0.0", "/var/lib/coordinator", "json")
    assert config.metrics_port == 9404  # the image serves /metrics by default


def test_dockerfile_volume_expose_and_data_dir_agree(instructions: list[tuple[str, str]]) -> None:
    config = load_config([], dockerfile_env(instructions))
    assert exec_form_or_words(single(instructions, "VOLUME")) == [config.data_dir]
    exposed = [int(p.split("/")[0]) for p in single(instructions, "EXPOSE").split()]
    assert exposed == [config.port, config.metrics_port] == [9092, 9404]


def test_dockerfile_healthcheck_runs_the_script(instructions: list[tuple[str, str]]) -> None:
    args = single(instructions, "HEALTHCHECK")
    assert "CMD" in args.split(), args
    command = exec_form_or_words(args.split("CMD", 1)[1].strip())
    # The script the HEALTHCHECK runs is the one copied from docker/healthcheck.py.
    copies = [exec_form_or_words(a) for i, a in instructions if i == "COPY"]
    assert ["docker/healthcheck.py", command[-1]] in [c[-2:] for c in copies], (command, copies)


def test_dockerfile_copy_sources_exist(instructions: list[tuple[str, str]]) -> None:
    copies = [exec_form_or_words(a) for i, a in instructions if i in ("COPY", "ADD")]
    assert copies
    for words in copies:
        if any(w.startswith("--from") for w in words):
            continue  # from another stage, not the build context
        sources = [w for w in words[:-1] if not w.startswith("--")]
        assert sources, words
        for source in sources:
            assert (REPO / source).exists(), f"COPY source {source} is not in the repository"
    copied = {s for words in copies for s in words[:-1]}
    assert {"pyproject.toml", "README.md"} <= copied  # pyproject's readme must be there to build


# ------------------------------------------------------------------------------- docker-compose


def test_compose_builds_from_the_dockerfile_with_the_repo_as_context(service: dict[str, Any]) -> None:
    build = service["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE.resolve()


def test_compose_env_is_accepted_by_the_config(service: dict[str, Any], instructions: list[tuple[str, str]]) -> None:
    env = compose_env(service)
    assert env, "the service sets no environment"
    unknown = {k for k in env if k not in KNOWN_ENV}
    assert not unknown, f"not COORDINATOR_* variables the server reads: {unknown}"
    config = load_config([], {**dockerfile_env(instructions), **env})
    assert config.advertised_host == SERVICE  # clients on the compose network reach the service name


def test_compose_volume_and_port_match_the_image(compose: dict[str, Any], service: dict[str, Any],
                                                 instructions: list[tuple[str, str]]) -> None:
    config = load_config([], {**dockerfile_env(instructions), **compose_env(service)})
    mounts = [str(v).split(":") for v in service["volumes"]]
    assert [m[1] for m in mounts] == [config.data_dir]
    named = mounts[0][0]
    assert not named.startswith((".", "/")), "the data should live on a named volume"
    assert named in (compose.get("volumes") or {})
    ports = [str(p) for p in service["ports"]]
    assert [p.split(":")[-1] for p in ports] == [str(config.port), str(config.metrics_port)]
    exposed = single(instructions, "EXPOSE").split()
    assert [p.split("/")[0] for p in exposed] == [str(config.port), str(config.metrics_port)]
    # Every named volume any service mounts is declared; bind mounts point at files in docker/.
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes") or []:
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in (compose.get("volumes") or {}), f"{name} mounts undeclared volume {source}"


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {SERVICE, *DEMO_SERVICES, "prometheus", "grafana", ZOOKEEPER, *CLUSTER_NODES}
    # `docker compose up` (no profile) starts what it always did; the cluster only with --profile cluster.
    assert {n for n, s in services.items() if not s.get("profiles")} == {SERVICE, *DEMO_SERVICES, "prometheus",
                                                                        "grafana"}
    assert {n for n, s in services.items() if s.get("profiles")} == {ZOOKEEPER, *CLUSTER_NODES}
    assert all(list(services[n]["profiles"]) == [CLUSTER_PROFILE] for n in (ZOOKEEPER, *CLUSTER_NODES))


def test_compose_zookeeper(compose: dict[str, Any]) -> None:
    zookeeper = compose["services"][ZOOKEEPER]
    assert str(zookeeper["image"]).startswith("zookeeper:3.8")
    # The nodes wait for it to be healthy: `zkServer.sh status` answers once the server serves.
    assert [str(w) for w in zookeeper["healthcheck"]["test"]] == ["CMD", "zkServer.sh", "status"]
    assert not zookeeper.get("ports"), "only the compose network needs ZooKeeper"


def _node_config(compose: dict[str, Any], name: str, instructions: list[tuple[str, str]]) -> Config:
    return load_config([], {**dockerfile_env(instructions), **compose_env(compose["services"][name])})


@pytest.mark.parametrize("name", CLUSTER_NODES)
def test_compose_cluster_node_env_is_accepted_by_the_config(compose: dict[str, Any], service: dict[str, Any],
                                                            instructions: list[tuple[str, str]], name: str) -> None:
    node = compose["services"][name]
    env = compose_env(node)
    unknown = {k for k in env if k not in KNOWN_ENV}
    assert not unknown, f"not COORDINATOR_* variables the server reads: {unknown}"
    config = _node_config(compose, name, instructions)
    assert config.advertised_host == name  # brokers and clients on the compose network reach the service name
    assert config.zookeeper_connect is not None
    hosts, _, _chroot = config.zookeeper_connect.partition("/")
    assert hosts == f"{ZOOKEEPER}:{ZOOKEEPER_CLIENT_PORT}"
    assert (config.offsets_replication_factor, config.min_insync_replicas) == (3, 2)
    # The same image as the single server, built the same way.
    assert (node["image"], node["build"]) == (service["image"], service["build"])
    assert node["depends_on"][ZOOKEEPER]["condition"] == "service_healthy"
    mounts = [str(v).split(":") for v in node["volumes"]]
    assert [m[1] for m in mounts] == [config.data_dir]
    assert not node.get("ports"), "the nodes advertise service names, which resolve only on the compose network"


def test_compose_cluster_nodes_form_one_cluster(compose: dict[str, Any], instructions: list[tuple[str, str]]) -> None:
    configs = [_node_config(compose, name, instructions) for name in CLUSTER_NODES]
    assert len({c.node_id for c in configs}) == len(CLUSTER_NODES)  # distinct broker ids
    assert len({c.zookeeper_connect for c in configs}) == 1  # one ZooKeeper, one chroot
    # Enough nodes for __consumer_offsets to be created, and an ISR that survives losing one of them.
    assert all(c.offsets_replication_factor <= len(CLUSTER_NODES) for c in configs)
    assert all(c.min_insync_replicas < c.offsets_replication_factor for c in configs)
    # Each node has its own data volume (the server locks its data directory).
    volumes = [str(v).split(":")[0] for name in CLUSTER_NODES for v in compose["services"][name]["volumes"]]
    assert len(set(volumes)) == len(CLUSTER_NODES)
    # Only __consumer_offsets is replicated: every node must define the same topics (docs/cluster.md).
    assert len({tuple((t.name, t.partitions) for t in c.topics) for c in configs}) == 1


def test_the_image_installs_the_cluster_dependency(instructions: list[tuple[str, str]]) -> None:
    # kazoo (the ZooKeeper client) is one of the package's dependencies, which `pip install .` installs.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(re.match(r"kazoo\b", d) for d in pyproject["project"]["dependencies"])
    commands = [" ".join(shlex.split(c)) for i, args in instructions if i == "RUN" for c in args.split("&&")]
    installs = [c.split() for c in commands if c.startswith("pip install")]
    assert installs and "." in installs[0] and "--no-deps" not in installs[0], installs


def test_compose_file_reads_the_same_without_pyyaml() -> None:
    # The compose file must stay in the subset parse_simple_yaml reads (used when PyYAML is absent).
    yaml = pytest.importorskip("yaml")
    text = COMPOSE.read_text(encoding="utf-8")

    def as_text(value: Any) -> Any:  # the simple parser keeps every scalar a string
        if isinstance(value, dict):
            return {str(k): as_text(v) for k, v in value.items()}
        if isinstance(value, list):
            return [as_text(v) for v in value]
        return None if value is None else str(value)

    assert parse_simple_yaml(text) == as_text(yaml.safe_load(text))


def _image_config(service: dict[str, Any], instructions: list[tuple[str, str]]) -> Config:
    return load_config([], {**dockerfile_env(instructions), **compose_env(service)})


def _demo_module() -> Any:
    spec = importlib.util.spec_from_file_location("docker_demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", DEMO_SERVICES)
def test_compose_demo_clients_run_the_demo_script_from_the_server_image(
    compose: dict[str, Any], service: dict[str, Any], instructions: list[tuple[str, str]], name: str
) -> None:
    demo = compose["services"][name]
    assert demo["image"] == service["image"] and demo["build"] == service["build"]
    entrypoint = [str(w) for w in demo["entrypoint"]]
    copies = [exec_form_or_words(a) for i, a in instructions if i == "COPY"]
    assert ["docker/demo.py", entrypoint[-1]] in [c[-2:] for c in copies], (entrypoint, copies)
    assert entrypoint[0] == "python"
    mode = [str(w) for w in demo["command"]]
    assert mode == [{"producer": "produce", "consumer": "consume"}[name]]
    assert _demo_module().parse_args(mode, {}).mode == mode[0]
    assert demo["depends_on"][SERVICE]["condition"] == "service_healthy"
    # The demo reads exactly these variables; they point at the coordinator service and a topic it creates.
    env = compose_env(demo)
    assert set(env) <= set(_demo_module().ENV_VARS), set(env) - set(_demo_module().ENV_VARS)
    config = _image_config(service, instructions)
    assert env["DEMO_BOOTSTRAP"] == f"{SERVICE}:{config.port}"
    assert env["DEMO_TOPIC"] in {t.name for t in config.topics}
    args = _demo_module().parse_args(mode, env)
    assert (args.bootstrap, args.topic) == (env["DEMO_BOOTSTRAP"], env["DEMO_TOPIC"])


def test_compose_runs_a_three_member_consumer_group(compose: dict[str, Any], service: dict[str, Any],
                                                    instructions: list[tuple[str, str]]) -> None:
    consumer = compose["services"]["consumer"]
    assert int(consumer["deploy"]["replicas"]) == 3
    topic = {t.name: t for t in _image_config(service, instructions).topics}[compose_env(consumer)["DEMO_TOPIC"]]
    assert topic.partitions >= 3  # every member gets partitions


def test_prometheus_scrapes_the_metrics_port(compose: dict[str, Any], service: dict[str, Any],
                                             instructions: list[tuple[str, str]]) -> None:
    prometheus = compose["services"]["prometheus"]
    assert str(prometheus["image"]).startswith("prom/prometheus:")
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in prometheus["volumes"]}
    assert (COMPOSE.parent / mounts["/etc/prometheus/prometheus.yml"]).resolve() == PROMETHEUS.resolve()
    config = _image_config(service, instructions)
    scrape = load_yaml(PROMETHEUS)["scrape_configs"]
    targets = [t for job in scrape for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"{SERVICE}:{config.metrics_port}"]
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in scrape)


def test_grafana_provisions_the_datasource_and_dashboard(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    assert str(grafana["image"]).startswith("grafana/grafana:")
    mounts = {str(v).split(":")[1]: (COMPOSE.parent / str(v).split(":")[0]) for v in grafana["volumes"]
              if str(v).startswith(".")}
    provisioning = mounts["/etc/grafana/provisioning"]
    datasources = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert [d["url"] for d in datasources] == ["http://prometheus:9090"]
    assert "9090:9090" in [str(p) for p in compose["services"]["prometheus"]["ports"]]
    providers = load_yaml(provisioning / "dashboards" / "coordinator.yml")["providers"]
    dashboards_dir = providers[0]["options"]["path"]
    assert mounts[dashboards_dir].resolve() == DASHBOARD.parent.resolve()
    home = compose_env(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/{DASHBOARD.name}"
    uids = {d["uid"] for d in datasources}
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] in uids, panel["title"]
        assert all(t["datasource"]["uid"] in uids for t in panel["targets"]), panel["title"]


def test_dashboard_queries_only_metrics_the_server_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\b(coordinator_[a-z_]+)\b", expr)}
    assert used, exprs
    unknown = used - metrics.metric_names()
    assert not unknown, f"the dashboard queries metrics the server does not export: {unknown}"
    # The operator's questions each have a panel: group states, rebalances, requests, errors, lag.
    for name in ("coordinator_groups", "coordinator_rebalances_total", "coordinator_requests_total",
                 "coordinator_response_errors_total", "coordinator_consumer_lag", "coordinator_connections"):
        assert name in used, name


def test_known_env_covers_every_config_field() -> None:
    # Guards KNOWN_ENV itself: every Config field with a flag has its variable.
    attrs = {attr for _f, attr, _t, _h in _OPTIONS}
    assert attrs <= set(Config.__dataclass_fields__)


# --------------------------------------------------------------------------------- healthcheck


class _Server:
    """The real server as a subprocess on a free port (as tests/integration/conftest.py does)."""

    def __init__(self, data_dir: Path) -> None:
        argv = [sys.executable, "-m", "coordinator_server", "--port", "0", "--data-dir", str(data_dir),
                "--log-format", "json", "--offsets-partitions", "2"]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.port = -1
        self.lines: list[str] = []
        self._listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._listening.wait(20):
            self.stop()
            raise RuntimeError("server did not log `listening`:\n" + "\n".join(self.lines[-20:]))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "listening":
                self.port = int(event["port"])
                self._listening.set()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(15)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[_Server]:
    server = _Server(tmp_path / "data")
    try:
        yield server
    finally:
        assert server.stop() == 0


def run_healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    return subprocess.run([sys.executable, str(HEALTHCHECK), *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def test_healthcheck_passes_against_a_live_server(live_server: _Server) -> None:
    result = run_healthcheck("--host", "127.0.0.1", "--port", str(live_server.port))
    assert result.returncode == 0, result.stderr
    # As the image runs it: no arguments, the target taken from the server's own variables.
    result = run_healthcheck(env={"COORDINATOR_HOST": "0.0.0.0", "COORDINATOR_PORT": str(live_server.port)})
    assert result.returncode == 0, result.stderr


def test_healthcheck_fails_against_a_closed_port() -> None:
    result = run_healthcheck("--host", "127.0.0.1", "--port", str(free_port()), "--timeout", "2")
    assert result.returncode != 0
    assert "unhealthy" in result.stderr


def test_healthcheck_fails_when_the_port_is_open_but_not_kafka() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def accept_and_close() -> None:
            conn, _ = listener.accept()
            conn.close()

        thread = threading.Thread(target=accept_and_close, daemon=True)
        thread.start()
        result = run_healthcheck("--host", "127.0.0.1", "--port", str(port), "--timeout", "2")
        thread.join(5)
    assert result.returncode != 0
    assert "unhealthy" in result.stderr
