"""ListOffsets by consumers and tools: the earliest offset, the latest (a consumer's is the high watermark,
a broker's or tool's the log end), or the first at or after a time (found by scanning batch headers: the
topic store keeps no time index). A cluster's `__consumer_offsets` is its leader's to answer
(net/replica_handlers.py)."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import ListOffsetsResponse

from coordinator_server.net.data_plane.partitions import ReadablePartitions
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.leadership import Leadership
from protocol.errors import Errors

# ListOffsets' special timestamps (KIP-734, KIP-405) and the replica id a consumer sends.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
CONSUMER_REPLICA_ID = -1

_LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_LPart = _LTopic.ListOffsetsPartitionResponse


class ListOffsetsHandler:
    def __init__(self, partitions: ReadablePartitions, leadership: Leadership) -> None:
        self.partitions = partitions
        self.leadership = leadership

    async def handle_list_offsets(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        topics = []
        for t in req.topics:
            parts = []
            describable = access.topic("DESCRIBE", t.name)
            for p in t.partitions:
                current = p.current_leader_epoch if version >= 4 else -1
                error, offset, timestamp, epoch = (
                    self._list_offset(t.name, p.partition_index, p.timestamp, current, req.replica_id,
                                      version >= 2 and req.isolation_level == READ_COMMITTED)
                    if describable else (Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1))
                parts.append(_LPart(partition_index=p.partition_index, error_code=int(error), timestamp=timestamp,
                                    offset=offset, leader_epoch=epoch,
                                    old_style_offsets=_old_style_offsets(version, p, error, offset)))
            topics.append(_LTopic(name=t.name, partitions=parts))
        return ListOffsetsResponse[version](throttle_time_ms=0, topics=topics)

    def _list_offset(self, topic: str, index: int, timestamp: int, current_leader_epoch: int,
                     replica_id: int, committed: bool) -> tuple[Errors, int, int, int]:
        """(error, offset, timestamp, leader epoch). A consumer's LATEST is the high watermark, or for a
        read_committed one the last stable offset; a broker or tool (replica id >= 0 or -2) gets the log
        end, as Kafka's Partition.fetchOffsetForTimestamp answers."""
        part = self.partitions.partition(topic, index)
        if part is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
        error, hw, epoch = self.leadership.read_view(part, current_leader_epoch)
        if error != Errors.NONE:
            return error, -1, -1, -1
        if committed and replica_id == CONSUMER_REPLICA_ID:
            hw = part.last_stable_offset(hw)
        if timestamp == EARLIEST_TIMESTAMP:
            return Errors.NONE, part.log_start_offset, -1, epoch
        if timestamp == LATEST_TIMESTAMP:
            return Errors.NONE, hw if replica_id == CONSUMER_REPLICA_ID else part.log_end_offset, -1, epoch
        found = part.offset_for_max_timestamp() if timestamp == MAX_TIMESTAMP else part.offset_for_timestamp(timestamp)
        if found is None or (replica_id == CONSUMER_REPLICA_ID and found[0] >= hw):
            return Errors.NONE, -1, -1, epoch  # no (committed) record at or after that time (Kafka's answer)
        return Errors.NONE, found[0], found[1], epoch


READ_COMMITTED = 1


def _old_style_offsets(version: int, p: ApiMessage, error: Errors, offset: int) -> list[int]:
    """ListOffsets v0 answers a list of up to max_num_offsets offsets (Kafka's legacy fetchOffsetsBefore; Burrow
    1.2's cluster module still asks v0): here the one offset v1+ would answer, never a list of segment bases."""
    if version > 0 or error != Errors.NONE or offset < 0 or p.max_num_offsets < 1:
        return []
    return [offset]
