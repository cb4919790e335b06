"""`coordinator-server configs`: a topic's configs (and this broker's settings), as `kafka-configs.sh` shows and
alters them, over the Kafka protocol.

    --describe  DescribeConfigs (v4, with synonyms): the configs the topic sets, or with --all every config
                with its value and where it comes from. A broker (`--entity-type brokers`) shows its settings.
    --alter     IncrementalAlterConfigs (v1): --add-config k=v,k2=[a,b] sets (a list value in brackets),
                --delete-config k,k2 removes; the server checks the result as Kafka does and refuses a bad
                value with Kafka's message.

`--topic T` is short for `--entity-type topics --entity-name T`. Text in kafka-configs.sh's shape for people,
`--json` for scripts; exit 0 when done, 1 with one line on stderr on any refusal or when no server answered.
"""
from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Sequence
from typing import Any

from coordinator_server.tools.broker_requests import call_any
from coordinator_server.tools.kafka_client import (
    BOOTSTRAP_ENV,
    CLIENT_ID,
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_MS,
)
from coordinator_server.tools.output import EXIT_OK, ToolError, run_tool, write_json
from coordinator_server.topics.configs import AlterOp, ConfigSource, ResourceType

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    import kafka.errors as kafka_errors
    from kafka.protocol.admin import (
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

PROG = "coordinator-server configs"
ENTITY_TYPES = {"topics": ResourceType.TOPIC, "brokers": ResourceType.BROKER}
_ENTITY_WORD = {ResourceType.TOPIC: "topic", ResourceType.BROKER: "broker"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Describe or alter a topic's configs (kafka-configs.sh).")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the configs")
    action.add_argument("--alter", action="store_true", help="change the configs (--add-config, --delete-config)")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]", default=None,
                        help=f"servers to ask, tried in order (env {BOOTSTRAP_ENV}, default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), default=None)
    parser.add_argument("--entity-name", default=None, help="the topic, or the broker's id")
    parser.add_argument("--topic", default=None, help="short for --entity-type topics --entity-name TOPIC")
    parser.add_argument("--all", action="store_true", help="with --describe: every config, not only those set")
    parser.add_argument("--add-config", default=None, metavar="K=V,K2=[A,B]", help="configs to set")
    parser.add_argument("--delete-config", default=None, metavar="K,K2", help="configs to remove")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS,
                        help=f"connect and request timeout (default {DEFAULT_TIMEOUT_MS})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP

    def body() -> int:
        rtype, name = entity(args)
        if args.describe:
            entries = describe(bootstrap, rtype, name, args.timeout_ms)
            shown = entries if args.all or rtype == ResourceType.BROKER else [
                e for e in entries if e["source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG.name]
            if args.json:
                write_json({"entity_type": _ENTITY_WORD[rtype], "entity_name": name, "configs": shown})
            else:
                print(render(rtype, name, shown, args.all), end="")
            return EXIT_OK
        if rtype != ResourceType.TOPIC:
            raise ToolError("only a topic's configs can be altered: a broker's settings are its flags")
        ops = alter_ops(args.add_config, args.delete_config)
        alter(bootstrap, name, ops, args.timeout_ms)
        if args.json:
            write_json({"entity_type": "topic", "entity_name": name, "altered": [
                {"name": n, "operation": AlterOp(op).name, "value": v} for n, op, v in ops]})
        else:
            print(f"Completed updating config for topic {name}.")
        return EXIT_OK

    return run_tool(PROG, body)


def entity(args: argparse.Namespace) -> tuple[ResourceType, str]:
    if args.topic is not None:
        if args.entity_type not in (None, "topics") or args.entity_name is not None:
            raise ToolError("give --topic, or --entity-type and --entity-name, not both")
        return ResourceType.TOPIC, args.topic
    if args.entity_type is None or args.entity_name is None:
        raise ToolError("name what to describe or alter: --topic TOPIC, or --entity-type and --entity-name")
    return ENTITY_TYPES[args.entity_type], args.entity_name


def split_configs(text: str) -> list[str]:
    """`k=v,k2=[a,b]` into its items; a comma inside brackets belongs to the value, as in kafka-configs.sh."""
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def alter_ops(add: str | None, delete: str | None) -> list[tuple[str, int, str | None]]:
    ops: list[tuple[str, int, str | None]] = []
    for item in split_configs(add or ""):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"--add-config item {item!r} is not KEY=VALUE")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        ops.append((key.strip(), AlterOp.SET, value))
    ops += [(key, AlterOp.DELETE, None) for key in split_configs(delete or "")]
    if not ops:
        raise ToolError("--alter needs --add-config or --delete-config")
    return ops


def _raise_for(code: int, message: str | None, what: str) -> None:
    if code:
        name = kafka_errors.for_code(code).__name__
        raise ToolError(f"{what}: {name}" + (f": {message}" if message else ""))


def describe(bootstrap: str, rtype: ResourceType, name: str, timeout_ms: int) -> list[dict[str, Any]]:
    r = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest[4](resources=[r(resource_type=int(rtype), resource_name=name,
                                                      configuration_keys=None)],
                                        include_synonyms=True, include_documentation=False)
    result = call_any(bootstrap, request, DescribeConfigsResponse, CLIENT_ID, timeout_ms).results[0]
    _raise_for(result.error_code, result.error_message, f"{_ENTITY_WORD[rtype]} {name}")
    return [{"name": c.name, "value": c.value, "source": _source(c.config_source), "read_only": c.read_only,
             "sensitive": c.is_sensitive,
             "synonyms": [{"name": s.name, "value": s.value, "source": _source(s.source)} for s in c.synonyms]}
            for c in sorted(result.configs, key=lambda c: c.name)]


def alter(bootstrap: str, topic: str, ops: list[tuple[str, int, str | None]], timeout_ms: int) -> None:
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest[1](resources=[res(
        resource_type=int(ResourceType.TOPIC), resource_name=topic,
        configs=[res.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])],
        validate_only=False)
    result = call_any(bootstrap, request, IncrementalAlterConfigsResponse, CLIENT_ID, timeout_ms).responses[0]
    _raise_for(result.error_code, result.error_message, f"topic {topic}")


def _source(code: int) -> str:
    try:
        return ConfigSource(code).name
    except ValueError:
        return str(code)


def render(rtype: ResourceType, name: str, entries: list[dict[str, Any]], all_configs: bool) -> str:
    """kafka-configs.sh's text: a heading, then one line per config with its synonyms."""
    word = _ENTITY_WORD[rtype]
    heading = f"All configs for {word} {name} are:" if all_configs or rtype == ResourceType.BROKER else \
        f"Dynamic configs for {word} {name} are:"
    lines = [heading]
    for e in entries:
        synonyms = ", ".join(f"{s['source']}:{s['name']}={s['value'] if s['value'] is not None else 'null'}"
                             for s in e["synonyms"])
        value = e["value"] if e["value"] is not None else "null"
        lines.append(f"  {e['name']}={value} sensitive={str(e['sensitive']).lower()} synonyms={{{synonyms}}}")
    return "\n".join(lines) + "\n"
