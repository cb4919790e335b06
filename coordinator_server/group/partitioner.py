"""Which `__consumer_offsets` partition a group lives in: Kafka's `Utils.abs(groupId.hashCode) % partitions`."""
from __future__ import annotations

from functools import lru_cache

_INT32_MIN = -(2**31)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, wrapping at 32 bits (signed)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 rather than overflowing."""
    return 0 if n == _INT32_MIN else abs(n)


# Every group request asks; the hash is a Python loop over the id, so remember recent answers (a pure
# function of its arguments; the bound keeps memory flat with millions of distinct ids).
@lru_cache(maxsize=65_536)
def partition_for(group_id: str, partitions: int) -> int:
    return kafka_abs(java_string_hash(group_id)) % partitions
