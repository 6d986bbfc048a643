"""JSON Schema's regular expressions (``pattern``, ``patternProperties``) run by RE2, in time
linear in the string, so a server's schema cannot make a check backtrack for minutes.

jsonschema runs them with Python's ``re``, which backtracks: ``^(a+)+$`` takes seconds on 30
characters, and holds the GIL meanwhile, so no thread helps. :func:`linear_validator` gives a
validator class whose ``pattern``, ``patternProperties`` and ``additionalProperties`` (which
matches ``patternProperties`` too) use RE2 instead, with jsonschema's own error messages.

What RE2 cannot run, :func:`backtracks` reports, and the caller runs that schema where it can be
killed (a worker process: :mod:`proxy.pipeline.stages.validate`):

* a pattern RE2 refuses: backreferences, lookaround, possessive or atomic groups, a repeat count
  past 1000, a program past :data:`_MAX_MEM`. These are the constructs only a backtracking engine
  can run, and also the ones that make it blow up, so a length cap on the string would not make
  ``re`` safe (2**n steps for n characters);
* a ``$schema`` below the root: jsonschema then switches to its stock validator class there;
* ``unevaluatedProperties`` beside ``patternProperties``: jsonschema matches those with ``re``
  inside a helper that cannot be swapped out.

The dialect is ECMA-262 (what JSON Schema names), and RE2 is nearer to it than ``re`` is. The
ECMA escapes ``\\uXXXX`` become RE2's ``\\x{XXXX}``, and ``re``'s ``\\Z`` becomes ``\\z``. Known
differences from the ``re`` that ran before, each the ECMA-262 reading: ``\\d``, ``\\w`` and
``\\b`` are ASCII; ``\\s`` is ``[\\t\\n\\f\\r ]``; ``$`` matches only at the very end (``re``
also matched before a final newline, so ``^[a-z]+$`` let ``"abc\\n"`` through); ``a{,3}`` is
literal; ``[[:alpha:]]`` is a POSIX class.

RE2 is called through its extension module (``re2._re2``): the package's Python wrapper maps
match offsets back to characters on every call, about 25 µs, ten times the cost of the match.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, cast

from jsonschema import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend
from re2 import _re2  # type: ignore[import-untyped]

__all__ = ["backtracks", "linear_validator", "search"]

_MAX_MEM: Final = 1 << 20
"""RE2's memory budget per pattern (its program and DFA cache): past it a pattern is refused
(and goes the backtracking way), and a match falls back from the DFA to the slower but still
linear NFA. The default (8 MiB) times the patterns cached would be too much to hand a server."""

_CACHED_PATTERNS: Final = 1024
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH: Final = (-1, -1)
# One escape at a time, so "\\u0041" (an escaped backslash, then "u0041") is left alone.
_ESCAPE: Final = re.compile(r"\\(u[0-9A-Fa-f]{4}|Z|.)", re.DOTALL)


def _re2_syntax(pattern: str) -> str:
    def swap(escape: re.Match[str]) -> str:
        what = escape.group(1)
        if len(what) == 5:
            return "\\x{" + what[1:] + "}"
        return "\\z" if what == "Z" else escape.group(0)

    return _ESCAPE.sub(swap, pattern)


@functools.lru_cache(maxsize=_CACHED_PATTERNS)  # thread-safe: checks may run on worker threads
def _program(pattern: str) -> Any | None:
    """RE2's compiled ``pattern``, or ``None`` when RE2 cannot run it."""
    options = _re2.RE2.Options()
    options.log_errors = False  # a refusal is an answer here, not news for stderr
    options.never_capture = True  # only whether it matches
    options.max_mem = _MAX_MEM
    try:
        program = _re2.RE2(_re2_syntax(pattern).encode("utf-8", "surrogatepass"), options)
    except Exception:  # RE2 raises on what it cannot encode; either way the answer is "not here"
        return None
    return program if program.ok() else None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (``re.search`` semantics).

    RE2 when it can run ``pattern``; otherwise ``re``, which may backtrack: only schemas for
    which :func:`backtracks` said no get here with such a pattern on the event loop.
    """
    program = _program(pattern)
    if program is None:
        return re.search(pattern, text) is not None
    encoded = text.encode("utf-8", "surrogatepass")
    return bool(program.Match(_UNANCHORED, encoded, 0, len(encoded))[0] != _NO_MATCH)


def backtracks(schema: object) -> bool:
    """Whether checking a value against ``schema`` may run a regular expression with ``re``
    (see the module docstring); ``False`` for a schema without any."""
    patterns: list[str] = []
    nested_dialect = unevaluated = pattern_properties = False
    stack: list[tuple[object, bool]] = [(schema, True)]  # iterative: a schema may nest deep
    while stack:
        item, root = stack.pop()
        if isinstance(item, Mapping):
            nested_dialect |= not root and "$schema" in item
            unevaluated |= "unevaluatedProperties" in item
            if isinstance(found := item.get("pattern"), str):
                patterns.append(found)
            if isinstance(found := item.get("patternProperties"), Mapping):
                pattern_properties = True
                patterns.extend(key for key in found if isinstance(key, str))
            stack.extend((value, False) for value in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((value, False) for value in item)
    if not patterns:
        return False
    refused = any(_program(pattern) is None for pattern in patterns)
    return refused or nested_dialect or (unevaluated and pattern_properties)


# Keyword functions as jsonschema writes them (validator: Any, as its protocol lacks descend).
def _pattern(validator: Any, patrn: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patternProperties: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patternProperties.items():
        for k, v in instance.items():
            if search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterable[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for property in instance:
        if property not in properties and not any(search(p, property) for p in patterns):
            yield property


def _additional_properties(
    validator: Any, aP: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            listed = ", ".join(repr(extra) for extra in sorted(extras, key=str))
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


@functools.cache  # one class per dialect
def linear_validator(cls: type[Validator]) -> type[Validator]:
    """``cls`` with its regular expressions run by RE2 (when RE2 can run them)."""
    keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
    if "additionalProperties" in cls.VALIDATORS:
        keywords["additionalProperties"] = _additional_properties
    return cast(type[Validator], extend(cls, keywords))  # type: ignore[no-untyped-call]
