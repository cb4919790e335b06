"""One map from a failed write (a storage or replication error) to what the request that caused it answers.

Kafka's new coordinator answers every group write's failure the same way (GroupCoordinatorService's
handleOperationException): the partition is not there or not replicated enough → COORDINATOR_NOT_AVAILABLE,
this node no longer leads it or its disk failed → NOT_COORDINATOR, a batch too large → UNKNOWN_SERVER_ERROR.
OffsetCommit differs in two answers its clients know (OffsetMetadataManager and the Scala coordinator
before it): a network error is COORDINATOR_LOAD_IN_PROGRESS, a batch too large INVALID_COMMIT_OFFSET_SIZE.
Any other error is answered as it is. SyncGroup, JoinGroup (a static member's replacement),
ConsumerGroupHeartbeat, a classic member's JoinGroup into a consumer group and DeleteGroups use
`write_error`; OffsetCommit reads `OFFSET_COMMIT_WRITE_ERRORS` on its hot path.
"""
from __future__ import annotations

from typing import Final

from protocol.errors import Errors

WRITE_ERRORS: Final = {
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
    Errors.KAFKA_STORAGE_ERROR: Errors.NOT_COORDINATOR,
    Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.INVALID_FETCH_SIZE: Errors.UNKNOWN_SERVER_ERROR,
}

OFFSET_COMMIT_WRITE_ERRORS: Final = {
    **WRITE_ERRORS,
    Errors.NETWORK_EXCEPTION: Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Errors.MESSAGE_TOO_LARGE: Errors.INVALID_COMMIT_OFFSET_SIZE,
    Errors.RECORD_LIST_TOO_LARGE: Errors.INVALID_COMMIT_OFFSET_SIZE,
    Errors.INVALID_FETCH_SIZE: Errors.INVALID_COMMIT_OFFSET_SIZE,
}


def write_error(error: Errors) -> Errors:
    """A failed group write as the request that caused it answers it."""
    return WRITE_ERRORS.get(error, error)
