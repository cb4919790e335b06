"""Single requests to named brokers, for the two questions kafka-python's admin client has no public call
for: which node coordinates a group (FindCoordinator), and a partition's high watermark asked of its own
leader at the leader epoch Metadata showed (ListOffsets). Requests are kafka-python's message classes sent
over this project's BrokerClient, so nothing here reaches into kafka-python's internals.

Plaintext only, as the `groups` tool is.
"""
from __future__ import annotations

import asyncio
from typing import Any

from coordinator_server.replication.broker_client import BrokerClient, BrokerUnreachable
from coordinator_server.tools.output import ToolError

Address = tuple[str, int]


def parse_bootstrap(text: str) -> list[Address]:
    """`HOST:PORT[,HOST:PORT...]` as Kafka's bootstrap.servers."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        host, sep, port = item.rpartition(":")
        if not item or not sep or not host or not port.isdigit():
            raise ToolError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def call(address: Address, request: Any, response_cls: Any, client_id: str, timeout_ms: int) -> Any:
    """One request to one broker; BrokerUnreachable if it cannot be reached or does not answer in time."""

    async def run() -> Any:
        client = BrokerClient(address[0], address[1], client_id, request_timeout_s=timeout_ms / 1000)
        try:
            await client.connect(timeout_s=timeout_ms / 1000)
            return await client.call(request, response_cls)
        finally:
            await client.close()

    return asyncio.run(run())


def call_any(bootstrap: str, request: Any, response_cls: Any, client_id: str, timeout_ms: int) -> Any:
    """The first answer from the bootstrap servers, tried in order (any broker answers for the cluster)."""
    errors = []
    for address in parse_bootstrap(bootstrap):
        try:
            return call(address, request, response_cls, client_id, timeout_ms)
        except BrokerUnreachable as e:
            errors.append(str(e))
    raise ToolError(f"cannot reach a server at {bootstrap}: " + "; ".join(errors))
