"""Kafka's StandardAuthorizer rules over the ACL file (no I/O beyond the file's reload check):

- super users may do everything;
- a DENY matching (principal or User:*, host or *, operation or ALL, resource) wins over any ALLOW;
- DESCRIBE is implied by READ, WRITE, DELETE and ALTER (Kafka's implied operations);
- no ACL at all on a resource: allowed only with allow.everyone.if.no.acl.found.

`Access` binds a principal and client address for one connection; handlers ask it, the group core never
sees principals.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .acls import CLUSTER_NAME, WILDCARD, Acl
from .files import ReloadingFile

ANONYMOUS: Final = "User:ANONYMOUS"
# What can be done to a group, by Kafka's AclOperation codes: the bits of the authorized-operations set that
# DescribeGroups and ConsumerGroupDescribe answer when asked for it.
GROUP_OPERATION_CODES: Final = {"READ": 3, "DELETE": 6, "DESCRIBE": 8, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11}
_IMPLIES_DESCRIBE: Final = frozenset({"DESCRIBE", "READ", "WRITE", "DELETE", "ALTER", "ALL"})


def _matches_resource(acl: Acl, rtype: str, name: str) -> bool:
    if acl.resource_type != rtype:
        return False
    if acl.pattern_type == "LITERAL":
        return acl.resource_name in (name, WILDCARD)
    return name.startswith(acl.resource_name)


class Authorizer:
    def __init__(self, acls: ReloadingFile[tuple[Acl, ...]] | Iterable[Acl], super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._file = acls if isinstance(acls, ReloadingFile) else None
        self._static = () if isinstance(acls, ReloadingFile) else tuple(acls)
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def acls(self) -> tuple[Acl, ...]:
        return self._file.get() if self._file is not None else self._static

    def authorize(self, principal: str, host: str, operation: str, rtype: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        on_resource = [a for a in self.acls() if _matches_resource(a, rtype, name)]
        if not on_resource:
            return self.allow_everyone_if_no_acl_found
        mine = [a for a in on_resource
                if a.principal in (principal, "User:*") and a.host in (host, WILDCARD)]
        if any(a.permission == "DENY" and a.operation in (operation, "ALL") for a in mine):
            return False
        allowed_by = _IMPLIES_DESCRIBE if operation == "DESCRIBE" else frozenset({operation, "ALL"})
        return any(a.permission == "ALLOW" and a.operation in allowed_by for a in mine)


class Access:
    """What one connection's principal may do. Without an authorizer (no --acl-file) everything is
    allowed, exactly as before ACLs existed."""

    def __init__(self, authorizer: Authorizer | None, principal: str = ANONYMOUS, host: str = "") -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host

    def _ok(self, operation: str, rtype: str, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, rtype, name)

    def group(self, operation: str, group_id: str | None) -> bool:
        return self._ok(operation, "GROUP", group_id or "")

    def group_operations(self, group_id: str) -> frozenset[int]:
        """The codes of the operations on the group this principal may do (every one without an authorizer,
        as Kafka answers with none configured)."""
        return frozenset(code for op, code in GROUP_OPERATION_CODES.items() if self.group(op, group_id))

    def topic(self, operation: str, topic: str) -> bool:
        return self._ok(operation, "TOPIC", topic)

    def cluster(self, operation: str) -> bool:
        return self._ok(operation, "CLUSTER", CLUSTER_NAME)


ALLOW_ALL: Final = Access(None)
