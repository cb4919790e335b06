"""Produce: each partition's batch checked, handed to the group-commit writer (written at once, fsynced with
the round), and acknowledged once durable — and with acks=all once the high watermark covers it, which on
one node is at once and in a cluster a DelayedProduce in the topic's replica manager."""
from __future__ import annotations

import asyncio
import functools

import structlog
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import ProduceResponse

from coordinator_server.net.data_plane.partitions import TimerHost
from coordinator_server.net.offsets_topic import produce_refusal
from coordinator_server.purgatory import DelayedOperationPurgatory
from coordinator_server.security.authorizer import Access
from coordinator_server.storage.errors import StorageError
from coordinator_server.storage.group_commit import Appended, GroupCommitWriter
from coordinator_server.topics.delayed_fetch import DelayedFetch
from coordinator_server.topics.leadership import Leadership
from coordinator_server.topics.partition import AppendResult, Partition
from coordinator_server.topics.store import TopicStore
from protocol.errors import Errors
from protocol.message_format import MessageFormatError, up_convert

log = structlog.get_logger("coordinator_server.net")

_PTopic = ProduceResponse.TopicProduceResponse
_PPart = _PTopic.PartitionProduceResponse

_Durable = list[tuple[tuple[str, int], asyncio.Future[Appended]]]


class ProduceHandler:
    def __init__(self, store: TopicStore, writer: GroupCommitWriter, leadership: Leadership,
                 fetch_purgatory: DelayedOperationPurgatory[DelayedFetch], runtime: TimerHost) -> None:
        self.store = store
        self.writer = writer
        self.leadership = leadership
        self.fetch_purgatory = fetch_purgatory
        self.runtime = runtime

    async def handle_produce(self, req: ApiMessage, version: int, access: Access) -> ApiMessage | None:
        acks = req.acks
        results: list[tuple[str, list[tuple[int, Errors, int, int, str | None]]]] = []
        durable: _Durable = []
        replicated: list[tuple[tuple[str, int], Partition, int]] = []  # acks=all: (key, partition, required)
        for t in req.topic_data:
            out: list[tuple[int, Errors, int, int, str | None]] = []
            writable = access.topic("WRITE", t.name)
            for pd in t.partition_data:
                part = self.store.partition(t.name, pd.index)
                if not writable:
                    out.append((pd.index, Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, None))
                elif (refusal := produce_refusal(t.name)) is not None:
                    out.append((pd.index, refusal[0], -1, -1, refusal[1]))
                elif acks not in (0, 1, -1):
                    out.append((pd.index, Errors.INVALID_REQUIRED_ACKS, -1, -1, None))
                elif part is None:
                    out.append((pd.index, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None))
                else:
                    r = self._append(part, _produced_records(pd.records, version), durable, acks)
                    if r.error == Errors.NONE and acks == -1:
                        replicated.append(((t.name, pd.index), part, part.log_end_offset))
                    if r.error != Errors.NONE:
                        log.info("produce_rejected", topic=t.name, partition=pd.index, error=r.error.name,
                                 reason=r.message)
                    out.append((pd.index, r.error, r.base_offset, r.log_start_offset, r.message))
            results.append((t.name, out))
        touched = dict.fromkeys(key for key, _ in durable)
        for key in touched:
            self.fetch_purgatory.check_and_complete(key)
        if touched:
            self.runtime.rearm_timer()
        if acks == 0:
            return None  # Kafka sends no response at all for acks=0; the client expects none
        failed = await _durable(durable)
        failed.update(await self._replicated([r for r in replicated if r[0] not in failed], req.timeout_ms))
        return ProduceResponse[version](
            throttle_time_ms=0,
            responses=[
                _PTopic(name=name, partition_responses=[
                    _PPart(index=idx, error_code=int(failed.get((name, idx), err)),
                           base_offset=base if (name, idx) not in failed else -1,
                           log_append_time_ms=-1, log_start_offset=start, record_errors=[],
                           error_message=msg if (name, idx) not in failed else _failure_message(failed[(name, idx)]))
                    for idx, err, base, start, msg in parts])
                for name, parts in results
            ],
        )

    def _append(self, part: Partition, records: bytes | MessageFormatError | None, durable: _Durable,
                acks: int) -> AppendResult:
        """Check one produce partition and hand its batch to the writer, which writes it at once; the
        future it completes once the batch is durable joins `durable`."""
        refusal, leader_epoch = self.leadership.append_check(part, acks)
        if refusal != Errors.NONE:
            return AppendResult(refusal, message=refusal.message)
        if isinstance(records, MessageFormatError):
            return AppendResult(Errors.CORRUPT_MESSAGE, message=str(records))
        prepared = part.prepare(records, self.store.config.max_message_bytes)
        if isinstance(prepared, AppendResult):
            return prepared
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()

        def done(appended: Appended) -> None:
            if not future.done():  # else the request was cancelled; the batch was written all the same
                future.set_result(appended)

        try:
            base, _ = self.writer.submit(part.target, functools.partial(part.write, prepared, leader_epoch), done)
        except StorageError as e:
            return AppendResult(Errors.KAFKA_STORAGE_ERROR, message=str(e))
        self.leadership.appended(part)
        durable.append(((part.topic, part.index), future))
        return AppendResult(base_offset=base, log_start_offset=part.log_start_offset)

    async def _replicated(self, waits: list[tuple[tuple[str, int], Partition, int]], timeout_ms: int
                          ) -> dict[tuple[str, int], Errors]:
        """acks=all: each partition's DelayedProduce (in the replica manager's "Produce" purgatory) until the
        high watermark covers the append; a duplicate (an idempotent retry) waits for the log end, which
        holds the original. On one node this returns at once."""
        if not waits:
            return {}
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Errors]] = []
        for _key, part, required in waits:
            future: asyncio.Future[Errors] = loop.create_future()
            self.leadership.await_replicated(
                part, required, max(0, timeout_ms),
                lambda error, f=future: f.done() or f.set_result(error))  # type: ignore[misc]
            futures.append(future)
        # Their waits (DelayedProduce) joined the shared wheel: the loop timer must cover their timeouts.
        self.runtime.rearm_timer()
        errors = await asyncio.gather(*futures)
        return {key: error for (key, _p, _r), error in zip(waits, errors, strict=True) if error != Errors.NONE}


async def _durable(durable: _Durable) -> dict[tuple[str, int], Errors]:
    appended = await asyncio.gather(*(f for _, f in durable))
    return {key: Errors.KAFKA_STORAGE_ERROR for (key, _), a in zip(durable, appended, strict=True)
            if a.error is not None}


def _produced_records(records: bytes | None, version: int) -> bytes | MessageFormatError | None:
    """Produce v0-2 carries a message set of magic 0 or 1: the v2 batch it becomes (or why it cannot)."""
    if version >= 3 or records is None:
        return records
    try:
        return up_convert(records)
    except MessageFormatError as e:
        return e


def _failure_message(error: Errors) -> str:
    if error == Errors.KAFKA_STORAGE_ERROR:
        return "fsync failed"
    return error.message or error.name
