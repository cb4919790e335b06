"""The primitive readers the hand-written request parsers share (protocol/*_wire.py): Kafka's strings,
nullable strings and array lengths in both encodings (classic int16/int32 lengths, and the compact
varints of flexible versions) — only the shapes clients send; anything else raises `Unusual`, and the
parser's caller lets kafka-python's generic classes decide."""
from __future__ import annotations

import struct
from typing import Final

INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
INT64: Final = struct.Struct(">q")


class Unusual(Exception):
    """Not a shape these parsers take: the generic path decides."""


# What a parser meeting bytes it does not take may raise; its caller answers None (the generic path).
NOT_TAKEN: Final = (Unusual, struct.error, IndexError, UnicodeDecodeError)
_ONE_BYTE: Final = [bytes((i,)) for i in range(0x80)]


def string(payload: bytes, pos: int, compact: bool) -> tuple[str, int]:
    """A non-null string; null, or a compact length needing a multi-byte varint, is unusual."""
    value, pos = nullable_string(payload, pos, compact)
    if value is None:
        raise Unusual
    return value, pos


def nullable_string(payload: bytes, pos: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        n = payload[pos]
        if n == 0:
            return None, pos + 1
        if n >= 0x80:  # a length that needs a multi-byte varint
            raise Unusual
        start, end = pos + 1, pos + n
    else:
        (n,) = INT16.unpack_from(payload, pos)
        if n == -1:
            return None, pos + 2
        if n < 0:
            raise Unusual
        start, end = pos + 2, pos + 2 + n
    if end > len(payload):
        raise Unusual
    return payload[start:end].decode(), end


def array_length(payload: bytes, pos: int, compact: bool) -> tuple[int, int]:
    """A non-null array's element count."""
    if compact:
        n = payload[pos]
        if n == 0 or n >= 0x80:  # null, or a count needing a multi-byte varint
            raise Unusual
        return n - 1, pos + 1
    (n,) = INT32.unpack_from(payload, pos)
    if n < 0:
        raise Unusual
    return n, pos + 4


def no_tagged_fields(payload: bytes, pos: int) -> int:
    """Past an empty tagged-fields section; any tagged field is unusual."""
    if payload[pos] != 0:
        raise Unusual
    return pos + 1


def encode_string(value: str, compact: bool) -> bytes:
    raw = value.encode()
    if compact:
        return uvarint(len(raw) + 1) + raw
    return INT16.pack(len(raw)) + raw


def encode_nullable_string(value: str | None, compact: bool) -> bytes:
    if value is None:
        return b"\x00" if compact else b"\xff\xff"
    return encode_string(value, compact)


def encode_bytes(value: bytes, compact: bool) -> bytes:
    return (uvarint(len(value) + 1) if compact else INT32.pack(len(value))) + value


def encode_array_length(n: int, compact: bool) -> bytes:
    return uvarint(n + 1) if compact else INT32.pack(n)


def uvarint(n: int) -> bytes:
    """An unsigned varint (zigzag-encode a signed value first where the format says so)."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
