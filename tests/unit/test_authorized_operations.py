"""DescribeGroups (v3+) and ConsumerGroupDescribe asked to include authorized operations answer, for each group
described without an error, the operations the caller may do to it: every group operation (READ, DELETE,
DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: codes 3, 6, 8, 10, 11) without an authorizer, as Kafka does with
none configured, and what the ACLs allow with one. Kafka's own consumer-groups tool and Admin show them; the
server used to answer "not requested" whatever the request said."""
from __future__ import annotations

import warnings
from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest

from coordinator_server.group.api import DeletedGroup, GroupDescription, ListedGroup
from coordinator_server.group.consumer.api import ConsumerGroupDescription
from coordinator_server.net.admin_handlers import AdminHandlers
from coordinator_server.net.consumer_group_handlers import ConsumerGroupHandlers
from coordinator_server.security.acls import Acl
from coordinator_server.security.authorizer import ALLOW_ALL, Access, Authorizer
from protocol.errors import Errors

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    from protocol.consumer_group_messages import ConsumerGroupDescribeRequest

EVERY_GROUP_OPERATION = {3, 6, 8, 10, 11}
NOT_REQUESTED = -2147483648


class Runtime:
    """Every requested group exists and is Empty."""

    async def describe_groups(self, group_ids: list[str | None], api_version: int) -> list[GroupDescription]:
        return [GroupDescription(g or "", Errors.NONE, "Empty", "consumer", "") for g in group_ids]

    async def list_groups(self, states: list[str], types: list[str]) -> tuple[Errors, list[ListedGroup]]:
        raise AssertionError("not called")

    async def delete_groups(self, group_ids: list[str | None]) -> list[DeletedGroup]:
        raise AssertionError("not called")

    async def consumer_group_describe(self, group_ids: list[str]) -> list[ConsumerGroupDescription]:
        return [ConsumerGroupDescription(g, Errors.NONE, state="Empty") for g in group_ids]

    async def consumer_group_heartbeat(self, inp: Any) -> Any:
        raise AssertionError("not called")


def alice_reads_g() -> Access:
    return Access(Authorizer([Acl("User:alice", "ALLOW", "READ", "GROUP", "LITERAL", "g")]), "User:alice", "h")


def test_group_operations_without_and_with_an_authorizer() -> None:
    assert ALLOW_ALL.group_operations("g") == EVERY_GROUP_OPERATION
    assert alice_reads_g().group_operations("g") == {3, 8}  # READ, and the DESCRIBE it implies
    everything_but_delete = Authorizer([Acl("User:alice", "ALLOW", "ALL", "GROUP", "LITERAL", "g"),
                                        Acl("User:alice", "DENY", "DELETE", "GROUP", "LITERAL", "g")])
    assert Access(everything_but_delete, "User:alice", "h").group_operations("g") == EVERY_GROUP_OPERATION - {6}


async def test_describe_groups_answers_them_from_v3_when_asked() -> None:
    handlers = AdminHandlers(Runtime())
    asked = await handlers.describe_groups(
        DescribeGroupsRequest[3](groups=["g"], include_authorized_operations=True), 3, ALLOW_ALL)
    assert asked.groups[0].authorized_operations == EVERY_GROUP_OPERATION
    not_asked = await handlers.describe_groups(
        DescribeGroupsRequest[5](groups=["g"], include_authorized_operations=False), 5, ALLOW_ALL)
    assert not_asked.groups[0].authorized_operations is None  # encoded as "not requested"


async def test_describe_groups_answers_none_for_a_group_refused() -> None:
    answer = await AdminHandlers(Runtime()).describe_groups(
        DescribeGroupsRequest[5](groups=["g", "other"], include_authorized_operations=True), 5, alice_reads_g())
    g, other = answer.groups
    assert (g.error_code, g.authorized_operations) == (0, {3, 8})
    assert (other.error_code, other.authorized_operations) == (Errors.GROUP_AUTHORIZATION_FAILED, None)


async def test_consumer_group_describe_answers_them_as_a_bit_field() -> None:
    handlers = ConsumerGroupHandlers(Runtime())
    asked = await handlers.describe(
        ConsumerGroupDescribeRequest[1](group_ids=["g", "other"], include_authorized_operations=True), 1,
        alice_reads_g())
    assert [g.authorized_operations for g in asked.groups] == [(1 << 3) | (1 << 8), NOT_REQUESTED]
    every = await handlers.describe(
        ConsumerGroupDescribeRequest[0](group_ids=["g"], include_authorized_operations=True), 0, ALLOW_ALL)
    assert every.groups[0].authorized_operations == 3400  # bits 3, 6, 8, 10 and 11
    not_asked = await handlers.describe(
        ConsumerGroupDescribeRequest[1](group_ids=["g"], include_authorized_operations=False), 1, ALLOW_ALL)
    assert not_asked.groups[0].authorized_operations == NOT_REQUESTED
