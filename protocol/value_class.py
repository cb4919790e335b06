"""The base of the small immutable values built per request on the hot paths (compiled, setup.py).

Frozen dataclasses would say the same in fewer lines, but compiled their generated `__init__` sets each
field through `object.__setattr__` (~0.5 µs for five fields) and a NamedTuple runs an interpreted `__new__`
(~0.2 µs); a compiled class with `Final` attributes builds in tens of nanoseconds and is as immutable
(compiled, assigning one raises `AttributeError`; uncompiled, mypy's `Final` check is the guard). Subclasses
name their fields once, in `_fields`; equality, hashing and the repr follow from it (docs/decisions.md,
"Build and compiled hot path").
"""
from __future__ import annotations


class ValueClass:
    __slots__ = ()

    def _fields(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._fields()!r}"
