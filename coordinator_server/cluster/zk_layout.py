"""Kafka's ZooKeeper layout (ZooKeeper mode, as Kafka 2.x-3.x wrote it: kafka.zk.ZkData), so an operator who
knows Kafka recognises every znode. Paths and JSON only: no I/O here.

    /brokers/ids/<id>                                  ephemeral: the broker's endpoints
    /controller                                        ephemeral: {"version":1,"brokerid":N,"timestamp":...}
    /controller_epoch                                  "N": bumped by each new controller
    /brokers/topics/<topic>                            the replica assignment
    /brokers/topics/<topic>/partitions/<p>/state       leader, leader_epoch, isr, controller_epoch
    /admin/delete_topics/<topic>                       a deletion request, carried out by the controller
    /config/topics/<topic>                             the configs the topic sets: {"version":1,"config":{...}}
    /config/changes/config_change_<seq>                {"version":2,"entity_path":"topics/<topic>"} per change
    /latest_producer_id_block                          the last block of producer ids handed to a broker
    /cluster/id                                        {"version":"1","id":...}
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CLUSTER_ID = "/cluster/id"
DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"  # sequential znodes: ZooKeeper appends the number
NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def _timestamp() -> str:
    return str(int(time.time() * 1000))


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    host: str
    port: int

    def encode(self) -> bytes:
        # BrokerIdZNode version 5 (Kafka 2.7+): endpoints per listener, its protocol map, features.
        return json.dumps({
            "features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
            "endpoints": [f"PLAINTEXT://{self.host}:{self.port}"], "jmx_port": -1, "port": self.port,
            "host": self.host, "version": 5, "timestamp": _timestamp(),
        }).encode()

    @classmethod
    def decode(cls, node_id: int, data: bytes) -> BrokerRegistration:
        doc = json.loads(data)
        for endpoint in doc.get("endpoints", []):
            scheme, _, address = endpoint.partition("://")
            host, _, port = address.rpartition(":")
            if scheme == "PLAINTEXT" or len(doc["endpoints"]) == 1:
                return cls(node_id, host.strip("[]"), int(port))
        return cls(node_id, doc["host"], int(doc["port"]))


def encode_controller(node_id: int) -> bytes:
    return json.dumps({"version": 1, "brokerid": node_id, "timestamp": _timestamp()}).encode()


def decode_controller(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def encode_assignment(assignment: dict[int, list[int]], topic_id: str | None = None) -> bytes:
    # TopicZNode version 3 (KIP-516 topic ids, KIP-455 reassignment fields).
    doc: dict[str, object] = {"partitions": {str(p): r for p, r in sorted(assignment.items())},
                              "adding_replicas": {}, "removing_replicas": {}, "version": 3}
    if topic_id is not None:
        doc["topic_id"] = topic_id
    return json.dumps(doc).encode()


def decode_assignment(data: bytes) -> dict[int, list[int]]:
    return {int(p): [int(r) for r in replicas] for p, replicas in json.loads(data)["partitions"].items()}


def decode_topic_id(data: bytes) -> str | None:
    """The topic id (Kafka's base64 Uuid string) of a TopicZNode, None in one written before KIP-516."""
    topic_id = json.loads(data).get("topic_id")
    return str(topic_id) if topic_id else None


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(sorted(configs.items()))}).encode()


def decode_topic_config(data: bytes) -> dict[str, str]:
    config = json.loads(data).get("config") or {}
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(topic: str) -> bytes:
    """The change notification Kafka's brokers watched (ConfigEntityChangeNotificationSequenceZNode v2)."""
    return json.dumps({"version": 2, "entity_path": f"topics/{topic}"}).encode()


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


def encode_producer_id_block(broker: int, start: int, end: int) -> bytes:
    """ProducerIdBlockZNode version 1: the block [start, end] last handed to `broker`."""
    return json.dumps({"version": 1, "broker": broker, "block_start": str(start), "block_end": str(end)}).encode()


def decode_producer_id_block_end(data: bytes) -> int:
    return int(json.loads(data)["block_end"])


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The partition state znode (TopicPartitionStateZNode, version 1)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return json.dumps({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                           "leader_epoch": self.leader_epoch, "isr": list(self.isr)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaderAndIsr:
        doc = json.loads(data)
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(r) for r in doc["isr"]),
                   int(doc["controller_epoch"]))
