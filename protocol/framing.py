"""Request headers in, framed responses out. No I/O: the network shell hands over one frame's payload
(the bytes after the 4-byte size) and writes back what `encode_response` returns.

Header versions (Kafka's generated `requestHeaderVersion` / `responseHeaderVersion`):
- request header v2 (client id as an old-style int16 string, then tagged fields) when the api version
  is flexible, v1 otherwise;
- response header v1 (correlation id + tagged fields) for flexible versions, v0 otherwise — except
  ApiVersions, whose response header is always v0 so a client that does not yet know our versions can
  read it. kafka-python's `ApiVersionsResponse.encode_header` already forces that.
"""
from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse

from .apis import API_TABLE, ApiSpec, advertised_ranges
from .errors import Errors

_API_KEY_AND_VERSION: Final = struct.Struct(">hh")


class FrameError(Exception):
    """The connection must be closed: the peer sent something we cannot frame or decode."""


class InvalidHeaderError(FrameError):
    """The request header is truncated or malformed."""


class BodyDecodeError(FrameError):
    """The request body does not decode at the version its header claims."""


@dataclass(frozen=True, slots=True)
class ParsedHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts in the payload
    spec: ApiSpec | None  # None: an api key we do not serve

    @property
    def api_name(self) -> str:
        try:
            return str(ApiKey(self.api_key).name)
        except ValueError:
            return f"unknown({self.api_key})"

    @property
    def supported(self) -> bool:
        return self.spec is not None and self.spec.supports(self.api_version)

    @property
    def is_unsupported_api_versions(self) -> bool:
        """An ApiVersions request at a version we do not serve: answered, in the v0 layout, with
        UNSUPPORTED_VERSION and our ranges so the client can downgrade (Kafka's RequestContext)."""
        return self.api_key == ApiKey.ApiVersions and not self.supported


def parse_request_header(payload: bytes | memoryview) -> ParsedHeader:
    """Parse the request header at the start of a frame payload.

    For api keys we do not serve the header is read as v1 (no tagged fields): enough to log the
    correlation and client id before the shell closes the connection.
    """
    if len(payload) < _API_KEY_AND_VERSION.size + 4:
        raise InvalidHeaderError(f"frame of {len(payload)} bytes is too short for a request header")
    api_key, api_version = _API_KEY_AND_VERSION.unpack_from(payload, 0)
    spec = API_TABLE.get(api_key)
    flexible = spec.request_header_flexible(api_version) if spec is not None else False
    plain = read_plain_header(payload, flexible)
    if plain is not None:
        return ParsedHeader(api_key, api_version, plain[0], plain[1], plain[2], spec)
    buf = io.BytesIO(bytes(payload))
    try:
        header = RequestHeader.decode(buf, flexible=flexible)
    except Exception as e:  # kafka-python raises assorted struct/value/unicode errors on bad input
        raise InvalidHeaderError(f"unparsable request header: {e!r}") from e
    return ParsedHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
        body_offset=buf.tell(),
        spec=spec,
    )


_HEADER_FIXED: Final = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
# Bound once: each method call or attribute read on a `Struct` looks it up on its type (per request here).
_HEADER_FIXED_SIZE: Final = _HEADER_FIXED.size
_header_fixed_at: Final = _HEADER_FIXED.unpack_from
_api_key_and_version_at: Final = _API_KEY_AND_VERSION.unpack_from


def read_plain_header(payload: bytes | memoryview, flexible: bool) -> tuple[int, str | None, int] | None:
    """(correlation id, client id, where the body starts) of a header as clients send it (a client id, no
    tagged fields), read with `struct`: kafka-python's generic decode cost several microseconds of every
    request. None for any other shape: let kafka-python read it."""
    if len(payload) < _HEADER_FIXED_SIZE:
        return None
    _, _, correlation_id, n = _header_fixed_at(payload, 0)
    pos = _HEADER_FIXED_SIZE
    if n == -1:
        client_id = None
    elif 0 <= n <= len(payload) - pos:
        try:
            client_id = bytes(payload[pos:pos + n]).decode()
        except UnicodeDecodeError:
            return None
        pos += n
    else:
        return None
    if flexible:
        if pos >= len(payload) or payload[pos] != 0:  # tagged fields present (or truncated)
            return None
        pos += 1
    return correlation_id, client_id, pos


def read_plain_request(payload: bytes, api_key: int, min_version: int, max_version: int,
                       first_flexible: int) -> tuple[int, int, str | None, int] | None:
    """(api version, correlation id, client id, where the body starts) of an `api_key` request at a version
    in `min_version..max_version`, with a header as clients send it (`read_plain_header`): the start the
    hand-written parsers (protocol/*_wire.py) share. None for any other request or header. A payload too
    short to hold an API key and version raises struct.error, which those parsers hand back as not theirs."""
    key, version = _api_key_and_version_at(payload, 0)
    if key != api_key or not min_version <= version <= max_version:
        return None
    header = read_plain_header(payload, flexible=version >= first_flexible)
    if header is None:
        return None
    return version, *header


def decode_request_body(header: ParsedHeader, payload: bytes | memoryview) -> ApiMessage:
    """Decode the body of a supported request with kafka-python's schema for its version."""
    if header.spec is None or not header.supported:
        raise BodyDecodeError(f"{header.api_name} v{header.api_version} is not served")
    body = memoryview(payload)[header.body_offset:]
    try:
        return header.spec.request.decode(body, version=header.api_version)
    except Exception as e:  # truncated or malformed body: kafka-python raises various errors
        raise BodyDecodeError(
            f"cannot decode {header.api_name} v{header.api_version} body: {e!r}"
        ) from e


class EncodedResponse(NamedTuple):
    """A response body already encoded at the request's version by one of the hand-written encoders
    (protocol/*_wire.py), with what framing and metrics need: whether its header is the flexible one
    (v1: tagged fields after the correlation id) and the error codes it carries."""

    body: bytes
    flexible_header: bool
    error_codes: tuple[int, ...]


def encode_response(response: ApiMessage | EncodedResponse, correlation_id: int) -> bytes:
    """Frame a response body (already built at the request's version) with its response header."""
    if isinstance(response, EncodedResponse):
        header = _RESPONSE_HEADER_V1.pack(correlation_id, 0) if response.flexible_header else \
            _RESPONSE_HEADER_V0.pack(correlation_id)
        return (len(header) + len(response.body)).to_bytes(4, "big") + header + response.body
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


_RESPONSE_HEADER_V0: Final = struct.Struct(">i")
_RESPONSE_HEADER_V1: Final = struct.Struct(">ib")  # correlation id, no tagged fields


def api_versions_body(version: int, error: Errors = Errors.NONE) -> ApiMessage:
    """Our ApiVersions answer at `version`; throttle 0, and from v3 the feature levels."""
    keys = list(_api_version_keys())
    if version >= 3:
        supported, finalized = _features(version)
        return ApiVersionsResponse[version](error_code=error, api_keys=keys, throttle_time_ms=0,
                                            supported_features=list(supported), finalized_features=list(finalized),
                                            finalized_features_epoch=FINALIZED_FEATURES_EPOCH)
    if version >= 1:
        return ApiVersionsResponse[version](error_code=error, api_keys=keys, throttle_time_ms=0)
    return ApiVersionsResponse[0](error_code=error, api_keys=keys)


class Feature(NamedTuple):
    name: str
    min_version: int  # the range the server can run
    max_version: int
    level: int  # the level it runs: a single node and every node of a cluster run the same one


# group.version 1 says KIP-848's consumer protocol is on: the Java Admin and Kafka's tools read it before
# they send ConsumerGroupHeartbeat or ConsumerGroupDescribe. The server has none of the other features Kafka 4
# finalizes (no KRaft metadata, transactions, share or streams groups yet), so it advertises none of them.
FEATURES: Final = (Feature("group.version", 0, 1, 1),)
# Kafka's epoch grows with every change of the finalized levels, and a client keeps the highest it has seen.
# Ours change only with a release, so the epoch is a constant, raised whenever FEATURES changes.
FINALIZED_FEATURES_EPOCH: Final = 1


@functools.cache
def _features(version: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """v3 omits a supported range that starts at 0, as Kafka does: clients of that version read a minimum of 0
    as invalid, and v4 exists to lift that."""
    cls = ApiVersionsResponse[version]
    supported = tuple(cls.SupportedFeatureKey(name=f.name, min_version=f.min_version, max_version=f.max_version)
                      for f in FEATURES if version >= 4 or f.min_version > 0)
    finalized = tuple(cls.FinalizedFeatureKey(name=f.name, min_version_level=f.level, max_version_level=f.level)
                      for f in FEATURES)
    return supported, finalized


@functools.cache
def _api_version_keys() -> tuple[Any, ...]:
    """Built once: every client asks on every connection, and building the ~40 entries with kafka-python's
    classes cost more than the rest of the answer. The served ranges never change while the server runs."""
    return tuple(ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in advertised_ranges())


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """UNSUPPORTED_VERSION in the v0 body layout (header v0) with our ranges, whatever version was asked."""
    return encode_response(api_versions_body(0, Errors.UNSUPPORTED_VERSION), correlation_id)
