"""`__consumer_offsets` segment bytes -> Arrow record batches, column-wise: what each Spark task runs.

Theory of operation
-------------------
An uncompacted `__consumer_offsets` log is nearly all offset commits, and building a kafka-python record
object and a dict per record, then `RecordBatch.from_pylist`, took ~7 µs a record in Python alone (a 2M-commit
job used 22 CPU-s in all). This module does for the pipeline what `coordinator_server/storage/replay.py`
does for the server's start-up:

1. walks the batches of a byte range itself (`struct` on the header, CRC32C over the batch) and parses the
   records' framing by hand (varints, the v2 record layout), with no object per record: the batches of a
   chunk all at once, in lockstep with numpy (`pipeline.lockstep`: step k reads the k-th record of every
   batch), and the batches it leaves (uncommon record layouts, the long tail of long batches) one record
   at a time in Python (`_add_batch`);
2. decodes each distinct key once (`codec.decode_key`; `_Keys` keeps each key's group, topic and partition
   for the worker's life, the strings as indexes into its table; the lockstep path finds a chunk's distinct
   keys with one integer sort and looks each up once);
3. reads the common OffsetCommitValue (v3, empty metadata: 24 bytes) through a structured numpy view (one
   `struct` unpack in the per-record path), any other value with `codec.decode_offset_value`;
4. turns a chunk into Arrow columns at once: numpy arrays from the lockstep path; from the per-record path
   a run of values in one flat list (group, topic and metadata as indexes into the worker's distinct
   strings), a strided slice and one `pa.array` per column; one `take` per string column; constant and
   always-null columns need no list (`_nulls`). (A tuple per record transposed with `zip(*rows)` cost more
   than all the parsing.)

Everything else goes to the generic, row-by-row decoding of `pipeline.decode` (`batch_rows`,
`offsets_record`) and comes out as the very same rows: batches the hand parsers do not take (compressed,
log-append time, transactional or control, records with headers or any irregular framing), records of
other types (group metadata, KIP-848 consumer groups, share/streams groups), keys or values that do not
decode, and damage (a CRC failure is one error row and the batch is skipped; an untrustworthy header is one
error row and ends the range, as `decode.walk_batches`). tests/pipeline/test_columns.py holds the two to
the same rows on generated logs, compressed and damaged ones included, with the lockstep path taking every
batch it can and with the default that leaves a small log's batches to the per-record path. Measured on a
2M-commit log, one core, Arrow batches built but not sent: ~2,100,000 records per CPU second here (~0.47
µs a record; 0.55 when each range decoded its keys again, ~0.17 µs a record of it for the keys, and read
each header twice), ~800,000 with the per-record path alone, ~140,000 through `pipeline.decode`.

Row order: within each chunk of at most `ROWS_PER_BATCH` rows the offset commits come first, then the
generic rows. Nothing depends on row order: the jobs order records by (log_partition, offset).
"""
from __future__ import annotations

import struct
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from coordinator_server.storage.codec import (
    OFFSET_COMMIT_KEY,
    RecordDecodeError,
    decode_key,
    decode_offset_value,
)
from pipeline import decode, lockstep
from pipeline.decode import SegmentPath
from pipeline.schema import record_arrow_schema

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text|open_binary) is deprecated",
                            category=DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.util import calc_crc32c, decode_varint

ROWS_PER_BATCH = 16384  # rows per Arrow batch handed back to Spark: large enough to amortise pa.array
# A lockstep step costs ~20 numpy calls whatever the batches it runs over: with fewer batches left (the
# tail of a chunk's long batches), the per-record parser is the cheaper.
LOCKSTEP_MIN_BATCHES = 256
_HEADER = DefaultRecordBatch.HEADER_STRUCT  # BaseOffset .. RecordsCount, 61 bytes
_HEADER_SIZE = _HEADER.size
_LOG_OVERHEAD = 12
_CRC_FROM = DefaultRecordBatch.ATTRIBUTES_OFFSET  # the CRC covers Attributes to the end of the batch
# Attributes that send a batch to kafka-python: compression codec, log-append time (a record's timestamp
# is then the batch's max), transactional, control.
_SLOW_ATTRIBUTES = 0x07 | 0x08 | 0x10 | 0x20
_COMMIT_V3 = struct.Struct(">hqihq")  # OffsetCommitValue v3 with empty metadata: version, offset, epoch, 0, ts
_RECORD_HEAD = struct.Struct(">6B")  # length (2 bytes), attributes, timestamp delta, offset delta, key length
_GENERIC = object()  # key-cache entry: this key's records take the generic path

# The columns an offset commit fills, in the order of the tuples below; every other column is null,
# except the segment's constants (node, log_partition, segment) and record_type.
_COMMIT_COLUMNS = ("offset", "position", "timestamp", "group", "topic", "partition", "tombstone",
                   "committed_offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp")
_COMMIT_INDEX = {name: i for i, name in enumerate(_COMMIT_COLUMNS)}
_WIDTH = len(_COMMIT_COLUMNS)
# Columns held as indexes into `_Strings.values`: few distinct values, each encoded once per chunk.
_STRING_COLUMNS = frozenset({"group", "topic", "metadata"})


class _Strings:
    """Distinct strings (groups, topics, metadata) by index: a string column is then one `take` from a
    small array, not a UTF-8 encoding per row. Index 0 is ""."""

    def __init__(self) -> None:
        self.values: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, value: str) -> int:
        i = self._index.get(value)
        if i is None:
            i = self._index[value] = len(self.values)
            self.values.append(value)
        return i


class _Keys:
    """The offset-commit keys met so far, decoded, and the strings they name, for the Python worker's life:
    a partition's keys recur in every segment and range of it, and decoding them again for each range (a
    distinct key every ~12 records of a commit log, each through the key decoder and two string lookups) was
    ~10% of the decode. Bounded: past `_KEYS_LIMIT` keys or strings it starts over, between chunks only (a
    chunk's rows hold indexes into `strings` until they are flushed)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.strings = _Strings()
        self.decoded: dict[bytes, Any] = {}  # key bytes -> (group, topic, partition) as (index, index, int)
        self._table: pa.Array | None = None

    def __call__(self, key: bytes) -> Any:
        k = self.decoded.get(key)
        if k is None:
            k = self.decoded[key] = _commit_key(key, self.strings)
        return k

    def table(self) -> pa.Array:
        """`strings` as an Arrow array, built again only when a string was added."""
        if self._table is None or len(self._table) != len(self.strings.values):
            self._table = pa.array(self.strings.values, pa.string())
        return self._table

    def maybe_reset(self) -> None:
        if len(self.decoded) > _KEYS_LIMIT or len(self.strings.values) > _KEYS_LIMIT:
            self.reset()


_KEYS_LIMIT = 1 << 16
_WORKER_KEYS = _Keys()


def offsets_batches(where: SegmentPath, content: Any, start: int = 0, end: int | None = None,
                    rows_per_batch: int = ROWS_PER_BATCH,
                    lockstep_min: int = LOCKSTEP_MIN_BATCHES) -> Iterator[pa.RecordBatch]:
    """The rows of `decode.offsets_rows(where, content, start, end)` as Arrow batches of RECORD_SCHEMA.

    `content` is the segment (bytes, or an mmap of the file: only the range's pages are touched);
    `[start, end)` a range of whole batches, positions as in the segment. `lockstep_min`: the fewest
    batches a lockstep step runs over (`pipeline.lockstep`); the tests lower it to 1.
    """
    chunk = _Chunk(decode.segment_base(where), content, lockstep_min)
    pos, size = start, len(content) if end is None else end
    with memoryview(content) as view:  # released on any exit: the mmap can then be closed
        while pos < size:
            # The header read once: `decode.header_problem`'s checks on its fields, and only a header that
            # fails them goes to it for the message.
            if size - pos < _HEADER_SIZE:
                trusted = False
            else:
                (base_offset, length, _epoch, magic, crc, attrs, _last_delta, first_ts, _max_ts, _pid, _pepoch,
                 _seq, count) = _HEADER.unpack_from(content, pos)
                batch_end = pos + _LOG_OVERHEAD + length
                trusted = magic == 2 and length >= decode.MIN_BATCH_LENGTH and batch_end <= size
            if not trusted:
                chunk.generic.append({**chunk.base, "offset": None, "position": pos, "record_type": "error",
                                      "error": decode.header_problem(content, pos, size)})
                break
            if calc_crc32c(view[pos + _CRC_FROM:batch_end]) != crc:
                chunk.generic.append({**chunk.base, "offset": None, "position": pos, "record_type": "error",
                                      "error": f"CRC32C mismatch in the batch at byte {pos}"})
            elif attrs & _SLOW_ATTRIBUTES:
                chunk.generic.extend(decode.batch_rows(chunk.base, pos, DefaultRecordBatch(content[pos:batch_end])))
            else:
                chunk.pending.append((pos, batch_end, base_offset, first_ts, count))
                chunk.pending_rows += max(0, count)
            pos = batch_end
            # While walking, the chunk's rows are the pending batches' and the generic ones (the offset
            # commits are added by the flush).
            if chunk.pending_rows + len(chunk.generic) >= rows_per_batch:
                yield from chunk.flush()
    yield from chunk.flush()


class _Chunk:
    """The rows of a range decoded so far and the batches waiting for the lockstep parser; the decoded keys
    and their strings are the worker's (`_Keys`)."""

    def __init__(self, base: dict[str, Any], content: Any, lockstep_min: int) -> None:
        self.base, self.content, self.lockstep_min = base, content, lockstep_min
        self.keys = _WORKER_KEYS
        self.commits: list[Any] = []  # flat: len(_COMMIT_COLUMNS) values per offset commit
        self.generic: list[dict[str, Any]] = []
        self.pending: list[tuple[int, int, int, int, int]] = []  # (pos, end, base offset, first ts, count)
        self.pending_rows = 0

    @property
    def strings(self) -> _Strings:
        return self.keys.strings

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.pending:
            yield from self._lockstep()
        if self.commits:
            yield _flat_commits(self.base, self.keys.table(), self.commits)
        if self.generic:
            yield pa.RecordBatch.from_pylist(self.generic, schema=record_arrow_schema())
        self.commits, self.generic, self.pending, self.pending_rows = [], [], [], 0
        self.keys.maybe_reset()

    def _lockstep(self) -> Iterator[pa.RecordBatch]:
        """The pending batches through `pipeline.lockstep`; the batches it leaves, and the records it does not
        take (other keys, other values), one by one as before."""
        content, pending = self.content, self.pending
        batches = np.array(pending, dtype=np.int64).reshape(-1, 5)
        u8 = np.frombuffer(content, dtype=np.uint8)  # released on return: the mmap can then be closed
        recs = lockstep.scan(u8, *batches.T, min_batches=self.lockstep_min)
        for i in recs.failed:
            pos, batch_end, base_offset, first_ts, count = pending[i]
            if not _add_batch(content, pos, batch_end, base_offset, first_ts, count, self):
                self.generic.extend(decode.batch_rows(self.base, pos, DefaultRecordBatch(content[pos:batch_end])))
        position = batches[recs.batch, 0]
        keyed = np.flatnonzero((recs.key_len >= 0) & (recs.key_len <= lockstep.MAX_KEY))
        found, inverse = lockstep.key_ids(u8, recs.key_pos[keyed], recs.key_len[keyed], self.keys)
        commit_key = np.array([k is not _GENERIC for k in found], dtype=bool)
        fast = np.zeros(len(recs.offset), dtype=bool)
        fast[keyed] = commit_key[inverse] & (recs.value_len[keyed] == lockstep.V3_SIZE) if len(keyed) else False
        is_v3, values = lockstep.v3_values(u8, recs.value_pos[fast])
        fast_rows = np.flatnonzero(fast)[is_v3]
        values = {name: column[is_v3] for name, column in values.items()}
        fast[np.flatnonzero(fast)[~is_v3]] = False
        for i in np.flatnonzero(~fast).tolist():  # tombstones, other values, other records: one by one
            klen, kpos = int(recs.key_len[i]), int(recs.key_pos[i])
            _add_record(content, self, int(recs.offset[i]), int(position[i]), int(recs.timestamp[i]),
                        None if klen < 0 else content[kpos:kpos + klen], int(recs.value_pos[i]),
                        int(recs.value_len[i]))
        del u8
        if len(fast_rows):
            found_keys = np.array([k if k is not _GENERIC else (0, 0, 0) for k in found], dtype=np.int64)
            key_rows = found_keys[inverse[np.searchsorted(keyed, fast_rows)]]
            yield _commit_batch(self.base, len(fast_rows), self.keys.table(), {
                "offset": recs.offset[fast_rows], "position": position[fast_rows],
                "timestamp": recs.timestamp[fast_rows], "group": key_rows[:, 0], "topic": key_rows[:, 1],
                "partition": key_rows[:, 2], "tombstone": np.zeros(len(fast_rows), dtype=bool),
                "committed_offset": values["offset"], "leader_epoch": values["epoch"],
                "metadata": np.zeros(len(fast_rows), dtype=np.int32), "commit_timestamp": values["ts"],
                "expire_timestamp": None})


def _add_batch(buf: Any, batch_pos: int, end: int, base_offset: int, first_ts: int, count: int,
               chunk: _Chunk) -> bool:
    """Parse the records of the batch at `batch_pos` by hand and add them (`_add_record`): the batches
    `pipeline.lockstep` leaves. False, with nothing added, for anything irregular (headers, a record length
    that does not match, bytes left over): kafka-python then decides, as `decode.batch_rows`."""
    commits, generic = chunk.commits, chunk.generic
    marks = len(commits), len(generic)
    pos = batch_pos + _HEADER_SIZE
    try:
        for _ in range(count):
            # The common record: a two-byte length and one-byte attributes, deltas and key length (top bits
            # clear), read with one unpack; anything else byte by byte below.
            l0, l1, attributes, ts_delta, offset_delta, kl = _RECORD_HEAD.unpack_from(buf, pos)
            if l0 & 0x80 and not (l1 | attributes | ts_delta | offset_delta | kl) & 0x80:
                b = (l0 & 0x7F) | (l1 << 7)
                record_end = pos + 2 + ((b >> 1) ^ -(b & 1))
                ts = first_ts + ((ts_delta >> 1) ^ -(ts_delta & 1))
                offset = base_offset + ((offset_delta >> 1) ^ -(offset_delta & 1))
                klen = (kl >> 1) ^ -(kl & 1)
                pos += 6
            else:
                record_end, ts, offset, klen, pos = _record_head(buf, pos, first_ts, base_offset)
            if record_end > end:
                break
            key = None
            if klen >= 0:
                key = buf[pos:pos + klen]
                pos += klen
            b = buf[pos]  # value length
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = decode_varint(buf, pos)
            value_pos = pos
            if vlen >= 0:
                pos += vlen
            # No headers (a zero count, one byte), and the record ends where its length says.
            if pos + 1 != record_end or buf[pos] != 0:
                break
            pos = record_end
            _add_record(buf, chunk, offset, batch_pos, ts, key, value_pos, vlen)
        else:
            if pos == end:
                return True
    except (IndexError, ValueError, struct.error):
        pass
    del commits[marks[0]:], generic[marks[1]:]
    return False


def _add_record(buf: Any, chunk: _Chunk, offset: int, batch_pos: int, ts: int, key: bytes | None,
                value_pos: int, vlen: int) -> None:
    """One record: an offset commit onto the flat `chunk.commits` (`_COMMIT_COLUMNS` per record: extending
    a flat list and slicing it per column costs far less than a tuple per record transposed with
    `zip(*rows)`), any other record as a generic row."""
    k = _GENERIC if key is None else chunk.keys(key)
    if k is not _GENERIC:
        if vlen < 0:
            chunk.commits.extend((offset, batch_pos, ts, *k, True, None, None, None, None, None))
            return
        if vlen == 24:  # OffsetCommitValue v3 with empty metadata, the common case: one unpack
            version, committed, epoch, mlen, commit_ts = _COMMIT_V3.unpack_from(buf, value_pos)
            if version == 3 and mlen == 0:
                chunk.commits.extend((offset, batch_pos, ts, *k, False, committed, epoch, 0, commit_ts, None))
                return
        try:
            v = decode_offset_value(buf[value_pos:value_pos + vlen])
        except RecordDecodeError:
            pass  # the generic path makes the error row
        else:
            chunk.commits.extend((offset, batch_pos, ts, *k, False, v.offset, v.leader_epoch,
                                  chunk.strings(v.metadata), v.commit_timestamp_ms,
                                  None if v.expire_timestamp_ms < 0 else v.expire_timestamp_ms))
            return
    row = {**chunk.base, "offset": offset, "position": batch_pos, "timestamp": ts}
    row.update(decode.offsets_record(key, None if vlen < 0 else buf[value_pos:value_pos + vlen]))
    chunk.generic.append(row)


def _record_head(buf: Any, pos: int, first_ts: int, base_offset: int) -> tuple[int, int, int, int, int]:
    """(record end, timestamp, offset, key length, position after it) for any varint widths; raises
    IndexError past the buffer and ValueError for attributes kafka-python would read as a varint."""
    length, pos = decode_varint(buf, pos)
    record_end = pos + length
    if buf[pos] & 0x80:
        raise ValueError("attributes")
    ts_delta, pos = decode_varint(buf, pos + 1)
    offset_delta, pos = decode_varint(buf, pos)
    klen, pos = decode_varint(buf, pos)
    return record_end, first_ts + ts_delta, base_offset + offset_delta, klen, pos


def _commit_key(key: bytes, strings: _Strings) -> Any:
    """(group, topic, partition) of an OffsetCommitKey, the strings as indexes into `strings`; _GENERIC for
    any other key, or one that does not decode (the generic path reports it)."""
    k = _decoded_commit_key(key)
    return _GENERIC if k is None else (strings(k[0]), strings(k[1]), k[2])


def _decoded_commit_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an OffsetCommitKey, None for any other key."""
    try:
        k = decode_key(key)
    except RecordDecodeError:
        return None
    if isinstance(k, tuple) and k[0] == OFFSET_COMMIT_KEY and k[2] is not None:
        return k[1], k[2][0], k[2][1]
    return None


def _flat_commits(base: dict[str, Any], table: pa.Array, commits: list[Any]) -> pa.RecordBatch:
    """The flat list of `_add_record`'s offset commits as one Arrow batch: a strided slice per column."""
    columns = {name: commits[i::_WIDTH] for i, name in enumerate(_COMMIT_COLUMNS)}
    return _commit_batch(base, len(commits) // _WIDTH, table, columns)


def _commit_batch(base: dict[str, Any], n: int, table: pa.Array, columns: dict[str, Any]) -> pa.RecordBatch:
    """`n` offset commits as an Arrow batch of RECORD_SCHEMA: `columns` holds each of `_COMMIT_COLUMNS` as a
    list or numpy array (None: all null; string columns as indexes into `table`, the strings); the segment's
    constants and record_type are repeated, every other column is null."""
    schema = record_arrow_schema()
    arrays = []
    for field in schema:
        if field.name in columns:
            values = columns[field.name]
            if values is None:
                arrays.append(_nulls(n, field.type))
            elif field.name in _STRING_COLUMNS:
                arrays.append(table.take(pa.array(values, pa.int32())))
            else:
                arrays.append(pa.array(values, field.type))
        elif field.name in base or field.name == "record_type":
            value = base.get(field.name, "offset_commit")
            arrays.append(pa.repeat(pa.scalar(value, field.type), n))
        else:
            arrays.append(_nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _nulls(n: int, data_type: pa.DataType) -> pa.Array:
    """`n` nulls of `data_type`. A list column as offsets over an empty child: `pa.nulls` gives it a child
    of `n` null elements, whose buffers went through the Arrow stream to the JVM too (`members`, a list of
    structs of strings and lists, was 44 of the 286 bytes of an offset commit's row; 4 this way)."""
    if pa.types.is_list(data_type):
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                        pa.array([], data_type.value_type), type=data_type,
                                        mask=pa.array(np.ones(n, dtype=bool)))
    return pa.nulls(n, data_type)
