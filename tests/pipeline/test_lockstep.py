"""`pipeline.lockstep.key_ids`: the distinct keys of a chunk, exactly, whatever the hash says."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipeline import lockstep


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30), st.booleans(), st.integers(0, 9))
def test_key_ids_groups_equal_keys_and_only_those(keys: list[bytes], collide: bool, gap: int) -> None:
    # The keys laid out in one buffer, `gap` bytes apart (the last one may end at the buffer's end, where
    # its words are read shifted); with `collide` the hash is the length only, so the byte-for-byte check
    # must take over.
    buf, positions = bytearray(b"\xAA" * 8), []
    for k in keys:
        positions.append(len(buf))
        buf += k + b"\x55" * gap
    u8 = np.frombuffer(bytes(buf), dtype=np.uint8)
    seen: list[bytes] = []
    found, inverse = lockstep.key_ids(u8, np.array(positions, dtype=np.int64),
                                      np.array([len(k) for k in keys], dtype=np.int64),
                                      lambda b: seen.append(b) or b,
                                      powers=np.zeros(8, dtype=np.uint64) if collide else None)
    assert [found[i] for i in inverse] == keys
    assert sorted(seen) == sorted(set(keys))
