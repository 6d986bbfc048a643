"""MCP's HTTP request headers, pure: the value codec, and tool arguments mirrored into headers.

At revision 2026-07-28 a Streamable HTTP request mirrors parts of its body into headers
(``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``, and ``Mcp-Param-{Token}`` for each
argument a tool's ``inputSchema`` annotates with ``x-mcp-header``) so that intermediaries can
route without parsing JSON; a server must refuse a request whose headers and body disagree.
Header *names* are case-insensitive and values case-sensitive; optional whitespace around a
value is not part of it (RFC 9110 §5.5). A value that is not plain printable ASCII travels as
``=?base64?{base64 of its UTF-8}?=``.

Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.errors import HeaderMismatch

__all__ = [
    "METHOD_HEADER",
    "NAME_HEADER",
    "PARAM_HEADER_PREFIX",
    "ROUTING_HEADERS",
    "VERSION_HEADER",
    "X_MCP_HEADER",
    "Headers",
    "ParamHeader",
    "check_param_headers",
    "decode_header_value",
    "encode_header_value",
    "param_headers",
    "x_mcp_header_problem",
    "x_mcp_headers",
]

# Header names as ASGI gives them: lower case.
VERSION_HEADER: Final = "mcp-protocol-version"
METHOD_HEADER: Final = "mcp-method"
NAME_HEADER: Final = "mcp-name"
PARAM_HEADER_PREFIX: Final = "mcp-param-"
ROUTING_HEADERS: Final = (VERSION_HEADER, METHOD_HEADER, NAME_HEADER)
X_MCP_HEADER: Final = "x-mcp-header"  # the inputSchema annotation that makes a Mcp-Param-* header

_OWS: Final = " \t"


@dataclass(frozen=True, slots=True)
class Headers:
    """Request headers as the ladder reads them: names lower-cased, optional whitespace trimmed,
    and which names came more than once (first-copy and last-copy readers would disagree)."""

    values: Mapping[str, str]
    repeated: frozenset[str] = frozenset()

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Headers:
        values: dict[str, str] = {}
        repeated: set[str] = set()
        for name, value in pairs:
            key = name.lower()
            if key in values:
                repeated.add(key)
            values[key] = value.strip(_OWS)
        return cls(values, frozenset(repeated))

    def get(self, name: str) -> str | None:
        return self.values.get(name)


_SENTINEL: Final = re.compile(r"=\?base64\?(.*)\?=", re.DOTALL)
# Printable ASCII: what a header value may carry as it is.
_HEADER_SAFE: Final = re.compile(r"[\x20-\x7E]*")


def encode_header_value(value: str) -> str:
    """``value`` as a header carries it: verbatim when it is printable ASCII without edge
    whitespace that does not itself look like the sentinel, else ``=?base64?…?=`` of its UTF-8."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip(_OWS) and not _SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def decode_header_value(value: str | None) -> str | None:
    """The value a header carries, sentinel decoded; ``None`` for a malformed sentinel (bad or
    non-canonical base64, bad UTF-8), which then matches no body value."""
    if value is None:
        return None
    sentinel = _SENTINEL.fullmatch(value)
    if sentinel is None:
        return value
    payload = sentinel.group(1)
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode("ascii") != payload:
            return None  # non-canonical (padding bits set, say): an encoder never sends that
        return decoded.decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


# ---- x-mcp-header: tool arguments mirrored into Mcp-Param-* ----------------------------------

_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: a field name
# Never "number": floats do not round-trip through text the same way everywhere.
_HEADER_TYPES: Final = frozenset({"string", "integer", "boolean"})
# JSON Schema 2020-12 keywords whose values are schemas. Only ``properties`` keeps a position
# statically reachable; crossing any other leaves the chain. ``$ref`` is never followed.
_ONE_SCHEMA: Final = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_SCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAPS: Final = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})


@dataclass(frozen=True, slots=True)
class ParamHeader:
    """One ``x-mcp-header`` annotation: the argument at ``path`` travels as ``Mcp-Param-{token}``."""

    path: tuple[str, ...]
    token: str
    type: str  # string | integer | boolean

    @property
    def header(self) -> str:
        return f"Mcp-Param-{self.token}"


def _positions(schema: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema position: (its chain of ``properties`` keys, or None once off such a chain)."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), schema)]
    while stack:  # explicit, so a deep schema cannot exhaust the recursion limit
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                stack.extend(((*path, k) if path is not None else None, v) for k, v in value.items())
            elif keyword in _ONE_SCHEMA:
                stack.append((None, value))
            elif keyword in _SCHEMA_LISTS and isinstance(value, list):
                stack.extend((None, v) for v in value)
            elif keyword in _SCHEMA_MAPS and isinstance(value, dict):
                stack.extend((None, v) for v in value.values())


def x_mcp_header_problem(schema: Any) -> str | None:
    """Why a tool's ``inputSchema`` breaks the ``x-mcp-header`` rules, or None when it does not.

    An annotation must sit on a property reachable from the root through ``properties`` keys
    only, be an RFC 9110 token, be on a string, integer or boolean property, and be unique
    (case-insensitively) in the schema. Clients on HTTP drop a tool whose schema breaks them.
    """
    seen: dict[str, str] = {}
    for path, node in _positions(schema):
        if X_MCP_HEADER not in node:
            continue
        if not path:
            return f"{X_MCP_HEADER} is not on a property reachable through 'properties' alone"
        where = ".".join(path)
        token = node[X_MCP_HEADER]
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return f"property {where!r}: {X_MCP_HEADER} must be an HTTP token"
        if node.get("type") not in _HEADER_TYPES:
            return f"property {where!r}: {X_MCP_HEADER} is allowed on string, integer and boolean only"
        if token.lower() in seen:
            return f"property {where!r}: {X_MCP_HEADER} {token!r} repeats that of {seen[token.lower()]!r}"
        seen[token.lower()] = where
    return None


def x_mcp_headers(schema: Any) -> tuple[ParamHeader, ...]:
    """The annotations of a valid schema; none for one :func:`x_mcp_header_problem` refuses
    (a conforming client drops that tool and mirrors nothing, so there is nothing to check)."""
    if x_mcp_header_problem(schema) is not None:
        return ()
    return tuple(
        ParamHeader(path, node[X_MCP_HEADER], node["type"])
        for path, node in _positions(schema)
        if path and X_MCP_HEADER in node
    )


def _value_at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _render(value: Any) -> str | None:
    """An argument as its header carries it, or None when it has no header form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        try:
            return str(value)
        except ValueError:  # an int with more digits than Python will print
            return None
    return None


def param_headers(specs: Iterable[ParamHeader], arguments: Mapping[str, Any]) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers a ``tools/call`` with ``arguments`` carries (none for an
    absent or null argument)."""
    headers: dict[str, str] = {}
    for spec in specs:
        rendered = _render(_value_at(arguments, spec.path))
        if rendered is not None:
            headers[spec.header] = encode_header_value(rendered)
    return headers


_DECIMAL: Final = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def _matches(spec: ParamHeader, value: Any, rendered: str, decoded: str) -> bool:
    if (
        spec.type == "integer"
        and not isinstance(value, bool)
        and (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
        and _DECIMAL.fullmatch(decoded)
    ):
        # Numerically, exactly (42 = 42.0), without a float round trip.
        whole, _, fraction = decoded.partition(".")
        return fraction.strip("0") == "" and int(whole) == int(value)
    return decoded == rendered


def check_param_headers(specs: Iterable[ParamHeader], arguments: Mapping[str, Any], headers: Headers) -> None:
    """Each annotated argument and its ``Mcp-Param-*`` header come together and agree (after
    decoding), or are absent together (a null argument is absent).

    Raises:
        HeaderMismatch: naming the header.
    """
    for spec in specs:
        key = spec.header.lower()
        raw = headers.get(key)
        value = _value_at(arguments, spec.path)
        argument = ".".join(spec.path)
        if raw is not None and key in headers.repeated:
            raise HeaderMismatch(f"the {spec.header} header appears more than once")
        rendered = _render(value) if value is not None else None
        if rendered is None:
            if raw is not None:
                raise HeaderMismatch(f"the {spec.header} header is sent but the argument {argument!r} is not")
            continue
        if raw is None:
            raise HeaderMismatch(f"the {spec.header} header is missing for the argument {argument!r}")
        decoded = decode_header_value(raw) if _HEADER_SAFE.fullmatch(raw) else None
        if decoded is None:
            raise HeaderMismatch(f"the {spec.header} header is not a valid header value")
        if not _matches(spec, value, rendered, decoded):
            raise HeaderMismatch(f"the {spec.header} header does not match the argument {argument!r}")
