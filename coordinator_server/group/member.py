"""One member of a classic group (Kafka's MemberMetadata)."""
from __future__ import annotations

from collections.abc import Set

from coordinator_server.purgatory import DelayedOperation

from .api import JoinCallback, SyncCallback


class MemberMetadata:
    __slots__ = (
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_op",
        "heartbeat_satisfied",
        "is_new",
        "join_api_version",
        "member_id",
        "protocol_type",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "supported_protocols",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: tuple[tuple[str, bytes], ...],
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = supported_protocols
        self.assignment = b""
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        # The JoinGroup version of the parked join: SkipAssignment and leader id depend on it (KIP-814).
        self.join_api_version = 0
        # Added in the current join phase and not yet answered: governed by the new-member join timeout.
        self.is_new = False
        self.heartbeat_satisfied = False
        # The session deadline (a DelayedHeartbeat, which imports this module) parked for it last
        # (rebalance.py): a heartbeat finds it here, not by its key among every member's; it is still
        # checked to be the one live operation watched under that key.
        self.heartbeat_op: DelayedOperation | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Same names, same order, same metadata bytes: a retried join, not a change."""
        return self.supported_protocols == protocols

    def vote(self, candidates: Set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # A new member is expired by its join timeout even while its JoinGroup is parked.
            return self.heartbeat_satisfied
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            # A parked JoinGroup or SyncGroup counts as liveness (the socket is muted meanwhile).
            return True
        return self.heartbeat_satisfied
