"""A fast "surely valid" check for the plain object schemas most tools declare.

Most ``inputSchema``s are an object of named properties, each of one JSON type (or an ``anyOf``
of such types, an optional parameter's ``string | null``), with some required and maybe no
others allowed. jsonschema spends ~70 Python calls to validate a two-property object against
one; this spends a loop. It only ever answers *surely valid*: anything it is not sure of
(an instance it cannot judge, a value of a type it does not check exactly, a missing required
property, a wrong type) goes to jsonschema, which decides and words the problem. So it can make
a check faster, never more lenient or stricter.

:func:`plain_check` looks at a schema once (when it is compiled) and returns the check, or
``None`` for a schema outside this subset (anything with a keyword other than those below).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["plain_check"]

# Keywords that constrain nothing: annotations (JSON Schema 2020-12 §9, and ``$comment``).
_ANNOTATIONS: Final = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"}
)
_OBJECT_KEYS: Final = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "$schema",
    "$id",
}
_PROPERTY_KEYS: Final = _ANNOTATIONS | {"type", "anyOf"}

# JSON type -> the Python types whose values surely have it. Exact types only: ``bool`` is an
# ``int`` subclass, and a float such as 1.0 *is* an integer to JSON Schema; both go to jsonschema.
_EXACT: Final[Mapping[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}

Check = Callable[[object], bool]


def _types(schema: object) -> frozenset[type] | None:
    """The Python types a property's schema surely accepts (empty: any value), or None if its
    schema is outside the subset."""
    if not isinstance(schema, Mapping) or not set(schema) <= _PROPERTY_KEYS:
        return None
    if "anyOf" in schema:
        if "type" in schema:
            return None
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            return None
        accepted: set[type] = set()
        for branch in branches:
            types = _types(branch)
            if not types or (isinstance(branch, Mapping) and "anyOf" in branch):
                return None  # a branch accepting anything, or nested: not worth judging here
            accepted |= types
        return frozenset(accepted)
    kind = schema.get("type")
    if kind is None:
        return frozenset()
    kinds = [kind] if isinstance(kind, str) else kind
    if not isinstance(kinds, list) or not kinds or not all(k in _EXACT for k in kinds):
        return None
    return frozenset(t for k in kinds for t in _EXACT[k])


def plain_check(schema: Mapping[str, Any]) -> Check | None:
    """``check(instance)`` is True only when ``instance`` surely conforms to ``schema``; None
    when ``schema`` is not a plain object schema."""
    if not set(schema) <= _OBJECT_KEYS or schema.get("type", "object") != "object":
        return None
    if schema.get("$schema") not in (None, "https://json-schema.org/draft/2020-12/schema"):
        return None  # another draft's keywords may differ: jsonschema's business
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)  # a schema there: not plain
    if (
        not isinstance(properties, Mapping)
        or not isinstance(required, list)
        or not isinstance(additional, bool)
    ):
        return None
    if not all(isinstance(name, str) for name in required):
        return None
    typed: dict[str, frozenset[type]] = {}
    for name, sub in properties.items():
        types = _types(sub)
        if types is None:
            return None
        if types:
            typed[name] = types
    needed = tuple(dict.fromkeys(required))
    known = frozenset(properties)
    if not typed and not needed and additional:
        return None  # accepts every object: the caller already skips those

    def check(instance: object) -> bool:
        if type(instance) is not dict:
            return False
        for name in needed:
            if name not in instance:
                return False
        for name, value in instance.items():
            types = typed.get(name)
            if types is not None:
                if type(value) not in types:
                    return False
            elif not additional and name not in known:
                return False
        return True

    return check
