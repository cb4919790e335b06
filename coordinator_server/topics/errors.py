"""Kafka error codes the data plane answers with (clients/.../protocol/Errors.java).

protocol.errors.Errors holds the coordinator's codes; the topic store's extra ones live here so the two
can grow independently. Both are plain int16 codes on the wire.
"""
from __future__ import annotations

from enum import IntEnum


class DataError(IntEnum):
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    INVALID_REQUIRED_ACKS = 21
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    FETCH_SESSION_ID_NOT_FOUND = 70
    UNKNOWN_LEADER_EPOCH = 75
    INVALID_RECORD = 87
    UNKNOWN_TOPIC_ID = 100

    @property
    def message(self) -> str:
        return self.name.replace("_", " ").capitalize() + "."


class TopicStoreError(Exception):
    """A request-level failure with its Kafka code; the handler turns it into the response's error."""

    def __init__(self, code: DataError, message: str | None = None) -> None:
        super().__init__(message or code.message)
        self.code = code
        self.message = message or code.message
