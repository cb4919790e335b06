"""The generic decode of a request frame: the header (hand-read when plain, else kafka-python's), the served
api and version, the body with kafka-python's schema-driven classes, and the nulls Kafka refuses that the
schema-driven decoder lets through (request_checks.py). Whatever fails here is a per-connection failure:
one log line, then `CloseConnection`.

The connection decodes every request this way except those of the APIs in `net/apis/` (table.py), and
those modules decode this way the shapes their hand-written parsers do not take."""
from __future__ import annotations

from collections.abc import Callable

import structlog
from kafka.protocol.api_message import ApiMessage

from protocol.framing import (
    BodyDecodeError,
    InvalidHeaderError,
    ParsedHeader,
    decode_request_body,
    parse_request_header,
)

from .request_checks import null_in_non_nullable

log = structlog.get_logger("coordinator_server.net")


class CloseConnection(Exception):
    """Stop serving this connection; the reason was logged where it was raised."""


def parse_header(payload: bytes, on_client_id: Callable[[str | None], None]) -> ParsedHeader:
    """The request header; `on_client_id` is told the client id before anything else is checked, so that the
    log lines of a refused request carry it."""
    try:
        header = parse_request_header(payload)
    except InvalidHeaderError as e:
        log.warning("invalid_request_header", error=str(e), size=len(payload))
        raise CloseConnection from None
    on_client_id(header.client_id)
    return header


def check_served(header: ParsedHeader) -> None:
    """An unknown api key, or an unsupported version of a known one, closes the connection (what a Kafka
    broker does too; ApiVersions' own answer to an unsupported version is the caller's)."""
    if header.spec is None:
        log.warning("unknown_api_key", api_key=header.api_key, api_version=header.api_version,
                    correlation_id=header.correlation_id)
        raise CloseConnection
    if not header.supported:
        log.warning("unsupported_api_version", api=header.api_name, api_version=header.api_version,
                    min_version=header.spec.min_version, max_version=header.spec.max_version,
                    correlation_id=header.correlation_id)
        raise CloseConnection


def decode_body(header: ParsedHeader, payload: bytes) -> ApiMessage:
    try:
        request = decode_request_body(header, payload)
    except BodyDecodeError as e:
        log.warning("invalid_request_body", api=header.api_name, api_version=header.api_version,
                    correlation_id=header.correlation_id, error=str(e))
        raise CloseConnection from None
    assert header.spec is not None
    null_field = null_in_non_nullable(request, header.spec.request.json["fields"], header.api_version)
    if null_field is not None:
        log.warning("invalid_request_body", api=header.api_name, api_version=header.api_version,
                    correlation_id=header.correlation_id,
                    error=f"non-nullable field {null_field} was serialized as null")
        raise CloseConnection
    return request


def decode_request(payload: bytes, on_client_id: Callable[[str | None], None]) -> tuple[ParsedHeader, ApiMessage]:
    """Header, served version and body, as the generic path checks them (the shapes a hand parser refused)."""
    header = parse_header(payload, on_client_id)
    check_served(header)
    return header, decode_body(header, payload)
