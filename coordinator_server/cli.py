"""The `coordinator-server` console script.

With no subcommand (flags only, or nothing) it starts the server: config, logging, then `app.serve` under
uvloop, exactly as before subcommands existed, so `make run`, the Dockerfile and the tests keep working.
A first argument naming a subcommand runs an operator tool instead (`groups`, `cluster`, `configs`,
`dump-log`); tools are imported only when asked for, so starting the server does not pay for them.
"""
from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence

import structlog
import structlog.tracebacks
import uvloop

from coordinator_server.app import StartupError, serve
from coordinator_server.config import Config, render_toml, resolve_config

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR}


def configure_logging(log_format: str, log_level: str) -> None:
    """structlog to stderr: JSON lines (one object per event) or a human console renderer."""
    level = _LEVELS.get(log_level.lower())
    if level is None:
        raise SystemExit(f"coordinator-server: unknown --log-level {log_level!r}")
    renderer: structlog.typing.Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer()
        # Structured tracebacks without frame locals: locals could carry client payloads into logs.
        exc: list[structlog.typing.Processor] = [structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False))]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        exc = []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *exc,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def run(config: Config) -> int:
    log = structlog.get_logger("coordinator_server")
    try:
        uvloop.run(serve(config))
    except StartupError as e:
        log.error("startup_failed", error=str(e))
        return 1
    except KeyboardInterrupt:
        # SIGINT before the signal handlers were installed.
        return 130
    except Exception as e:
        log.exception("crashed", error=str(e))
        return 1
    return 0


# Subcommand -> module with `main(argv) -> int`. Later tools (repair-log, users, acls) register here.
SUBCOMMANDS: dict[str, str] = {
    "groups": "coordinator_server.tools.groups",
    "cluster": "coordinator_server.tools.cluster_status",  # `cluster status` (docs/cluster.md "Observing it")
    "configs": "coordinator_server.tools.configs",  # a topic's configs, as kafka-configs.sh (docs/operations.md)
    "dump-log": "coordinator_server.tools.dump_log",
    "repair-log": "coordinator_server.tools.repair_log",
    "users": "coordinator_server.security.users",  # SASL/SCRAM credentials (docs/security.md)
    "acls": "coordinator_server.security.acls",
    "pipeline": "pipeline.main",  # the Spark jobs and their tools (the `pipeline` extra; docs/pipeline.md)
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        tool = importlib.import_module(SUBCOMMANDS[args[0]])
        # A tool's command-line entry point is `cli(argv)` if it has one, else `main(argv)`.
        entry = getattr(tool, "cli", tool.main)
        code: int = entry(args[1:])
        return code
    loaded = resolve_config(args)
    if loaded.print_config:
        sys.stdout.write(render_toml(loaded))
        return 0
    configure_logging(loaded.config.log_format, loaded.config.log_level)
    for option, source, reason in loaded.ignored:
        structlog.get_logger("coordinator_server").warning("config_option_ignored", option=option, source=source,
                                                           reason=reason)
    return run(loaded.config)


if __name__ == "__main__":
    sys.exit(main())
