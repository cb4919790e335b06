"""Where a topic's configs are read and written: the topic store on one node, ZooKeeper's
`/config/topics/<name>` in a cluster (`ClusterTopicAdmin`). CreateTopics, DescribeConfigs and the two
AlterConfigs APIs share it, so they see one place."""
from __future__ import annotations

from collections.abc import Mapping

from coordinator_server.net.data_plane.topic_admin import ClusterTopicAdmin
from coordinator_server.topics import configs as tc
from coordinator_server.topics.registry import OFFSETS_TOPIC
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors, KafkaError


class TopicConfigs:
    def __init__(self, store: TopicStore, admin: ClusterTopicAdmin | None, broker: Mapping[str, str]) -> None:
        self.store = store
        self.admin = admin  # None on one node
        self.broker = dict(broker)  # the broker-level settings its flags set (`topics.configs.broker_settings`)

    async def get(self, name: str) -> dict[str, str] | None:
        """The configs the topic sets; None when there is no such topic."""
        if name == OFFSETS_TOPIC:
            return dict(tc.OFFSETS_TOPIC_CONFIGS)
        if self.admin is not None:
            return await self.admin.topic_configs(name)
        return self.store.topic_configs(name)

    async def set(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's configs (checked already)."""
        if name == OFFSETS_TOPIC:
            raise KafkaError(Errors.INVALID_REQUEST, "the configs of __consumer_offsets are fixed here")
        if self.admin is not None:
            await self.admin.alter_topic_configs(name, configs)
        else:
            self.store.set_topic_configs(name, configs)
