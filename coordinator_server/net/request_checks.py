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


def in_versions(spec: str | None, version: int) -> bool:
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


@cache
def _attr(json_name: str) -> str:
    return str(BaseField.underscore_name(json_name))


# One entry per field that matters at a version: (attribute, JSON name, null refused, is an array, the
# plan of its nested fields or None). Worked out once per (fields list, version): parsing the schema's
# version ranges on every request cost several microseconds of every request.
_Plan = tuple[tuple[str, str, bool, bool, "_Plan | None"], ...]
_plans: dict[tuple[int, int], tuple[list[dict[str, Any]], _Plan]] = {}


def _plan(fields: list[dict[str, Any]], version: int) -> _Plan:
    cached = _plans.get((id(fields), version))
    if cached is not None and cached[0] is fields:
        return cached[1]
    entries = []
    for f in fields:
        if not in_versions(f.get("versions"), version):
            continue
        # Only length-prefixed fields can be sent as null (kafka-python also reads the all-zero uuid as
        # None, which is a value, not a null).
        length_prefixed = f["type"] in _LENGTH_PREFIXED or f["type"].startswith("[]") or "fields" in f
        refused = length_prefixed and not in_versions(f.get("nullableVersions"), version)
        nested = _plan(f["fields"], version) if "fields" in f else None
        if refused or nested:
            entries.append((_attr(f["name"]), f["name"], refused, f["type"].startswith("[]"), nested or None))
    plan = tuple(entries)
    _plans[(id(fields), version)] = (fields, plan)  # the list is kept, so its id is not reused
    return plan


def null_in_non_nullable(message: Any, fields: list[dict[str, Any]], version: int, path: str = "") -> str | None:
    """The path of the first field (at `version`) that is None although its schema does not allow null;
    None when there is none. `fields` is the message's JSON schema `fields` list."""
    return _first_null(message, _plan(fields, version), path)


def _first_null(message: Any, plan: _Plan, path: str) -> str | None:
    for attr, name, refused, is_array, nested in plan:
        value = getattr(message, attr, _MISSING)
        if value is _MISSING:
            continue
        if value is None:
            if refused:
                return f"{path}{name}"
            continue
        if nested is not None:
            items: Any = value if is_array else (value,)
            for i, item in enumerate(items):
                found = _first_null(item, nested, f"{path}{name}[{i}].")
                if found is not None:
                    return found
    return None
