"""A reader of Kafka's primitives at a position, in the classic or the compact (flexible) encoding, for the
hand-written request parsers whose compact lengths may be multi-byte varints (JoinGroup and SyncGroup: a
leader's SyncGroup in a flexible version carries one assignment per member, and subscriptions are often over
127 bytes). wire_primitives' readers take one-byte compact lengths only, which is all the hotter parsers
(Heartbeat, OffsetCommit, OffsetFetch) meet."""
from __future__ import annotations

from .wire_primitives import INT16, INT32, Unusual


class Reader:
    """A null where Kafka forbids one, or anything truncated, raises (wire_primitives.NOT_TAKEN): the
    parser's caller then lets kafka-python's generic decode decide."""

    __slots__ = ("buf", "compact", "pos")

    def __init__(self, buf: bytes, pos: int, compact: bool) -> None:
        self.buf, self.pos, self.compact = buf, pos, compact

    def _length(self) -> int:
        """The length or count that follows: -1 for null."""
        if self.compact:
            return self._uvarint() - 1
        n: int = INT16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return n

    def _uvarint(self) -> int:
        buf, pos = self.buf, self.pos
        value = buf[pos]
        pos += 1
        if value >= 0x80:
            value &= 0x7F
            shift = 7
            while True:
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 28:
                    raise Unusual
        self.pos = pos
        return value

    def int32(self) -> int:
        (value,) = INT32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(value)

    def nullable_string(self) -> str | None:
        n = self._length()
        if n < 0:
            if n != -1:
                raise Unusual
            return None
        start = self.pos
        end = self.pos = start + n
        if end > len(self.buf):
            raise Unusual
        return self.buf[start:end].decode()

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise Unusual
        return value

    def bytes(self) -> bytes:
        n = self.array_length()  # a bytes field's length is read as an array's count
        start = self.pos
        end = self.pos = start + n
        if end > len(self.buf):
            raise Unusual
        return self.buf[start:end]

    def array_length(self) -> int:
        if self.compact:
            n = self._uvarint() - 1
        else:
            (n,) = INT32.unpack_from(self.buf, self.pos)
            self.pos += 4
        if n < 0:
            raise Unusual
        return n

    def no_tagged_fields(self) -> None:
        if self.compact:
            if self.buf[self.pos] != 0:
                raise Unusual
            self.pos += 1

    def end(self) -> None:
        """The request's own tagged fields (none), then nothing more."""
        self.no_tagged_fields()
        if self.pos != len(self.buf):
            raise Unusual
