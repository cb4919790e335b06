"""Configuration: one precedence rule (flag > environment variable > --config TOML file > default), TOML
errors that name the key, and --print-config printing a file that reads back to the same settings."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from coordinator_server.cli import main as cli_main
from coordinator_server.config import (
    _OPTIONS,
    Config,
    FsyncPolicy,
    TopicSpec,
    config_keys,
    load_config,
    resolve_config,
    toml_kind,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_file_values_are_used(tmp_path: Path) -> None:
    path = write(tmp_path, 'port = 19092\nhost = "0.0.0.0"\ninitial_rebalance_delay_ms = 0\n'
                           'fsync = "interval:50"\ntopic = ["orders:3", "audit:1"]\nmetrics_port = 0\n')
    config = load_config(["--config", str(path)], {})
    assert (config.port, config.host, config.initial_rebalance_delay_ms) == (19092, "0.0.0.0", 0)
    assert config.fsync == FsyncPolicy("interval", 50)
    assert config.topics == (TopicSpec("orders", 3), TopicSpec("audit", 1))
    assert config.metrics_port == 0


@pytest.mark.parametrize(("argv", "env", "expected", "source"), [
    (["--port", "1"], {"COORDINATOR_PORT": "2"}, 1, "flag"),
    ([], {"COORDINATOR_PORT": "2"}, 2, "env COORDINATOR_PORT"),
    ([], {"COORDINATOR_PORT": ""}, 3, "file"),  # an empty variable counts as unset
    ([], {}, 3, "file"),
])
def test_precedence_flag_env_file_default(tmp_path: Path, argv: list[str], env: dict[str, str], expected: int,
                                          source: str) -> None:
    path = write(tmp_path, "port = 3\n")
    loaded = resolve_config([*argv, "--config", str(path)], env)
    assert loaded.config.port == expected
    assert loaded.sources["port"].startswith(source)
    assert loaded.sources["host"] == "default"
    assert loaded.config.host == Config().host


def test_topic_precedence(tmp_path: Path) -> None:
    path = write(tmp_path, 'topic = ["file:1"]\n')
    assert load_config(["--config", str(path)], {}).topics == (TopicSpec("file", 1),)
    assert load_config(["--config", str(path)], {"COORDINATOR_TOPIC": "env:2"}).topics == (TopicSpec("env", 2),)
    assert load_config(["--config", str(path), "--topic", "flag:3"],
                       {"COORDINATOR_TOPIC": "env:2"}).topics == (TopicSpec("flag", 3),)


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "node_id = 7\n")
    assert load_config([], {"COORDINATOR_CONFIG": str(path)}).node_id == 7
    other = tmp_path / "other.toml"
    other.write_text("node_id = 8\n")
    assert load_config(["--config", str(other)], {"COORDINATOR_CONFIG": str(path)}).node_id == 8  # flag wins


@pytest.mark.parametrize(("text", "message"), [
    ("prot = 1\n", "unknown key 'prot' (did you mean 'port'?)"),
    ("initial-rebalance-delay-ms = 0\n", "did you mean 'initial_rebalance_delay_ms'?"),
    ('port = "9092"\n', "key 'port' must be a TOML integer, got string \"9092\""),
    ("port = true\n", "key 'port' must be a TOML integer, got boolean"),
    ("host = 1\n", "key 'host' must be a TOML string, got integer 1"),
    ("offsets_partitions = 0\n", "key 'offsets_partitions' = 0: must be >= 1"),
    ('fsync = "sometimes"\n', "key 'fsync'"),
    ('topic = "orders:3"\n', "key 'topic' must be an array of \"NAME:PARTITIONS\" strings"),
    ('topic = ["orders"]\n', "key 'topic': --topic wants NAME:PARTITIONS"),
    ("port = \n", "is not valid TOML"),
    ("[server]\nport = 1\n", "unknown key 'server'"),
])
def test_bad_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                   message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SystemExit) as exc:
        load_config(["--config", str(path)], {})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert str(path) in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load_config(["--config", str(tmp_path / "absent.toml")], {})
    assert "cannot read config file" in capsys.readouterr().err


def test_cross_field_checks_apply_to_file_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "min_session_timeout_ms = 10\nmax_session_timeout_ms = 5\n")
    with pytest.raises(SystemExit):
        load_config(["--config", str(path)], {})
    assert "must not exceed" in capsys.readouterr().err


def test_every_option_has_a_toml_type() -> None:
    for _flag, attr, typ, _help in _OPTIONS:
        assert toml_kind(typ) in (int, float, str, bool), attr
    assert config_keys()[-1] == "topic"


def test_print_config_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in list(os.environ) if k.startswith("COORDINATOR_")]:
        monkeypatch.delenv(name)
    path = write(tmp_path, 'host = "file-host"\ntopic = ["orders:3"]\n')
    monkeypatch.setenv("COORDINATOR_LOG_LEVEL", "debug")
    assert cli_main(["--config", str(path), "--port", "1234", "--advertised-host", 'we"ird\\name',
                     "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "port = 1234  # flag" in out
    assert 'log_level = "debug"  # env COORDINATOR_LOG_LEVEL' in out
    assert f'host = "file-host"  # file {path}' in out
    assert "offsets_partitions = 50  # default" in out
    assert "# metrics_port is unset  # default" in out
    parsed = tomllib.loads(out)
    assert set(parsed) <= set(config_keys())
    # The printed file, read back on its own, gives the same effective configuration.
    printed = write(tmp_path, out)
    expected = load_config(["--config", str(path), "--port", "1234", "--advertised-host", 'we"ird\\name'],
                           {"COORDINATOR_LOG_LEVEL": "debug"})
    assert load_config(["--config", str(printed)], {}) == expected


def test_no_subcommand_still_means_the_server_flags() -> None:
    # `coordinator-server --port 0 ...` (make run, the Dockerfile, the tests) parses as before.
    config = load_config(["--port", "0", "--data-dir", "/tmp/x", "--topic", "a:1"], {})
    assert (config.port, config.data_dir, config.topics) == (0, "/tmp/x", (TopicSpec("a", 1),))


def test_a_removed_setting_is_accepted_ignored_and_reported(tmp_path: Path) -> None:
    """An upgraded deployment with the old per-address lockout setting still starts; the setting does nothing."""
    from coordinator_server.config import REMOVED_OPTIONS
    by_flag = resolve_config(["--max-failed-authentications-per-ip", "10"], environ={})
    assert [(o, s) for o, s, _r in by_flag.ignored] == [("max_failed_authentications_per_ip", "flag")]
    assert by_flag.ignored[0][2] == REMOVED_OPTIONS["max_failed_authentications_per_ip"]
    assert by_flag.config == Config()
    by_env = resolve_config([], environ={"COORDINATOR_MAX_FAILED_AUTHENTICATIONS_PER_IP": "10"})
    assert [(o, s) for o, s, _r in by_env.ignored] == [
        ("max_failed_authentications_per_ip", "env COORDINATOR_MAX_FAILED_AUTHENTICATIONS_PER_IP")]
    toml = tmp_path / "c.toml"
    toml.write_text("port = 9999\nmax_failed_authentications_per_ip = 10\n")
    by_file = resolve_config(["--config", str(toml)], environ={})
    assert by_file.config.port == 9999
    assert [(o, s) for o, s, _r in by_file.ignored] == [("max_failed_authentications_per_ip", f"file {toml}")]
    assert resolve_config([], environ={}).ignored == ()
