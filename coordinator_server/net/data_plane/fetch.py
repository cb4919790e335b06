"""Fetch by consumers: each partition read up to its high watermark within the request's limits (KIP-74:
at least one whole batch), and a long poll (max.wait.ms, min.bytes) parked as a DelayedFetch in the
"Fetch" purgatory on the runtime's shared timer, woken by appends and leadership changes. Fetches by
replicas are net/replica_handlers.py's."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Hashable
from dataclasses import dataclass

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchResponse

from coordinator_server.net.data_plane.partitions import ReadablePartitions, TimerHost
from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.security.authorizer import Access
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.leadership import Leadership
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors
from protocol.message_format import down_convert, fetch_magic

_FTopic = FetchResponse.FetchableTopicResponse
_FPart = _FTopic.PartitionData
_Aborted = _FPart.AbortedTransaction
READ_COMMITTED = 1



@dataclass(frozen=True, slots=True)
class _FetchTarget:
    topic: str | None  # None: a topic id (Fetch v13+) that names no topic here
    index: int
    offset: int
    max_bytes: int
    current_leader_epoch: int
    topic_id: uuid.UUID | None = None  # Fetch v13+ names topics by id


class FetchHandler:
    def __init__(self, store: TopicStore, partitions: ReadablePartitions, leadership: Leadership,
                 fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], runtime: TimerHost) -> None:
        self.store = store
        self.partitions = partitions
        self.leadership = leadership
        self.fetch_purgatory = fetch_purgatory
        self.runtime = runtime

    async def handle_fetch(self, req: ApiMessage, version: int, access: Access) -> ApiMessage:
        if version >= 7 and (req.session_id != 0 or req.session_epoch > 0):
            # We never create fetch sessions (we answer session id 0), so any id is unknown; the
            # client falls back to full, session-less fetches.
            return FetchResponse[version](throttle_time_ms=0, error_code=int(Errors.FETCH_SESSION_ID_NOT_FOUND),
                                          session_id=0, responses=[])
        targets = [
            _FetchTarget(self._fetched_topic(t, version), p.partition, p.fetch_offset, p.partition_max_bytes,
                         p.current_leader_epoch if version >= 9 else -1, t.topic_id if version >= 13 else None)
            for t in req.topics for p in t.partitions
        ]
        max_bytes = max(0, req.max_bytes) if version >= 3 else 1 << 31
        denied = {t.topic for t in targets if t.topic is not None and not access.topic("READ", t.topic)}
        committed = version >= 4 and req.isolation_level == READ_COMMITTED
        response, total, errors = self._read(targets, max_bytes, version, denied, committed)
        if req.max_wait_ms > 0 and total < req.min_bytes and not errors and targets:
            await self._wait_for_data(targets, req.max_wait_ms, req.min_bytes, committed)
            response, _, _ = self._read(targets, max_bytes, version, denied, committed)
        return response

    def _fetched_topic(self, t: ApiMessage, version: int) -> str | None:
        """The name of a fetched topic: v13+ names it by id (KIP-516), which may name no topic here."""
        if version < 13:
            return str(t.topic)
        topic = self.store.get_by_id(t.topic_id)
        return topic.name if topic is not None else None

    async def _wait_for_data(self, targets: list[_FetchTarget], max_wait_ms: int, min_bytes: int,
                             committed: bool) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def available() -> int | None:
            total = 0
            for t in targets:
                part = self.partitions.partition(t.topic, t.index) if t.topic is not None else None
                if part is None or t.offset < part.log_start_offset:
                    return None  # deleted or truncated meanwhile: answer now, with the error
                error, hw, _epoch = self.leadership.read_view(part, t.current_leader_epoch)
                if error != Errors.NONE:
                    return None  # no longer the leader: answer now, with the error
                if committed:
                    hw = part.last_stable_offset(hw)  # a marker (not only an append) may make data readable
                visible = part.log.bytes_from(t.offset) - part.log.bytes_from(hw) if t.offset < hw else 0
                total += min(visible, max(0, t.max_bytes))
            return total

        op = DelayedFetch(max_wait_ms, min_bytes, available, future)
        keys: list[Hashable] = [(t.topic, t.index) for t in targets]
        self.fetch_purgatory.try_complete_else_watch(op, keys, self.runtime.now_ms())
        self.runtime.rearm_timer()
        try:
            await future
        finally:
            if not op.is_completed:  # the client went away: stop watching for it
                op.force_complete()

    def _read(self, targets: list[_FetchTarget], max_bytes: int, version: int,
              denied: set[str], committed: bool) -> tuple[ApiMessage, int, bool]:
        remaining = max_bytes
        total = 0
        errors = False
        by_topic: dict[tuple[str | None, uuid.UUID | None], list[object]] = {}
        for t in targets:
            part = self.partitions.partition(t.topic, t.index) if t.topic is not None and t.topic not in denied else None
            error, records, hw, lso = Errors.NONE, b"", -1, -1
            aborted: list[object] | None = None if version >= 4 else []
            if t.topic is None:
                error = Errors.UNKNOWN_TOPIC_ID
            elif t.topic in denied:
                error = Errors.TOPIC_AUTHORIZATION_FAILED
            elif part is None:
                error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif (leader := self.leadership.read_view(part, t.current_leader_epoch))[0] != Errors.NONE:
                error = leader[0]
            elif t.max_bytes < 0:
                error = Errors.INVALID_FETCH_SIZE
            elif not part.log_start_offset <= t.offset <= part.log_end_offset:
                error = Errors.OFFSET_OUT_OF_RANGE
            else:
                # KIP-74: the first partition with data returns at least one whole batch, even past the
                # limits, so a batch larger than the limits can never wedge a consumer. A consumer sees
                # only what is committed: nothing at or past the high watermark.
                hw = leader[1]
                # read_committed: nothing at or past the last stable offset, and the aborted transactions
                # of the range read, so the client drops their records.
                lso = part.last_stable_offset(hw)
                upper = lso if committed else hw
                records = part.read(t.offset, min(t.max_bytes, remaining), min_one=total == 0, max_offset=upper)
                if committed and version >= 4:
                    aborted = [_Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                               for a in part.transactions.aborted_between(t.offset, upper)]
                records = down_convert(records, fetch_magic(version))  # Fetch v0-3: message format 0 or 1
                remaining -= len(records)
                total += len(records)
            errors = errors or error != Errors.NONE
            by_topic.setdefault((t.topic, t.topic_id), []).append(_FPart(
                partition_index=t.index, error_code=int(error), high_watermark=hw, last_stable_offset=lso,
                log_start_offset=part.log_start_offset if part is not None else -1,
                aborted_transactions=aborted, preferred_read_replica=-1,
                records=records))
        response = FetchResponse[version](
            throttle_time_ms=0, error_code=0, session_id=0,
            responses=[_FTopic(topic=name, topic_id=topic_id, partitions=parts)
                       for (name, topic_id), parts in by_topic.items()],
        )
        return response, total, errors
