"""storage/batch.py's own builder of contiguous batches is byte for byte kafka-python's
DefaultRecordBatchBuilder (the general path, which the cleaner's batches with gaps still take)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.storage.batch import batch_records, build_batch, check_batch

blobs = st.one_of(st.none(), st.binary(max_size=300))
records = st.lists(st.tuples(blobs, blobs), min_size=1, max_size=20)


@settings(max_examples=300)
@given(records, st.integers(0, 2**62), st.integers(-1, 2**42), st.integers(0, 2**31 - 1))
def test_contiguous_batches_are_kafka_pythons(recs: list, base_offset: int, timestamp: int, epoch: int) -> None:
    fast = build_batch(recs, base_offset, timestamp, leader_epoch=epoch)
    # The general path (explicit deltas and timestamps) builds with kafka-python's DefaultRecordBatchBuilder.
    general = build_batch(recs, base_offset, timestamp, offset_deltas=list(range(len(recs))),
                          timestamps=[timestamp] * len(recs), leader_epoch=epoch)
    assert fast == general
    batch = check_batch(fast, base_offset)
    assert [(r.offset, r.timestamp_ms, r.key, r.value) for r in batch_records(batch)] == [
        (base_offset + i, timestamp, k, v) for i, (k, v) in enumerate(recs)]
