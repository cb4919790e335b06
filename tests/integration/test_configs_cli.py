"""`coordinator-server configs ...` against the real server: a topic's configs described (set ones and --all),
altered with --add-config (a list value in brackets) and --delete-config, a refused value reported with the
server's message, and the broker's settings."""
from __future__ import annotations

from typing import Any

import pytest

from coordinator_server.tools.configs import alter_ops, split_configs

from .cli_support import run_tool, run_tool_json
from .conftest import ServerProcess

pytestmark = pytest.mark.integration


def run(capsys: pytest.CaptureFixture[str], srv: ServerProcess, *args: str) -> tuple[int, str, str]:
    return run_tool(capsys, "configs", srv, *args)


def run_json(capsys: pytest.CaptureFixture[str], srv: ServerProcess, *args: str) -> Any:
    return run_tool_json(capsys, "configs", srv, *args)


def test_item_parsing() -> None:
    assert split_configs("a=1, cleanup.policy=[compact,delete],b=2") == ["a=1", "cleanup.policy=[compact,delete]", "b=2"]
    assert alter_ops("cleanup.policy=[compact,delete]", "retention.ms") == [
        ("cleanup.policy", 0, "compact,delete"), ("retention.ms", 1, None)]


def test_describe_and_alter_a_topic(server_factory: Any, capsys: pytest.CaptureFixture[str]) -> None:
    srv: ServerProcess = server_factory(topic=["orders:2"])
    code, out, err = run(capsys, srv, "--describe", "--topic", "orders")
    assert (code, out) == (0, "Dynamic configs for topic orders are:\n"), err

    code, out, err = run(capsys, srv, "--alter", "--topic", "orders",
                         "--add-config", "cleanup.policy=[compact,delete],retention.ms=3600000")
    assert (code, out) == (0, "Completed updating config for topic orders.\n"), err
    code, out, err = run(capsys, srv, "--describe", "--topic", "orders")
    assert out.splitlines()[1:] == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}"]

    everything = run_json(capsys, srv, "--describe", "--entity-type", "topics", "--entity-name", "orders", "--all")
    by_name = {c["name"]: c for c in everything["configs"]}
    assert by_name["segment.bytes"]["source"] == "DEFAULT_CONFIG" and by_name["segment.bytes"]["value"] == "1073741824"
    assert by_name["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"

    assert run(capsys, srv, "--alter", "--topic", "orders", "--delete-config", "retention.ms")[0] == 0
    set_now = run_json(capsys, srv, "--describe", "--topic", "orders")["configs"]
    assert [c["name"] for c in set_now] == ["cleanup.policy"]

    code, out, err = run(capsys, srv, "--alter", "--topic", "orders", "--add-config", "segment.ms=0")
    assert code == 1 and err == ("coordinator-server configs: error: topic orders: InvalidConfigurationError: "
                                 "Invalid value 0 for configuration segment.ms: Value must be at least 1\n")
    code, out, err = run(capsys, srv, "--describe", "--topic", "missing")
    assert code == 1 and "UnknownTopicOrPartitionError" in err


def test_describe_the_broker(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, server, "--describe", "--entity-type", "brokers", "--entity-name", "0")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "All configs for broker 0 are:"
    assert "  node.id=0 sensitive=false synonyms={STATIC_BROKER_CONFIG:node.id=0}" in lines
    code, _, err = run(capsys, server, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                       "--add-config", "log.retention.ms=1")
    assert code == 1 and "a broker's settings are its flags" in err
