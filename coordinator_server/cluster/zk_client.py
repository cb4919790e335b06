"""The broker's ZooKeeper session (kazoo), seen from asyncio.

kazoo runs its own threads: blocking calls go to a small thread pool (`run_in_executor`), so the event loop
never waits on ZooKeeper, and every watch or session event is handed to the loop with
`call_soon_threadsafe`, so the rest of the server only ever sees them as loop callbacks. Conditional writes
(a znode version, and for the controller a check of /controller_epoch in the same transaction, as Kafka's
ZooKeeper-mode controller does) are how a stale leader or controller is refused.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.retry import KazooRetry

from coordinator_server.cluster import zk_layout as zl

log = structlog.get_logger("coordinator_server.cluster")

T = TypeVar("T")


class ZkClient:
    def __init__(self, connect: str, session_timeout_ms: int) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self._kz = KazooClient(
            hosts=connect, timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="zookeeper")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_listeners: list[Callable[[str], None]] = []
        self._lost = False
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self, timeout_s: float = 15.0) -> None:
        self._loop = asyncio.get_running_loop()
        await self._call(self._ensure_chroot, timeout_s)
        self._kz.add_listener(self._on_state)
        await self._call(self._kz.start, timeout_s)

    def _ensure_chroot(self, timeout_s: float) -> None:
        """As Kafka does, create the chroot of `zookeeper.connect` (…/path) when it does not exist yet."""
        hosts, slash, chroot = self.connect.partition("/")
        if not slash or not chroot:
            return
        bootstrap = KazooClient(hosts=hosts, timeout=10.0)
        bootstrap.start(timeout_s)
        try:
            bootstrap.ensure_path("/" + chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._call(self._kz.stop)
            await self._call(self._kz.close)
        finally:
            self._pool.shutdown(wait=False)

    def on_session_event(self, listener: Callable[[str], None]) -> None:
        """`listener("LOST" | "SUSPENDED" | "CONNECTED" | "RECONNECTED")` on the loop; RECONNECTED is a new
        session after a lost one (ephemeral znodes are gone and must be made again)."""
        self._session_listeners.append(listener)

    def _on_state(self, state: str) -> None:  # kazoo's thread
        if state == KazooState.LOST:
            self._lost = True
            event = "LOST"
        elif state == KazooState.SUSPENDED:
            event = "SUSPENDED"
        else:
            event = "RECONNECTED" if self._lost else "CONNECTED"
            self._lost = False
        for listener in self._session_listeners:
            self._to_loop(listener, event)

    def _to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed() and not self._closed:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown)
                loop.call_soon_threadsafe(fn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    # -- watches (kazoo recipes re-arm themselves, also on a new session) --------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        def on_children(children: list[str] | None) -> None:
            self._to_loop(callback, sorted(children or []))
        self._kz.ChildrenWatch(path, on_children, allow_session_lost=True)

    def watch_data(self, path: str, callback: Callable[[bytes | None, int], None]) -> None:
        """callback(data or None when absent, znode version or -1), on every change."""
        def on_data(data: bytes | None, stat: Any) -> bool | None:
            if self._closed:
                return False  # stops the recipe
            self._to_loop(callback, data, stat.version if stat is not None else -1)
            return None
        self._kz.DataWatch(path, on_data)

    # -- reads -------------------------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = await self._call(self._kz.get, path)
        except NoNodeError:
            return None
        return data, stat.version

    async def children(self, path: str) -> list[str]:
        try:
            return sorted(await self._call(self._kz.get_children, path))
        except NoNodeError:
            return []

    async def brokers(self) -> dict[int, zl.BrokerRegistration]:
        out = {}
        for child in await self.children(zl.BROKER_IDS):
            got = await self.get(zl.broker_path(int(child)))
            if got is not None:
                out[int(child)] = zl.BrokerRegistration.decode(int(child), got[0])
        return out

    async def broker_epochs(self) -> dict[int, int]:
        """Each registered broker's epoch: the czxid of its /brokers/ids/<id> znode (KIP-380), which changes
        when a broker registers again, even under the same id and before anyone saw it gone."""
        def run() -> dict[int, int]:
            out = {}
            for child in self._kz.get_children(zl.BROKER_IDS):
                stat = self._kz.exists(zl.broker_path(int(child)))
                if stat is not None:
                    out[int(child)] = int(stat.czxid)
            return out
        try:
            return await self._call(run)
        except NoNodeError:
            return {}

    async def partition_state(self, topic: str, partition: int) -> tuple[zl.LeaderAndIsr, int] | None:
        got = await self.get(zl.partition_state_path(topic, partition))
        if got is None:
            return None
        return zl.LeaderAndIsr.decode(got[0]), got[1]

    # -- writes ------------------------------------------------------------------------------------------

    async def ensure_paths(self) -> None:
        for path in (zl.BROKER_IDS, zl.BROKER_TOPICS, zl.DELETE_TOPICS, zl.CONFIG_TOPICS, zl.CONFIG_CHANGES):
            await self._call(self._kz.ensure_path, path)

    async def register_broker(self, registration: zl.BrokerRegistration) -> None:
        """The ephemeral /brokers/ids/<id>. One our own session already holds (a create retried after a
        connection loss) is kept; one held by any other live session is an error, as in Kafka
        (`KafkaZkClient.checkedEphemeralCreate`): another node has this id, or this node's previous process
        died (kill -9) less than its session timeout ago and ZooKeeper has not expired that session yet."""
        await self.ensure_paths()
        path = zl.broker_path(registration.node_id)
        try:
            await self._call(self._kz.create, path, registration.encode(), ephemeral=True)
        except NodeExistsError as e:
            got = await self._call(self._kz.get, path)
            if got[1].ephemeralOwner == self._kz.client_id[0]:
                return
            raise RuntimeError(
                f"broker id {registration.node_id} is registered by another live session (znode {path}): is "
                f"another node running with --node-id {registration.node_id}? Or, just after a crash, this "
                f"node's previous session has not expired yet: start again after {self.session_timeout_ms} ms") from e

    async def create_controller(self, node_id: int) -> bool:
        try:
            await self._call(self._kz.create, zl.CONTROLLER, zl.encode_controller(node_id), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    async def bump_controller_epoch(self) -> tuple[int, int]:
        """Increment /controller_epoch (conditionally); returns (epoch, its znode version)."""
        while True:
            got = await self.get(zl.CONTROLLER_EPOCH)
            if got is None:
                try:
                    await self._call(self._kz.create, zl.CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int(got[0]) + 1
            try:
                stat = await self._call(self._kz.set, zl.CONTROLLER_EPOCH, str(epoch).encode(), got[1])
                return epoch, stat.version
            except BadVersionError:
                continue

    async def create_topic(self, topic: str, assignment: dict[int, list[int]], states: dict[int, zl.LeaderAndIsr],
                           controller_epoch_version: int) -> bool:
        """Create the topic's assignment and every partition state in one transaction guarded by the
        controller epoch. False when it already exists or this controller was superseded."""
        def run() -> bool:
            t = self._kz.transaction()
            t.check(zl.CONTROLLER_EPOCH, controller_epoch_version)
            t.create(zl.topic_path(topic), zl.encode_assignment(assignment))
            t.create(zl.partitions_path(topic), b"")
            for p, state in sorted(states.items()):
                t.create(f"{zl.partitions_path(topic)}/{p}", b"")
                t.create(zl.partition_state_path(topic, p), state.encode())
            results = t.commit()
            return not any(isinstance(r, Exception) for r in results)
        return await self._call(run)

    async def create_topic_assignment(self, topic: str, assignment: dict[int, list[int]], topic_id: str,
                                      configs: dict[str, str] | None = None) -> bool:
        """A broker's CreateTopics (Kafka's AdminZkClient.createTopicWithAssignment): the topic's configs and
        its assignment; the controller sees the assignment and creates the partition states. Kafka writes the
        configs first and then the assignment; here both go in one transaction, so a topic that exists
        already keeps its configs. False when the topic exists."""
        def run() -> bool:
            self._kz.ensure_path(zl.CONFIG_TOPICS)
            path = zl.topic_config_path(topic)
            t = self._kz.transaction()
            stat = self._kz.exists(path)
            if stat is None:
                t.create(path, zl.encode_topic_config(configs or {}))
            else:  # left by a topic of that name deleted before its controller removed it
                t.set_data(path, zl.encode_topic_config(configs or {}), stat.version)
            t.create(zl.topic_path(topic), zl.encode_assignment(assignment, topic_id))
            results = t.commit()
            return not any(isinstance(r, Exception) for r in results)
        return await self._call(run)

    async def topic_config(self, topic: str) -> dict[str, str]:
        """The configs a topic sets (none when it has no config znode, as Kafka reads it)."""
        got = await self.get(zl.topic_config_path(topic))
        return zl.decode_topic_config(got[0]) if got is not None and got[0] else {}

    async def set_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        """Replace a topic's configs, then leave the change notification, as Kafka's
        AdminZkClient.changeTopicConfig does."""
        def run() -> None:
            path = zl.topic_config_path(topic)
            data = zl.encode_topic_config(configs)
            if self._kz.exists(path) is None:
                self._kz.ensure_path(zl.CONFIG_TOPICS)
                self._kz.create(path, data)
            else:
                self._kz.set(path, data)
            self._kz.ensure_path(zl.CONFIG_CHANGES)
            self._kz.create(f"{zl.CONFIG_CHANGES}/{zl.CONFIG_CHANGE_PREFIX}", zl.encode_config_change(topic),
                            sequence=True)
        await self._call(run)

    async def update_assignment(self, topic: str, assignment: dict[int, list[int]], topic_id: str | None,
                                version: int) -> bool:
        """CreatePartitions: the grown assignment, if the topic znode is still at `version`."""
        try:
            await self._call(self._kz.set, zl.topic_path(topic), zl.encode_assignment(assignment, topic_id), version)
            return True
        except (BadVersionError, NoNodeError):
            return False

    async def create_partition_states(self, topic: str, states: dict[int, zl.LeaderAndIsr],
                                      controller_epoch_version: int) -> bool:
        """The controller brings new partitions online: their state znodes, in one transaction guarded by
        the controller epoch. False when one exists already or this controller was superseded."""
        def run() -> bool:
            has_parent = self._kz.exists(zl.partitions_path(topic)) is not None
            t = self._kz.transaction()
            t.check(zl.CONTROLLER_EPOCH, controller_epoch_version)
            if not has_parent:
                t.create(zl.partitions_path(topic), b"")
            for p, state in sorted(states.items()):
                if self._kz.exists(f"{zl.partitions_path(topic)}/{p}") is None:
                    t.create(f"{zl.partitions_path(topic)}/{p}", b"")
                t.create(zl.partition_state_path(topic, p), state.encode())
            results = t.commit()
            return not any(isinstance(r, Exception) for r in results)
        return await self._call(run)

    async def request_topic_deletion(self, topic: str) -> None:
        """A broker's DeleteTopics in ZooKeeper mode: /admin/delete_topics/<topic>, for the controller."""
        await self._call(self._kz.ensure_path, zl.DELETE_TOPICS)
        with contextlib.suppress(NodeExistsError):
            await self._call(self._kz.create, zl.delete_topic_path(topic), b"")

    async def delete_topic(self, topic: str, controller_epoch_version: int) -> bool:
        """The controller removes a topic's znodes and its deletion request, guarded by its epoch."""
        def run() -> bool:
            t = self._kz.transaction()
            t.check(zl.CONTROLLER_EPOCH, controller_epoch_version)
            if self._kz.exists(zl.topic_path(topic)) is not None:
                parts = self._kz.get_children(zl.partitions_path(topic)) \
                    if self._kz.exists(zl.partitions_path(topic)) is not None else None
                for p in parts or []:
                    if self._kz.exists(f"{zl.partitions_path(topic)}/{p}/state") is not None:
                        t.delete(f"{zl.partitions_path(topic)}/{p}/state")
                    t.delete(f"{zl.partitions_path(topic)}/{p}")
                if parts is not None:
                    t.delete(zl.partitions_path(topic))
                t.delete(zl.topic_path(topic))
            if self._kz.exists(zl.topic_config_path(topic)) is not None:
                t.delete(zl.topic_config_path(topic))
            t.delete(zl.delete_topic_path(topic))
            results = t.commit()
            return not any(isinstance(r, Exception) for r in results)
        return await self._call(run)

    async def allocate_producer_id_block(self, broker: int) -> tuple[int, int]:
        """The next block of producer ids, unique across the cluster (Kafka's ZkProducerIdManager): a
        conditional update of /latest_producer_id_block; returns [start, end]."""
        size = zl.PRODUCER_ID_BLOCK_SIZE
        while True:
            got = await self.get(zl.PRODUCER_ID_BLOCK)
            start = 0 if got is None or not got[0] else zl.decode_producer_id_block_end(got[0]) + 1
            data = zl.encode_producer_id_block(broker, start, start + size - 1)
            try:
                if got is None:
                    await self._call(self._kz.create, zl.PRODUCER_ID_BLOCK, data)
                else:
                    await self._call(self._kz.set, zl.PRODUCER_ID_BLOCK, data, got[1])
                return start, start + size - 1
            except (NodeExistsError, BadVersionError):
                continue

    async def write_state_as_controller(self, topic: str, partition: int, state: zl.LeaderAndIsr, version: int,
                                        controller_epoch_version: int) -> int | None:
        """A controller's conditional write: the new znode version, or None when the state moved on or a
        newer controller took over (the /controller_epoch check fails)."""
        def run() -> int | None:
            t = self._kz.transaction()
            t.check(zl.CONTROLLER_EPOCH, controller_epoch_version)
            t.set_data(zl.partition_state_path(topic, partition), state.encode(), version)
            results = t.commit()
            if any(isinstance(r, (BadVersionError, RolledBackError, NoNodeError, Exception)) for r in results):
                return None
            return int(results[1].version)
        return await self._call(run)

    async def update_isr(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: list[int],
                         controller_epoch: int, zk_version: int) -> int | None:
        """A leader's conditional ISR write (Kafka's ZooKeeper-mode updateLeaderAndIsr): the new version, or
        None when the state is no longer the one this leader read."""
        state = zl.LeaderAndIsr(leader, leader_epoch, tuple(isr), controller_epoch)
        try:
            stat = await self._call(self._kz.set, zl.partition_state_path(topic, partition), state.encode(),
                                    zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)
