"""The records of many `__consumer_offsets` batches parsed at once, with numpy: `pipeline.columns`'s fast path.

Theory of operation
-------------------
Parsing a record is sequential within its batch (a record starts where the previous one ends), but the
batches of a chunk are independent. So the records are read in lockstep: step k parses the k-th record of
every batch still going, each step a few numpy operations over one element per batch (the record's head,
its key's and value's lengths, a check that it ends where its length says), instead of a Python loop per
record. A log of consumer commits has ~10 records a batch and thousands of batches a chunk: ~10 steps.

Only the common record layout is taken: a two-byte length, one-byte attributes, timestamp and offset
deltas, key length and value length, no headers — what every OffsetCommit of the server and of Kafka looks
like (a record of 64-8191 bytes with fewer than 64 records in its batch). A batch with any other record
(or a step run by fewer than `min_batches` batches, so a long batch does not turn the lockstep into one
slow step per record) is left to the per-record parser of `pipeline.columns` — which decides exactly as
before, so the rows are the same either way (tests/pipeline/test_columns.py runs both).

Keys: the distinct keys of the chunk are found with `np.unique` over their bytes, and each decoded once
(`key_of`, the caller's cache). Values: OffsetCommitValue v3 with empty metadata (24 bytes: the common one)
is read for all records at once through a big-endian structured view; any other value is handed back to
the caller one by one, as are the records of other types.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_HEADER_SIZE = 61  # BaseOffset .. RecordsCount
MAX_KEY = 255  # longer keys (never an offset commit's in practice) go the per-record way
_V3 = np.dtype([("version", ">i2"), ("offset", ">i8"), ("epoch", ">i4"), ("mlen", ">i2"), ("ts", ">i8")])
V3_SIZE = 24
_SIX = np.arange(6)
with np.errstate(over="ignore"):  # the powers of a 64-bit hash wrap around, as meant
    _POWERS = np.cumprod(np.full((MAX_KEY + 7) // 8, 0x9E3779B97F4A7C15, dtype=np.uint64), dtype=np.uint64)
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)  # the low k bytes of a word


@dataclass
class Records:
    """The records of the batches taken, one element per record; `failed`: indexes of the batches left to
    the per-record parser."""
    batch: np.ndarray  # index of the record's batch
    offset: np.ndarray
    timestamp: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray  # -1: no key
    value_pos: np.ndarray
    value_len: np.ndarray  # -1: null value (a tombstone)
    failed: list[int]


def _zigzag(x: np.ndarray) -> np.ndarray:
    return (x >> 1) ^ -(x & 1)


def scan(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, base_offsets: np.ndarray,
         first_timestamps: np.ndarray, counts: np.ndarray, min_batches: int) -> Records:
    """Parse the records of the batches at `starts` (each ending at `ends`, CRC already checked)."""
    n = len(starts)
    pos = starts + _HEADER_SIZE
    ok = np.ones(n, dtype=bool)
    parts: list[tuple[np.ndarray, ...]] = []
    for step in range(int(counts.max()) if n else 0):
        active = np.flatnonzero(ok & (counts > step))
        if len(active) == 0:
            break
        if len(active) < min_batches:
            ok[active] = False
            break
        p, end = pos[active], ends[active]
        fits = p + 6 <= end
        head = u8[np.minimum(p, len(u8) - 6)[:, None] + _SIX].astype(np.int64)
        b0, b1, b2, b3, b4, b5 = head.T
        common = fits & (b0 >= 0x80) & (((b1 | b2 | b3 | b4 | b5) & 0x80) == 0)
        record_end = p + 2 + _zigzag((b0 & 0x7F) | (b1 << 7))
        key_len = _zigzag(b5)
        value_len_at = p + 6 + np.maximum(key_len, 0)
        common &= value_len_at < record_end
        vb = u8[np.minimum(value_len_at, len(u8) - 1)].astype(np.int64)
        value_len = _zigzag(vb)
        headers_at = value_len_at + 1 + np.maximum(value_len, 0)
        common &= (vb < 0x80) & (record_end <= end) & (headers_at + 1 == record_end)
        common &= u8[np.minimum(headers_at, len(u8) - 1)] == 0
        ok[active[~common]] = False
        pos[active] = record_end
        parts.append((active, base_offsets[active] + _zigzag(b4), first_timestamps[active] + _zigzag(b3),
                      p + 6, key_len, value_len_at + 1, value_len))
    ok &= pos == ends
    failed = np.flatnonzero(~ok).tolist()
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Records(empty, empty, empty, empty, empty, empty, empty, failed)
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    keep = ok[cols[0]]
    return Records(*(c[keep] for c in cols), failed=failed)


def key_ids(u8: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray,
            key_of: Callable[[bytes], Any], powers: np.ndarray | None = None) -> tuple[list[Any], np.ndarray]:
    """(what `key_of` says of each distinct key, the index of each record's key into that list), for
    records with a key of at most `MAX_KEY` bytes (the caller takes the others). `powers`: the hash's
    multipliers, one a word (the tests give zeros to make every key of a length collide).

    Each key is read as little-endian 64-bit words (a view of the buffer at every byte offset, no copy),
    its tail masked: the words and the length are the key, exactly. A 64-bit hash of them finds the
    classes with one integer sort; every key is then compared word for word with its class's first, and
    a collision (which would take two keys of one chunk) falls back to sorting the words themselves."""
    if len(key_pos) == 0:
        return [], np.zeros(0, dtype=np.int64)
    words = np.ndarray(shape=(len(u8) - 7,), dtype="<u8", buffer=u8, strides=(1,))
    last = len(u8) - 8
    matrix = np.empty((len(key_pos), (int(key_len.max()) + 7) // 8), dtype=np.uint64)
    for j in range(matrix.shape[1]):
        at = key_pos + 8 * j
        # A word that would run past the buffer is read at its end and shifted down (little-endian).
        shift = (8 * np.maximum(at - last, 0)).astype(np.uint64)
        matrix[:, j] = (words[np.minimum(at, last)] >> shift) & _MASKS[np.clip(key_len - 8 * j, 0, 8)]
    lengths = key_len.astype(np.uint64)
    with np.errstate(over="ignore"):
        hashes = matrix @ (_POWERS if powers is None else powers)[:matrix.shape[1]] + lengths
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not ((matrix == matrix[first[inverse]]).all() and (lengths == lengths[first[inverse]]).all()):
        rows = np.ascontiguousarray(np.hstack([lengths[:, None], matrix]))
        rows = rows.view(np.dtype((np.void, rows.shape[1] * 8))).ravel()
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    del words
    with u8.data as data:  # released on return, as `words`: the mmap under `u8` can then be closed
        keys = [key_of(bytes(data[p:p + n])) for p, n in zip(key_pos[first].tolist(), key_len[first].tolist(),
                                                           strict=True)]
    return keys, inverse


def v3_values(u8: np.ndarray, value_pos: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(a mask of the values that are OffsetCommitValue v3 with empty metadata, their offset, epoch and
    ts columns in native byte order),
    for values of `V3_SIZE` bytes at `value_pos`."""
    raw = u8[value_pos[:, None] + np.arange(V3_SIZE)]
    values = np.ascontiguousarray(raw).view(_V3).ravel()
    native = {name: values[name].astype(values.dtype[name].newbyteorder("=")) for name in ("offset", "epoch", "ts")}
    return (values["version"] == 3) & (values["mlen"] == 0), native
