"""The consumer group core's one exception: a Kafka error code with Kafka's message for it."""
from __future__ import annotations

from protocol.errors import Errors


class ConsumerGroupError(Exception):
    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def invalid_request(message: str) -> ConsumerGroupError:
    return ConsumerGroupError(Errors.INVALID_REQUEST, message)


def unknown_member(member_id: str, group_id: str) -> ConsumerGroupError:
    return ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")


def group_not_found(group_id: str) -> ConsumerGroupError:
    return ConsumerGroupError(Errors.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")


def not_a_consumer_group(group_id: str) -> ConsumerGroupError:
    return ConsumerGroupError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
