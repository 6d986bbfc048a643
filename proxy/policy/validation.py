"""Checking a call's arguments against the tool's ``inputSchema``, and a result's
``structuredContent`` against its ``outputSchema``, before either crosses Manifold.

Rules:

* The dialect is JSON Schema 2020-12 unless the schema's ``$schema`` names another known one
  (the spec's rule for tool schemas).
* Nothing is ever fetched: a ``$ref`` outside the schema (``https://…``) cannot be resolved and
  is reported as a problem. A gateway that fetched URLs named by servers would let any server
  make it reach anywhere.
* Format checking is off (``format`` is an annotation in 2020-12, and checking it is costly).
* Cost is bounded: a validator is compiled once per schema object and kept in an LRU cache; at
  most :data:`MAX_PROBLEMS` problems are collected per check; each message is shortened.
* Regular expressions (``pattern``, ``patternProperties``) run in linear time, by RE2
  (:mod:`proxy.policy.patterns`), when RE2 can run them.
* Where it runs is the caller's choice (this module is pure): :meth:`SchemaValidators.arguments_check`
  hands out a :class:`Check` that touches no shared cache, so it can run on a worker thread, and
  says whether the schema holds a regular expression only Python's backtracking ``re`` can run
  (a backreference, a lookaround), which may take a very long time even on short strings.
* A schema that is not valid JSON Schema is one problem (``the tool's inputSchema is invalid:
  …``), never an exception.
* jsonschema (with referencing, rpds and RE2) is imported by the first schema compiled, not
  when this module is: a Manifold whose clients never call a tool with a schema, or that
  validates nothing, never holds its few MiB.

Problems are sentences naming the JSON path: ``arguments.count: 'x' is not of type 'integer'``.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import orjson
from cachetools import LRUCache

if TYPE_CHECKING:
    import referencing
    import referencing.exceptions
    from jsonschema.protocols import Validator

__all__ = ["MAX_PROBLEMS", "Check", "SchemaValidators", "ToolLike", "check_alone"]

MAX_PROBLEMS: Final = 10
_MAX_MESSAGE: Final = 200
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class ToolLike(Protocol):
    """Anything with a name and a tool definition, such as a catalog :class:`~proxy.catalog.merge.Entry`."""

    @property
    def name(self) -> str: ...

    @property
    def definition(self) -> Mapping[str, Any]: ...


def _refuse(uri: str) -> referencing.Resource[Any]:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(uri)


@functools.cache
def _offline() -> referencing.Registry[Any]:
    """Only what is inside the schema itself (and the dialects' own metaschemas, which jsonschema
    adds) can be referenced."""
    import referencing

    return referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _unresolvable() -> type[referencing.exceptions.Unresolvable]:
    # Named only in an ``except`` clause, which is evaluated only when something was raised: by
    # then a validator exists, so jsonschema (and referencing) are loaded.
    from referencing.exceptions import Unresolvable

    return Unresolvable


@dataclass(frozen=True, slots=True)
class _Compiled:
    schema: object  # held so its id() cannot be reused while this entry is cached
    validator: Validator | None
    problem: str | None
    any_object: bool = False  # the schema accepts every JSON object: nothing to run for one
    backtracks: bool = False  # holds a regular expression only re runs: may cost minutes on any input
    surely_valid: Callable[[object], bool] | None = None  # a plain object schema's fast check


@dataclass(frozen=True, slots=True)
class Check:
    """One schema check, compiled and ready: calling it touches no shared state, so it may run
    on a worker thread while the event loop goes on (jsonschema validators are not mutated by
    validating)."""

    compiled: _Compiled
    what: str
    root: str

    @property
    def schema(self) -> object:
        return self.compiled.schema

    @property
    def backtracks(self) -> bool:
        """The schema holds a regular expression RE2 cannot run (see
        :func:`~proxy.policy.patterns.backtracks`): Python's ``re`` backtracks, and a pattern
        such as ``^(a+)+(?!b)$`` takes minutes on a 40-character string."""
        return self.compiled.backtracks

    def accepts_at_once(self, instance: object) -> bool:
        """The schema accepts every object and ``instance`` is one: nothing to run or measure."""
        return self.compiled.any_object and type(instance) is dict

    def __call__(self, instance: object) -> list[str]:
        """Problems with ``instance``; ``[]`` when it conforms."""
        return _run(self.compiled, instance, what=self.what, root=self.root)


# Keys that say nothing about an object's contents: a schema of only these (and "type": "object",
# and additionalProperties not false) accepts every object, and arguments are always an object.
_INERT_KEYS: Final = frozenset({"type", "$schema", "$id", "title", "description", "additionalProperties"})


def _accepts_any_object(schema: Mapping[str, Any]) -> bool:
    return (
        schema.get("type") in ("object", None)
        and schema.get("additionalProperties", True) is True
        and set(schema) <= _INERT_KEYS
    )


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _path(root: str, parts: Any) -> str:
    path = root
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _IDENTIFIER.fullmatch(str(part)):
            path += f".{part}"
        else:
            path += f"[{str(part)!r}]"
    return path


class SchemaValidators:
    """Compiled validators, cached per schema object (bounded, least recently used dropped).

    Tool definitions are read-only once in the catalog, so the schema object's identity is a
    safe key, and far cheaper than hashing its content on every call. A catalog refresh brings
    new objects, which compile once; the old ones age out.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        self._cache: LRUCache[int, _Compiled] = LRUCache(maxsize=maxsize)
        self.compilations = 0
        """How many schemas were compiled so far (each cache miss is one)."""

    def check_arguments(self, tool: ToolLike, arguments: Mapping[str, Any]) -> list[str]:
        """Problems with ``arguments`` for ``tool``; ``[]`` when they are valid.

        A tool without an ``inputSchema`` accepts anything (the catalog serves it as it is).
        Pass ``{}`` when the request had no ``arguments``.
        """
        schema = tool.definition.get("inputSchema")
        if schema is None:
            return []
        return self._check(schema, arguments, what="inputSchema", root="arguments")

    def check_structured_content(self, tool: ToolLike, result: Mapping[str, Any]) -> list[str]:
        """Problems with a ``tools/call`` result's ``structuredContent``; ``[]`` when fine.

        Checked only when the tool declares an ``outputSchema``. Then a result without
        ``structuredContent`` is a problem too, unless it is an error result (``isError``).
        """
        schema = tool.definition.get("outputSchema")
        if schema is None:
            return []
        if "structuredContent" not in result:
            if result.get("isError") is True:
                return []
            return ["structuredContent is missing, but the tool declares an outputSchema"]
        return self._check(schema, result["structuredContent"], what="outputSchema", root="structuredContent")

    def arguments_check(self, tool: ToolLike) -> Check | None:
        """The compiled check of ``tool``'s ``inputSchema`` (``None``: it has none, anything goes).

        Compiles on a cache miss: call it on the thread that owns this object, then run the
        check wherever suits.
        """
        schema = tool.definition.get("inputSchema")
        if schema is None:
            return None
        return Check(self._compiled(schema), "inputSchema", "arguments")

    def result_check(self, tool: ToolLike) -> Check | None:
        """The compiled check of ``tool``'s ``outputSchema`` against ``structuredContent``."""
        schema = tool.definition.get("outputSchema")
        if schema is None:
            return None
        return Check(self._compiled(schema), "outputSchema", "structuredContent")

    def _check(self, schema: object, instance: object, *, what: str, root: str) -> list[str]:
        return _run(self._compiled(schema), instance, what=what, root=root)

    def _compiled(self, schema: object) -> _Compiled:
        key = id(schema)
        cached = self._cache.get(key)
        if cached is not None and cached.schema is schema:
            return cached
        compiled = self._compile(schema)
        self._cache[key] = compiled
        return compiled

    def _compile(self, schema: object) -> _Compiled:
        self.compilations += 1
        return _compile(schema)


def _compile(schema: object) -> _Compiled:
    if not isinstance(schema, Mapping):
        return _Compiled(schema, None, f"a schema must be an object (got a {type(schema).__name__})")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    from proxy.policy.patterns import backtracks, linear_validator
    from proxy.policy.plain_schema import plain_check

    try:
        cls = validator_for(schema, default=Draft202012Validator)
        cls.check_schema(cast(Any, schema))
        validator = linear_validator(cls)(schema, registry=_offline(), format_checker=None)
    except SchemaError as exc:
        where = _path("", exc.absolute_path).lstrip(".") or "(root)"
        return _Compiled(schema, None, _shorten(f"{where}: {exc.message}"))
    except Exception as exc:  # a server's schema must never take a call down with it
        return _Compiled(schema, None, _shorten(f"{type(exc).__name__}: {exc}"))
    return _Compiled(
        schema, validator, None, _accepts_any_object(schema), backtracks(schema), plain_check(schema)
    )


def _run(compiled: _Compiled, instance: object, *, what: str, root: str) -> list[str]:
    if compiled.validator is None:
        return [f"the tool's {what} is invalid: {compiled.problem}"]
    if compiled.any_object and (type(instance) is dict or isinstance(instance, Mapping)):
        return []
    if compiled.surely_valid is not None and compiled.surely_valid(instance):
        return []  # else jsonschema decides, and words the problems
    try:
        errors = list(itertools.islice(compiled.validator.iter_errors(cast(Any, instance)), MAX_PROBLEMS + 1))
    except RecursionError:
        return [f"the tool's {what} recurses without end on this value"]
    except _unresolvable() as exc:
        return [f"the tool's {what} refers to {_unresolved(exc)!r}, which cannot be resolved (never fetched)"]
    problems = [_shorten(f"{_path(root, error.absolute_path)}: {error.message}") for error in errors]
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = ["(more problems not shown)"]
    return problems


def check_alone(schema: object, instance: object, what: str, root: str) -> list[str]:
    """Problems with ``instance`` against ``schema``: for a worker process, which gets copies (so
    they are cached by content, not identity) and may be killed mid-way."""
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    compiled = _ALONE_BY_CONTENT.get(key)
    if compiled is None:
        compiled = _compile(schema)
        _ALONE_BY_CONTENT[key] = compiled
    return _run(compiled, instance, what=what, root=root)


_ALONE_BY_CONTENT: Final[LRUCache[bytes, _Compiled]] = LRUCache(maxsize=64)


def _unresolved(exc: referencing.exceptions.Unresolvable) -> str:
    return str(getattr(exc, "ref", exc))
