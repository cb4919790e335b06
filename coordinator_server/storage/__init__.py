"""Persistence of `__consumer_offsets` in Kafka's own formats: record codec, segment log, group commit."""
from coordinator_server.storage.codec import decode_record, encode_record, record_key_version
from coordinator_server.storage.coordinator_log import CoordinatorLog
from coordinator_server.storage.errors import (
    CorruptLogError,
    RecordDecodeError,
    RecordTooLargeError,
    StorageError,
)
from coordinator_server.storage.log import FileIO, LogRecord, PartitionLog

__all__ = [
    "CoordinatorLog",
    "CorruptLogError",
    "FileIO",
    "LogRecord",
    "PartitionLog",
    "RecordDecodeError",
    "RecordTooLargeError",
    "StorageError",
    "decode_record",
    "encode_record",
    "record_key_version",
]
