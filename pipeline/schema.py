"""The Spark schemas of the decoded log, shared by the driver (`pipeline.reader`) and the Python workers
(`pipeline.columns`). Built from types, not DDL: parsing DDL needs a JVM, and the workers have none."""
from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    import pyarrow as pa


def nullable_struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, t, True) for name, t in fields])


_S, _I, _L, _B = StringType(), IntegerType(), LongType(), BooleanType()
_MEMBER = nullable_struct(
    ("member_id", _S), ("group_instance_id", _S), ("client_id", _S), ("client_host", _S),
    ("rebalance_timeout_ms", _I), ("session_timeout_ms", _I), ("subscribed_topics", ArrayType(_S)),
    ("assignment", ArrayType(nullable_struct(("topic", _S), ("partitions", ArrayType(_I))))), ("protocol_error", _S),
)

# One row per `__consumer_offsets` record; fields a record type lacks are null. `log_partition`/`offset`
# are its place in the log (the order records apply in); `position` the byte position of its batch.
RECORD_SCHEMA = nullable_struct(
    ("node", _S), ("log_partition", _I), ("segment", _L), ("offset", _L), ("position", _L), ("timestamp", _L),
    ("record_type", _S), ("group", _S), ("tombstone", _B),
    ("topic", _S), ("partition", _I), ("committed_offset", _L), ("leader_epoch", _I), ("metadata", _S),
    ("commit_timestamp", _L), ("expire_timestamp", _L),
    ("protocol_type", _S), ("generation", _I), ("protocol", _S), ("leader", _S), ("state_timestamp", _L),
    ("members", ArrayType(_MEMBER)), ("key_version", _I), ("error", _S),
    # KIP-848 consumer group records (record_type "consumer_group"; `consumer_record` says which one).
    ("consumer_record", _S), ("member_id", _S), ("epoch", _I), ("member_type", _S), ("regex", _S),
    ("client_id", _S), ("client_host", _S), ("group_instance_id", _S), ("subscribed_topics", ArrayType(_S)),
    ("consumer_assignment", ArrayType(nullable_struct(("topic_id", _S), ("partitions", ArrayType(_I))))),
)

TOPIC_BATCH_SCHEMA = nullable_struct(
    ("node", _S), ("topic", _S), ("partition", _I), ("position", _L), ("base_offset", _L),
    ("last_offset", _L), ("records", _I), ("first_timestamp", _L), ("max_timestamp", _L),
    ("is_control", _B), ("error", _S),
)


@cache
def record_arrow_schema() -> pa.Schema:
    """RECORD_SCHEMA as the Arrow schema `mapInArrow` must return, built once per worker."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(RECORD_SCHEMA)


@cache
def topic_batch_arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(TOPIC_BATCH_SCHEMA)
