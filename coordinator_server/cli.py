"""The `coordinator-server` console script: config, logging, then `app.serve` under uvloop."""
from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import structlog
import structlog.tracebacks
import uvloop

from coordinator_server.app import StartupError, serve
from coordinator_server.config import Config, load_config

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


def main(argv: Sequence[str] | None = None) -> int:
    config = load_config(argv)
    configure_logging(config.log_format, config.log_level)
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
