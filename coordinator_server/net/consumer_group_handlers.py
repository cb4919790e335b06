"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848): decode → runtime → encode.

Authorization as Kafka's API layer does it: READ on the group for a heartbeat (GROUP_AUTHORIZATION_FAILED),
and DESCRIBE on every topic a member names in its subscription (TOPIC_AUTHORIZATION_FAILED);
DESCRIBE on each described group.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from coordinator_server.group.consumer.api import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatResult,
)
from coordinator_server.net.awaiting import as_future
from coordinator_server.security.authorizer import Access
from protocol import consumer_group_messages as cgm
from protocol.errors import Errors


class ConsumerGroupRuntime(Protocol):
    def consumer_group_heartbeat(self, inp: ConsumerGroupHeartbeatInput,
                                 on_result: Callable[[ConsumerGroupHeartbeatResult], None],
                                 on_failure: Callable[[BaseException], None]) -> None: ...
    async def consumer_group_describe(self, group_ids: list[str]) -> list[ConsumerGroupDescription]: ...


class ConsumerGroupHandlers:
    def __init__(self, runtime: ConsumerGroupRuntime) -> None:
        self.runtime = runtime

    async def heartbeat(self, req: Any, version: int, access: Access, client_id: str, client_host: str) -> Any:
        if not access.group("READ", req.group_id):
            return cgm.heartbeat_response(ConsumerGroupHeartbeatResult(Errors.GROUP_AUTHORIZATION_FAILED), version)
        denied = sorted(t for t in req.subscribed_topic_names or () if not access.topic("DESCRIBE", t))
        if denied:
            return cgm.heartbeat_response(ConsumerGroupHeartbeatResult(
                Errors.TOPIC_AUTHORIZATION_FAILED, f"The following topics are not authorized: {', '.join(denied)}."),
                version)
        inp = cgm.heartbeat_input(req, version, client_id, client_host)
        return cgm.heartbeat_response(await as_future(self.runtime.consumer_group_heartbeat, inp), version)

    async def describe(self, req: Any, version: int, access: Access) -> Any:
        ids = list(req.group_ids)
        allowed = [g for g in ids if access.group("DESCRIBE", g)]
        described = iter(await self.runtime.consumer_group_describe(allowed) if allowed else [])
        out = [next(described) if access.group("DESCRIBE", g) else
               ConsumerGroupDescription(g, Errors.GROUP_AUTHORIZATION_FAILED) for g in ids]
        operations = None
        if req.include_authorized_operations:
            # As Kafka: only a group answered without an error says what the caller may do to it.
            operations = [access.group_operations(d.group_id) if d.error is Errors.NONE else None for d in out]
        return cgm.describe_response(out, version, operations)
