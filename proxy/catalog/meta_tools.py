"""The meta-tools of progressive discovery: their names, definitions, arguments and results.

With discovery on, ``tools/list`` shows three tools instead of the whole catalog::

    manifold.search_tools(query, limit)      ranked names, one-line descriptions, scores, why
    manifold.describe_tools(names)           full definitions, input and output schemas included
    manifold.call_tool(name, arguments)      calls a tool found so, like a direct tools/call

``search_tools`` and ``describe_tools`` declare an ``outputSchema`` (:data:`SEARCH_OUTPUT`,
:data:`DESCRIBE_OUTPUT`) and answer with ``structuredContent`` that conforms to it, and the same
JSON as one text block for clients that predate structured results.

Their descriptions are written for the model that reads them: agents ignore a search tool they
are not told they need (the gateway's tools are *not* listed, so a capability is missing only if
a search says so), give up after one empty search, and call found tools by shortened names; the
descriptions say each of these.

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

from proxy.catalog.fusion import MEANING
from proxy.catalog.naming import RESERVED_PREFIX
from proxy.catalog.search import FIELDS, Hit

__all__ = [
    "DESCRIBE_OUTPUT",
    "RESERVED_PREFIX",
    "SEARCH_OUTPUT",
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


_MATCHED: Final = [*(field.name for field in FIELDS), MEANING]

SEARCH_OUTPUT: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "tools": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "score": {"type": "number"},
                    "matched": {
                        "type": "array",
                        "items": {"type": "string", "enum": _MATCHED},
                        "description": "Fields sharing words with the query; 'meaning': near it in meaning",
                    },
                },
                "required": ["name", "score", "matched"],
            },
        }
    },
    "required": ["tools"],
}

DESCRIBE_OUTPUT: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "tools": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "object"},
                    "annotations": {"type": "object"},
                },
                "required": ["name", "inputSchema"],
            },
        },
        "unknown": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["tools"],
}


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
                "Find the tools for a task. Many more tools are available than are listed: search "
                "here before saying something cannot be done, whenever a task needs an action or "
                "data no listed tool gives. Describe the task in plain words ('what changed in my "
                "repo since yesterday'); returns the best tools first, each with a score and the "
                "parts of its definition that matched. If nothing fits, search again in other "
                f"words. Then {names.describe} shows a tool's arguments and {names.call} calls it, "
                "by the exact name returned."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "The task, in plain words (e.g. 'open a bug report on GitHub')",
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
            "outputSchema": SEARCH_OUTPUT,
            "annotations": {"title": "Search tools", **read_only},
        },
        {
            "name": names.describe,
            "title": "Describe tools",
            "description": (
                f"The full definitions of tools that {names.search} found: description, the "
                "arguments they take (inputSchema) and their structured result (outputSchema, when "
                f"declared). Read them before {names.call}. Names no tool has are listed under "
                "'unknown'."
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
            "outputSchema": DESCRIBE_OUTPUT,
            "annotations": {"title": "Describe tools", **read_only},
        },
        {
            "name": names.call,
            "title": "Call a tool",
            "description": (
                f"Call a tool found with {names.search}, by the exact name it returned, with the "
                f"arguments {names.describe} shows. Returns that tool's own result."
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


def _structured(value: dict[str, Any]) -> dict[str, Any]:
    """A result with ``structuredContent``, and the same JSON as text for older clients."""
    return {
        "content": [{"type": "text", "text": orjson.dumps(value).decode()}],
        "structuredContent": value,
        "isError": False,
    }


def _summary(definition: Mapping[str, Any], hit: Hit) -> dict[str, Any]:
    found: dict[str, Any] = {"name": definition["name"]}
    if isinstance(definition.get("title"), str):
        found["title"] = definition["title"]
    description = definition.get("description")
    if isinstance(description, str) and description:
        first = description.strip().split("\n", 1)[0]
        found["description"] = first if len(first) <= _SUMMARY_CHARS else first[: _SUMMARY_CHARS - 1] + "…"
    found["score"] = hit.score
    found["matched"] = list(hit.fields)
    return found


def search_result(hits: Sequence[Hit], definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``search_tools`` result (:data:`SEARCH_OUTPUT`): each hit's name, title, a one-line
    description, its score and the fields it matched in."""
    return _structured({"tools": [_summary(definitions[hit.name], hit) for hit in hits]})


def describe_result(names: Sequence[str], definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``describe_tools`` result (:data:`DESCRIBE_OUTPUT`): the definitions of ``names``
    found in ``definitions`` (the caller's own view), and the others under ``unknown``, hidden and
    missing alike. A definition without an ``inputSchema`` (the server's fault) is shown with an
    empty object schema, as the result's schema requires one."""
    found = [_described(definitions[name]) for name in names if name in definitions]
    unknown = [name for name in names if name not in definitions]
    described: dict[str, Any] = {"tools": found}
    if unknown:
        described["unknown"] = unknown
    return _structured(described)


def _described(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(definition.get("inputSchema"), Mapping):
        return definition
    return {**definition, "inputSchema": {"type": "object"}}
