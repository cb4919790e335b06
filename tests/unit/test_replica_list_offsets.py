"""ListOffsets of `__consumer_offsets` in a cluster, as its leader answers it (net/replica_handlers.py):
the high watermark for clients, the log end offset for brokers and debugging tools, the log start offset
for EARLIEST, and no lookup by time (the log has no time index)."""
from __future__ import annotations

import pytest

from coordinator_server.net.replica_handlers import list_offset_answer
from coordinator_server.replication.replica_manager import OffsetsView
from protocol.errors import Errors

# Records [3, 12) on disk, [3, 9) committed, leader epoch 5.
VIEW = OffsetsView(log_start_offset=3, high_watermark=9, log_end_offset=12, leader_epoch=5)


def test_latest_is_the_high_watermark_for_a_client() -> None:
    assert list_offset_answer(VIEW, -1, replica_id=-1) == (Errors.NONE, 9, 5)


@pytest.mark.parametrize("replica_id", [0, 2, -2])  # a broker, another broker, Kafka's debugging replica id
def test_latest_is_the_log_end_offset_for_anyone_else(replica_id: int) -> None:
    assert list_offset_answer(VIEW, -1, replica_id=replica_id) == (Errors.NONE, 12, 5)


@pytest.mark.parametrize("timestamp", [-2, -4])  # EARLIEST, EARLIEST_LOCAL (no tiered storage here)
def test_earliest_is_the_log_start_offset(timestamp: int) -> None:
    assert list_offset_answer(VIEW, timestamp, replica_id=-1) == (Errors.NONE, 3, -1)


@pytest.mark.parametrize("timestamp", [-3, 0, 1_700_000_000_000])  # MAX_TIMESTAMP, a time
def test_lookups_by_time_are_refused(timestamp: int) -> None:
    assert list_offset_answer(VIEW, timestamp, replica_id=-1) == (Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, -1, -1)
