"""Decoding one `__consumer_offsets` key or value struct exactly, for both codecs (storage/codec.py and
storage/consumer_codec.py): the int16 version first, a version the schema knows, no short read, no trailing
bytes — anything else is a RecordDecodeError naming the struct."""
from __future__ import annotations

import io
import struct
from typing import Any

from coordinator_server.storage.errors import RecordDecodeError

_INT16 = struct.Struct(">h")


def decode_exact(cls: Any, data: bytes, lo: int, hi: int) -> Any:
    """`data` (int16 version + struct) decoded by kafka-python class `cls`, its version within lo..hi."""
    name = cls.name
    if len(data) < _INT16.size:
        raise RecordDecodeError(f"{name} of {len(data)} bytes is too short to hold a version")
    version = _INT16.unpack_from(data)[0]
    if not lo <= version <= hi:
        known = f"the known version {lo}" if lo == hi else f"one of the known versions {lo}-{hi}"
        raise RecordDecodeError(f"{name} version {version} is not {known}")
    buf = io.BytesIO(data)
    try:
        decoded = cls.decode(buf, header=True)
    except (ValueError, struct.error, UnicodeDecodeError, IndexError, TypeError, EOFError) as e:
        raise RecordDecodeError(f"{name} v{version} does not decode: {e}") from e
    if buf.tell() != len(data):
        raise RecordDecodeError(f"{name} v{version} has {len(data) - buf.tell()} unexpected trailing bytes")
    return decoded


def required(value: Any, field: str) -> Any:
    if value is None:
        raise RecordDecodeError(f"non-nullable field {field} is null")
    return value
