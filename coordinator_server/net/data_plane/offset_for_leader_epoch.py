"""OffsetForLeaderEpoch by consumers: the end offset of a leader epoch, by which a consumer that saw an
older leader finds where its log diverged (KIP-320). Followers' requests are net/replica_handlers.py's."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from coordinator_server.net.data_plane.partitions import ReadablePartitions
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.leadership import Leadership
from protocol.errors import Errors

_ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EPart = _ETopic.EpochEndOffset


class OffsetForLeaderEpochHandler:
    def __init__(self, partitions: ReadablePartitions, leadership: Leadership) -> None:
        self.partitions = partitions
        self.leadership = leadership

    async def handle_offset_for_leader_epoch(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        topics = []
        for t in req.topics:
            parts = []
            describable = access.topic("DESCRIBE", t.topic)
            for p in t.partitions:
                part = self.partitions.partition(t.topic, p.partition)
                if not describable:
                    parts.append(_EPart(error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED), partition=p.partition,
                                        leader_epoch=-1, end_offset=-1))
                elif part is None:
                    parts.append(_EPart(error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION), partition=p.partition,
                                        leader_epoch=-1, end_offset=-1))
                else:
                    error, epoch, end = self.leadership.epoch_end_offset(
                        part, p.current_leader_epoch if version >= 2 else -1, p.leader_epoch)
                    parts.append(_EPart(error_code=int(error), partition=p.partition, leader_epoch=epoch,
                                        end_offset=end))
            topics.append(_ETopic(topic=t.topic, partitions=parts))
        return OffsetForLeaderEpochResponse[version](throttle_time_ms=0, topics=topics)
