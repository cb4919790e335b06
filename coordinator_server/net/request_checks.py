"""Checks on a decoded request that the schema-driven decoder does not make.

kafka-python decodes a length of -1 as None for every string, bytes and array field, nullable or not.
Kafka's generated readers refuse that ("non-nullable field X was serialized as null"), and our handlers
rely on it: a None where the schema promises a list or a string would crash a handler. So the
connection refuses such a request as an undecodable body (close, `invalid_request_body`), like any other
malformed frame, before any handler sees it.
"""
from __future__ import annotations

from functools import cache
from typing import Any

from kafka.protocol.schemas.fields.base import BaseField

_MISSING = object()
_LENGTH_PREFIXED = frozenset({"string", "bytes", "records"})


def _in_versions(spec: str | None, version: int) -> bool:
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


@cache
def _attr(json_name: str) -> str:
    return str(BaseField.underscore_name(json_name))


def null_in_non_nullable(message: Any, fields: list[dict[str, Any]], version: int, path: str = "") -> str | None:
    """The path of the first field (at `version`) that is None although its schema does not allow null;
    None when there is none. `fields` is the message's JSON schema `fields` list."""
    for f in fields:
        if not _in_versions(f.get("versions"), version):
            continue
        value = getattr(message, _attr(f["name"]), _MISSING)
        if value is _MISSING:
            continue
        where = f"{path}{f['name']}"
        if value is None:
            # Only length-prefixed fields can be sent as null (kafka-python also reads the all-zero
            # uuid as None, which is a value, not a null).
            length_prefixed = f["type"] in _LENGTH_PREFIXED or f["type"].startswith("[]") or "fields" in f
            if length_prefixed and not _in_versions(f.get("nullableVersions"), version):
                return where
            continue
        if "fields" in f:
            items = value if f["type"].startswith("[]") else [value]
            for i, item in enumerate(items):
                found = null_in_non_nullable(item, f["fields"], version, f"{where}[{i}].")
                if found is not None:
                    return found
    return None
