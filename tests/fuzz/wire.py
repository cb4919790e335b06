"""Hypothesis strategies for request frames of every served API and version, encoded from Kafka's JSON
schemas (the ones kafka-python ships) by a small encoder of our own — so strings may be invalid UTF-8
where the wire allows any bytes — and mutations of those frames (truncation, flipped bytes, lying frame
size and inner lengths, huge or negative counts, absurd varints, garbage tagged fields).

Every generated name-like string starts with "fz" and every group id with "fz-", so what fuzzing commits
can be told apart from the legitimate clients' groups ("legit-..."), which no strategy produces.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from coordinator_server.net.request_checks import in_versions
from protocol.apis import API_TABLE, ApiSpec

INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
              "int64": (-(2**63), 2**63 - 1), "uint16": (0, 2**16 - 1)}
INT_FORMATS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H"}
# Fields whose big values would park a request for long (a parked request holds its connection).
SMALL_FIELDS = {"MaxWaitMs": (0, 50), "TimeoutMs": (0, 50), "NumPartitions": (-1, 4), "Count": (1, 4),
                "ReplicationFactor": (-1, 1), "SessionTimeoutMs": (0, 30_000), "RebalanceTimeoutMs": (-1, 200)}


def uvarint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@dataclass
class Encoder:
    """Draws field values and encodes them for one (api, version)."""

    draw: Any
    version: int
    flexible: bool

    def struct(self, fields: list[dict[str, Any]]) -> bytes:
        out = bytearray()
        tagged: list[tuple[int, bytes]] = []
        for f in fields:
            if not in_versions(f.get("versions"), self.version):
                continue
            data = self.field(f)
            if self.flexible and in_versions(f.get("taggedVersions"), self.version):
                if self.draw(st.booleans()):
                    tagged.append((int(f["tag"]), data))
            else:
                out += data
        if self.flexible:
            out += self.tagged_section(tagged)
        return bytes(out)

    def tagged_section(self, tagged: list[tuple[int, bytes]]) -> bytes:
        # Sometimes a tag the schema does not know (Kafka skips unknown tags).
        if self.draw(st.integers(0, 9)) == 0:
            tagged.append((self.draw(st.integers(64, 200)), self.draw(st.binary(max_size=8))))
        out = bytearray(uvarint(len(tagged)))
        for tag, data in sorted(tagged):
            out += uvarint(tag) + uvarint(len(data)) + data
        return bytes(out)

    def field(self, f: dict[str, Any]) -> bytes:
        typ: str = f["type"]
        nullable = in_versions(f.get("nullableVersions"), self.version)
        name: str = f["name"]
        if typ.startswith("[]"):
            if nullable and self.draw(st.integers(0, 7)) == 0:
                return self.length(-1, compact_varint=True)
            count = self.draw(st.integers(0, 3))
            if "fields" in f:
                items = [self.struct(f["fields"]) for _ in range(count)]
            else:
                items = [self.scalar(typ[2:], name, False) for _ in range(count)]
            return self.length(count, compact_varint=True) + b"".join(items)
        if "fields" in f:  # a single struct (nullable ones are prefixed by an int8 presence marker)
            body = self.struct(f["fields"])
            return (b"\x01" + body) if nullable else body
        return self.scalar(typ, name, nullable)

    def length(self, n: int, compact_varint: bool, int16: bool = False) -> bytes:
        if self.flexible and compact_varint:
            return uvarint(n + 1)
        return struct.pack(">h" if int16 else ">i", n)

    def scalar(self, typ: str, name: str, nullable: bool) -> bytes:
        if typ in INT_RANGES:
            lo, hi = INT_RANGES[typ]
            if name in SMALL_FIELDS:
                value = self.draw(st.integers(*SMALL_FIELDS[name]))
            else:
                value = self.draw(st.one_of(st.integers(-1, 8), st.sampled_from([lo, hi, 0, -1]),
                                            st.integers(lo, hi)))
            return struct.pack(INT_FORMATS[typ], value)
        if typ == "bool":
            return bytes([self.draw(st.integers(0, 1))])
        if typ == "float64":
            return struct.pack(">d", self.draw(st.floats(allow_nan=True)))
        if typ == "uuid":
            return self.draw(st.one_of(st.just(bytes(16)), st.binary(min_size=16, max_size=16)))
        if typ == "string":
            if nullable and self.draw(st.integers(0, 5)) == 0:
                return self.length(-1, True, int16=True)
            data = self.draw(name_like(name))
            return self.length(len(data), True, int16=True) + data
        if typ in ("bytes", "records"):
            if nullable and self.draw(st.integers(0, 5)) == 0:
                return self.length(-1, True)
            data = self.draw(record_batch() if typ == "records" else st.binary(max_size=40))
            return self.length(len(data), True) + data
        raise AssertionError(f"no encoder for {typ}")


def name_like(field_name: str) -> st.SearchStrategy[bytes]:
    prefix = b"fz-" if "Group" in field_name else b"fz"
    text = st.text(alphabet="abcdefghij-._", max_size=10).map(lambda s: prefix + s.encode())
    # Invalid UTF-8 and odd bytes where the wire allows any byte string.
    raw = st.binary(max_size=12).map(lambda b: prefix + b)
    return st.one_of(text, text, raw, st.just(b""))


@st.composite
def record_batch(draw: Any) -> bytes:
    """Sometimes a valid v2 batch (so a fuzzed Produce can really append), else garbage."""
    if draw(st.booleans()):
        return bytes(draw(st.binary(max_size=80)))
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 16)
    for i in range(draw(st.integers(1, 3))):
        builder.append(i, timestamp=draw(st.integers(0, 2**41)), key=draw(st.none() | st.binary(max_size=8)),
                       value=draw(st.binary(max_size=16)), headers=[])
    return bytes(builder.build())


SERVED = sorted((spec.key, v) for spec in API_TABLE.values() for v in range(spec.min_version, spec.max_version + 1))


@dataclass(frozen=True)
class Request:
    spec: ApiSpec
    version: int
    correlation_id: int
    header: bytes
    body: bytes

    @property
    def payload(self) -> bytes:
        return self.header + self.body

    @property
    def frame(self) -> bytes:
        return struct.pack(">i", len(self.payload)) + self.payload


@st.composite
def requests(draw: Any) -> Request:
    key, version = draw(st.sampled_from(SERVED))
    spec = API_TABLE[key]
    flexible = spec.request_header_flexible(version)
    correlation_id = draw(st.integers(0, 2**31 - 1))
    client_id = draw(st.one_of(st.none(), st.text("abcxyz-", max_size=10).map(str.encode), st.binary(max_size=10)))
    header = struct.pack(">hhi", key, version, correlation_id)
    header += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    enc = Encoder(draw, version, flexible)
    if flexible:
        header += enc.tagged_section([])
    body = enc.struct(spec.request.json["fields"])
    return Request(spec, version, correlation_id, header, body)


# ------------------------------------------------------------------------------------- mutations


def _overwrite(data: bytes, pos: int, patch: bytes) -> bytes:
    pos = min(pos, max(len(data) - len(patch), 0))
    return data[:pos] + patch + data[pos + len(patch):]


@st.composite
def mutated_frames(draw: Any) -> tuple[Request, bytes, str]:
    """(the valid request, the bytes to send, the mutation's name)."""
    req = draw(requests())
    payload = req.payload
    kind = draw(st.sampled_from(["truncate", "flip", "length", "huge_count", "varint", "tagged", "frame_size",
                                 "append", "none"]))
    n = len(payload)
    body_start = len(req.header)
    if kind == "truncate":
        payload = payload[: draw(st.integers(0, max(n - 1, 0)))]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, n - 1))
            payload = payload[:pos] + bytes([payload[pos] ^ draw(st.integers(1, 255))]) + payload[pos + 1:]
    elif kind in ("length", "huge_count"):
        # Lie about an inner length or array count: overwrite 2 or 4 bytes in the body with a big,
        # negative or off-by-some value.
        value = draw(st.sampled_from([-2, -1, 0x7FFF, 0x7FFFFFFF, -(2**31), 1 << 20, 65535]))
        width = draw(st.sampled_from([2, 4]))
        patch = struct.pack(">i", value) if width == 4 else struct.pack(">h", max(min(value, 32767), -32768))
        payload = _overwrite(payload, draw(st.integers(body_start, max(n - 1, body_start))), patch)
    elif kind == "varint":
        absurd = draw(st.sampled_from([b"\xff" * 10, b"\xff" * 5 + b"\x0f", b"\x80" * 12, b"\xfe\xff\xff\xff\x07"]))
        pos = draw(st.integers(body_start, max(n, body_start)))
        payload = payload[:pos] + absurd + payload[pos:]
    elif kind == "tagged":
        garbage = uvarint(draw(st.integers(1, 5))) + draw(st.binary(max_size=20))
        payload = payload + garbage if draw(st.booleans()) else payload[:-1] + garbage
    elif kind == "append":
        payload = payload + draw(st.binary(min_size=1, max_size=20))
    size = len(payload)
    if kind == "frame_size":
        size = draw(st.sampled_from([size + 1, size + 1000, max(size - 1, 0), 0, -1, 2**31 - 1]))
    return req, struct.pack(">i", size) + payload, kind
