"""The meta-tools of progressive discovery: their names, definitions, arguments and results.

With discovery on, ``tools/list`` shows three tools instead of the whole catalog::

    manifold.search_tools(query, limit)      ranked names and one-line descriptions
    manifold.describe_tools(names)           full definitions, inputSchema included
    manifold.call_tool(name, arguments)      calls a tool found so, like a direct tools/call

They live in the namespace of the reserved prefix :data:`RESERVED_PREFIX` (``manifold`` plus the
configured separator): the configuration refuses it as a server's prefix, and the merge skips an
unprefixed server's tool named in it (:mod:`proxy.catalog.merge`), so no server can list a tool
that shadows or impersonates one of these.

Pure: arguments in, values or :class:`MetaArgumentError` out; results are plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from proxy.catalog.naming import RESERVED_PREFIX
from proxy.catalog.search import Hit

__all__ = [
    "RESERVED_PREFIX",
    "MetaArgumentError",
    "MetaNames",
    "describe_result",
    "meta_definitions",
    "parse_call",
    "parse_describe",
    "parse_search",
    "search_result",
]

_SUMMARY_CHARS: Final = 240  # of a description in a search result: enough to choose by


class MetaArgumentError(ValueError):
    """A meta-tool was called with arguments it cannot take; the message says which and why."""


@dataclass(frozen=True, slots=True)
class MetaNames:
    search: str
    describe: str
    call: str

    @classmethod
    def with_separator(cls, separator: str) -> MetaNames:
        space = f"{RESERVED_PREFIX}{separator}"
        return cls(f"{space}search_tools", f"{space}describe_tools", f"{space}call_tool")

    def __contains__(self, name: object) -> bool:
        return name in (self.search, self.describe, self.call)


def meta_definitions(
    names: MetaNames, *, default_limit: int, max_limit: int, max_names: int
) -> tuple[dict[str, Any], ...]:
    """The three definitions ``tools/list`` shows in discovery mode."""
    read_only = {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    return (
        {
            "name": names.search,
            "title": "Search tools",
            "description": (
                "Find the tools that can do a task, among every tool this gateway offers you. "
                "Describe the task in a few words; returns the best matching tool names with a "
                f"short description, best first. Then {names.describe} shows a tool's arguments, "
                f"and {names.call} calls it."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "The task, in words (e.g. 'create a GitHub issue')",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": max_limit,
                        "default": default_limit,
                        "description": "How many tools to return at most",
                    },
                },
                "required": ["query"],
            },
            "annotations": {"title": "Search tools", **read_only},
        },
        {
            "name": names.describe,
            "title": "Describe tools",
            "description": (
                "The full definitions (description and input schema) of tools named by "
                f"{names.search}. Names it does not know are listed under 'unknown'."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "names": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": max_names,
                        "description": "Tool names, as search_tools returned them",
                    }
                },
                "required": ["names"],
            },
            "annotations": {"title": "Describe tools", **read_only},
        },
        {
            "name": names.call,
            "title": "Call a tool",
            "description": (
                f"Call a tool found with {names.search} by its name, with its arguments as "
                f"{names.describe} shows them. Returns that tool's own result."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name"},
                    "arguments": {"type": "object", "description": "The tool's arguments"},
                },
                "required": ["name"],
            },
            "annotations": {"title": "Call a tool", "openWorldHint": True},
        },
    )


def _arguments(arguments: object) -> Mapping[str, Any]:
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise MetaArgumentError('"arguments" must be an object')
    return arguments


def parse_search(
    arguments: object, *, default_limit: int, max_limit: int, max_query_chars: int
) -> tuple[str, int]:
    """``(query, limit)`` of a ``search_tools`` call.

    Raises:
        MetaArgumentError: ``query`` is not a string or longer than ``max_query_chars``, or
            ``limit`` is not an integer from 1 to ``max_limit``.
    """
    given = _arguments(arguments)
    query = given.get("query")
    if not isinstance(query, str):
        raise MetaArgumentError('search_tools needs a string "query": the task, in words')
    if len(query) > max_query_chars:
        raise MetaArgumentError(
            f"the query is {len(query)} characters; at most {max_query_chars} are searched "
            "(discovery.max_query_chars): describe the task in fewer words"
        )
    limit = given.get("limit", default_limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_limit:
        raise MetaArgumentError(f'"limit" must be an integer from 1 to {max_limit}')
    return query, limit


def parse_describe(arguments: object, *, max_names: int) -> tuple[str, ...]:
    """The names a ``describe_tools`` call asks about, without repeats, in order.

    Raises:
        MetaArgumentError: ``names`` is not a list of 1 to ``max_names`` strings.
    """
    names = _arguments(arguments).get("names")
    if (
        not isinstance(names, list)
        or not 1 <= len(names) <= max_names
        or not all(isinstance(name, str) for name in names)
    ):
        raise MetaArgumentError(f'describe_tools needs "names": a list of 1 to {max_names} tool names')
    return tuple(dict.fromkeys(names))


def parse_call(arguments: object) -> tuple[str, Any]:
    """``(name, arguments)`` of a ``call_tool`` call; the arguments are checked by the call itself.

    Raises:
        MetaArgumentError: ``name`` is not a string.
    """
    given = _arguments(arguments)
    name = given.get("name")
    if not isinstance(name, str):
        raise MetaArgumentError('call_tool needs a string "name": the tool to call')
    return name, given.get("arguments")


def _text_result(value: Mapping[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": orjson.dumps(value).decode()}], "isError": False}


def _summary(definition: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"name": definition["name"]}
    if isinstance(definition.get("title"), str):
        found["title"] = definition["title"]
    description = definition.get("description")
    if isinstance(description, str) and description:
        first = description.strip().split("\n", 1)[0]
        found["description"] = first if len(first) <= _SUMMARY_CHARS else first[: _SUMMARY_CHARS - 1] + "…"
    return found


def search_result(hits: Sequence[Hit], definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``search_tools`` result: each hit's name, title and a one-line description."""
    return _text_result({"tools": [_summary(definitions[hit.name]) for hit in hits]})


def describe_result(names: Sequence[str], definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``describe_tools`` result: the definitions of ``names`` found in ``definitions`` (the
    caller's own view), and the others under ``unknown``, hidden and missing alike."""
    found = [definitions[name] for name in names if name in definitions]
    unknown = [name for name in names if name not in definitions]
    described: dict[str, Any] = {"tools": found}
    if unknown:
        described["unknown"] = unknown
    return _text_result(described)
