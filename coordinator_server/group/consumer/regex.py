"""Subscriptions by regular expression (KIP-848: the broker resolves them, with RE2 semantics).

Kafka compiles a member's SubscribedTopicRegex with RE2/J and subscribes the member to every topic whose
whole name matches. Python has no RE2 in the standard library, so a pattern is checked against what RE2
accepts and then matched with Python's `re` (`fullmatch`, as RE2/J's `matches()`):

- refused, as RE2 refuses them: lookahead and lookbehind, backreferences, conditionals, possessive
  quantifiers and atomic groups — INVALID_REGULAR_EXPRESSION with Kafka's message;
- refused although RE2 takes them: a repetition nested inside another one (`(a+)+`). RE2 matches in linear
  time whatever the pattern; Python's backtracking engine can take exponential time on such a pattern
  against a 249-character topic name, and the coordinator's loop must not be held by one member;
- matched alike: literals, classes, alternation, anchors, bounded and unbounded repetition, `(?i)`.
  Syntax only one of them knows (Python's `(?P=name)`, RE2's `\\pN` classes) is refused by the check or by
  `re` itself.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

# The standard library's own parser (re._parser, Python 3.11+), so the check sees the pattern exactly as
# `re` will compile it; typeshed does not describe these private modules.
sre_parse: Any = importlib.import_module("re._parser")
sre_constants: Any = importlib.import_module("re._constants")

_NOT_IN_RE2 = {
    sre_constants.ASSERT: "lookaround assertions",
    sre_constants.ASSERT_NOT: "lookaround assertions",
    sre_constants.GROUPREF: "backreferences",
    sre_constants.GROUPREF_EXISTS: "conditional groups",
    sre_constants.POSSESSIVE_REPEAT: "possessive quantifiers",
    sre_constants.ATOMIC_GROUP: "atomic groups",
}
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT}


class InvalidRegularExpression(ValueError):
    pass


def validate(regex: str) -> None:
    """Raise InvalidRegularExpression, with Kafka's message, for a pattern this server will not match."""
    _compiled(regex)


@lru_cache(maxsize=1024)
def _compiled(regex: str) -> re.Pattern[str]:
    try:
        parsed = sre_parse.parse(regex)
        problem = _unsupported(parsed, in_repeat=False)
        compiled = re.compile(regex)
    except (re.error, RecursionError, OverflowError) as e:
        problem = str(e)
    if problem is not None:
        raise InvalidRegularExpression(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {problem}.")
    return compiled


def _unsupported(parsed: object, in_repeat: bool) -> str | None:
    for op, arg in parsed:  # type: ignore[attr-defined]
        if op in _NOT_IN_RE2:
            return f"{_NOT_IN_RE2[op]} are not supported"
        if op in _REPEATS:
            _min, max_, body = arg
            unbounded = max_ == sre_constants.MAXREPEAT or max_ > 1
            if in_repeat and unbounded:
                return "nested repetition is not supported"
            problem = _unsupported(body, in_repeat or unbounded)
        elif op == sre_constants.SUBPATTERN:
            problem = _unsupported(arg[-1], in_repeat)
        elif op == sre_constants.BRANCH:
            problem = next((p for p in (_unsupported(b, in_repeat) for b in arg[1]) if p), None)
        else:
            problem = None
        if problem is not None:
            return problem
    return None


def resolve(regex: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topics whose whole name matches; an invalid pattern (validated on the way in) matches none."""
    try:
        pattern = _compiled(regex)
    except InvalidRegularExpression:
        return frozenset()
    return frozenset(name for name in topic_names if pattern.fullmatch(name))
