"""Rebuilding consumer groups from a replayed `__consumer_offsets` partition.

Each record is applied as the manager applies the records it writes (`ConsumerGroup.apply`); a
tombstone of the group epoch deletes the group, as Kafka's replay removes it.
"""
from __future__ import annotations

from .group import ConsumerGroup
from .records import ConsumerGroupMetadataRecord, ConsumerGroupRecord


class ConsumerGroupLoader:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}

    def apply(self, record: ConsumerGroupRecord) -> None:
        if isinstance(record, ConsumerGroupMetadataRecord) and record.epoch is None:
            self.groups.pop(record.group_id, None)
            return
        group = self.groups.get(record.group_id)
        if group is None:
            group = self.groups[record.group_id] = ConsumerGroup(record.group_id)
        group.apply(record)
