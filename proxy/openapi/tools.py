"""A document's selected operations as MCP tools, each with the plan of its HTTP call. Pure.

Naming: ``operationId``, or ``method_path`` (``get_pets_petId``), with every character outside
``[A-Za-z0-9_.-]`` replaced by ``_`` and cut to :data:`MAX_NAME` characters. Two operations
whose names collide after that keep the first (in document order) as it is; the others get ``-``
and 6 hex characters of a hash of their method and path (deterministic across replicas).

Arguments: each parameter is an argument of its own name; a name given by two locations (an
``id`` in the path and in the query), or one called ``body``, is qualified by its location for
all but the path one (``query_id``). The request body is the argument ``body``. Header
parameters named Accept, Content-Type or Authorization are ignored, as OpenAPI says. A
multipart body's file fields (a string of ``format: binary`` or ``base64``, or one with a
``contentMediaType``; or an array of them) are base64 strings in the tool's schema
(``contentEncoding: base64``), sent as file parts of the media type the document gives.

Annotations from HTTP semantics: GET and HEAD read-only and idempotent, PUT and DELETE
idempotent, DELETE destructive; every API is open-world. ``x-mcp-annotations`` on the operation
(an object of the four boolean hints) overrides them when the operator trusts the document's
extensions (``trust_extensions``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.config.openapi import OpenApiSelection, OpenApiSource
from proxy.openapi.document import Operation, operations, selected
from proxy.openapi.schemas import DocumentProblem, Resolver

#: Where a tool says which operation it calls (``GET /pets/{petId}``): ``manifold tools`` shows it.
OPERATION_KEY: Final = "dev.manifold/operation"

__all__ = [
    "MAX_NAME",
    "BodyPlan",
    "CallPlan",
    "ParamPlan",
    "Skipped",
    "ToolPlan",
    "plan_source",
    "plan_tools",
]

MAX_NAME: Final = 64
_INVALID: Final = re.compile(r"[^A-Za-z0-9_.-]+")
_UNDERSCORES: Final = re.compile(r"__+")
_TEMPLATE: Final = re.compile(r"\{([^{}/]+)\}")
# Accept, Content-Type, Authorization: OpenAPI says to ignore them. The rest frame the request or
# carry what Manifold sets (cookies from the credential placement): an argument may never set them.
_IGNORED_HEADERS: Final = frozenset(
    {"accept", "content-type", "authorization", "host", "content-length", "transfer-encoding", "connection"}
    | {"cookie", "te", "trailer", "upgrade", "keep-alive", "expect", "proxy-authorization"}
)
_LOCATIONS: Final = ("path", "query", "header", "cookie")
_HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
_JSON: Final = re.compile(r"application/(?:[\w.+-]+\+)?json")
_MEDIA: Final = re.compile(r"[\w.+-]{1,100}/[\w.+*-]{1,100}")
_BODY_TYPES: Final = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")


@dataclass(frozen=True, slots=True)
class ParamPlan:
    argument: str  # the tool argument
    name: str  # the parameter's own name
    location: str  # path, query, header, cookie
    style: str
    explode: bool
    allow_reserved: bool = False


@dataclass(frozen=True, slots=True)
class BodyPlan:
    media_type: str  # application/json, form, multipart or another the document names
    required: bool
    files: tuple[tuple[str, str], ...] = ()  # multipart: (field, media type) of its file fields


@dataclass(frozen=True, slots=True)
class CallPlan:
    method: str  # upper case
    path: str  # the template, {name} for path parameters
    params: tuple[ParamPlan, ...]
    body: BodyPlan | None
    wraps_output: bool  # the JSON success body is not an object: structuredContent is {"result": …}
    has_output: bool


@dataclass(frozen=True, slots=True)
class ToolPlan:
    operation: str  # METHOD /path, for people
    tool: dict[str, Any]
    call: CallPlan


@dataclass(frozen=True, slots=True)
class Skipped:
    operation: str
    reason: str


@dataclass(slots=True)
class _Arguments:
    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    params: list[ParamPlan] = field(default_factory=list)


def _sanitise(text: str) -> str:
    name = _UNDERSCORES.sub("_", _INVALID.sub("_", text)).strip("_.-")[:MAX_NAME].rstrip("_.-")
    return name or "operation"


def _name_of(operation: Operation) -> str:
    if operation.operation_id is not None:
        return _sanitise(operation.operation_id)
    return _sanitise(f"{operation.method}_{operation.path}")


def _hint_overrides(spec: Mapping[str, Any]) -> dict[str, bool]:
    given = spec.get("x-mcp-annotations")
    if not isinstance(given, Mapping):
        return {}
    return {k: v for k, v in given.items() if k in _HINTS and isinstance(v, bool)}


def _annotations(method: str, spec: Mapping[str, Any], trust_extensions: bool) -> dict[str, Any]:
    safe = method in ("get", "head", "options")
    hints: dict[str, Any] = {
        "readOnlyHint": safe,
        "destructiveHint": method == "delete",
        "idempotentHint": safe or method in ("put", "delete"),
        "openWorldHint": True,
    }
    return {**hints, **_hint_overrides(spec)} if trust_extensions else hints


def _parameters(resolver: Resolver, operation: Operation) -> list[dict[str, Any]]:
    """The operation's parameters over its path item's (same name and location: the operation's)."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for source in (operation.path_item.get("parameters"), operation.spec.get("parameters")):
        for raw in source if isinstance(source, list) else ():
            param, _ = resolver.deref(raw)
            if not isinstance(param, Mapping):
                raise DocumentProblem("a parameter is not an object")
            name, location = param.get("name"), param.get("in")
            if not isinstance(name, str) or not name or location not in _LOCATIONS:
                raise DocumentProblem(f"a parameter without a name or with 'in' {str(location)[:20]!r}")
            if location == "header" and name.lower() in _IGNORED_HEADERS:
                continue
            merged[(location, name)] = dict(param)
    return list(merged.values())


def _arguments(resolver: Resolver, operation: Operation) -> _Arguments:
    params = _parameters(resolver, operation)
    counts: dict[str, int] = {}
    for param in params:
        counts[param["name"]] = counts.get(param["name"], 0) + 1
    args = _Arguments()
    for param in sorted(params, key=lambda p: _LOCATIONS.index(p["in"])):
        name, location = param["name"], param["in"]
        argument = name
        if location != "path" and (counts[name] > 1 or name == "body"):
            argument = f"{location}_{name}"
        if argument in args.properties:
            raise DocumentProblem(f"two parameters would both be the argument {argument!r}")
        schema: Any = param.get("schema")
        content = param.get("content")
        if schema is None and isinstance(content, Mapping) and content:
            first = next(iter(content.values()))
            schema = first.get("schema") if isinstance(first, Mapping) else None
        prop = resolver.schema(schema if schema is not None else {})
        if isinstance(param.get("description"), str) and "description" not in prop:
            prop["description"] = param["description"]
        args.properties[argument] = prop
        if location == "path" or param.get("required") is True:
            args.required.append(argument)
        style = param.get("style") or ("simple" if location in ("path", "header") else "form")
        explode = param.get("explode")
        args.params.append(
            ParamPlan(
                argument,
                name,
                location,
                str(style),
                explode if isinstance(explode, bool) else style == "form",
                param.get("allowReserved") is True,
            )
        )
    return args


def _body(resolver: Resolver, operation: Operation, args: _Arguments) -> BodyPlan | None:
    raw = operation.spec.get("requestBody")
    if raw is None:
        return None
    body, _ = resolver.deref(raw)
    content = body.get("content") if isinstance(body, Mapping) else None
    if not isinstance(content, Mapping) or not content:
        return None
    media = next((m for m in content if _JSON.fullmatch(str(m))), None)
    media = media or next((m for m in _BODY_TYPES if m in content), None) or str(next(iter(content)))
    entry = content[media] if isinstance(content[media], Mapping) else {}
    schema = resolver.schema(entry.get("schema", {}))
    if not _JSON.fullmatch(media) and media not in _BODY_TYPES:
        schema = {"type": "string", **{k: v for k, v in schema.items() if k == "description"}}
    if isinstance(body.get("description"), str) and "description" not in schema:
        schema["description"] = body["description"]
    files: tuple[tuple[str, str], ...] = ()
    if media == "multipart/form-data":
        schema, files = _file_fields(schema, entry.get("encoding"))
    args.properties["body"] = schema
    required = body.get("required") is True
    if required:
        args.required.append("body")
    return BodyPlan(str(media), required, files)


def _file_type(schema: Any) -> str | None:
    """The media type of a file field's schema (one string), None when it is no file."""
    if not (isinstance(schema, Mapping) and schema.get("type") in ("string", None)):
        return None
    declared = schema.get("contentMediaType")
    if isinstance(declared, str) or schema.get("format") in ("binary", "base64"):
        return declared if isinstance(declared, str) else "application/octet-stream"
    return None


def _file_fields(schema: dict[str, Any], encoding: Any) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """A multipart body's schema with its file fields made base64 strings, and those fields."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return schema, ()
    files: list[tuple[str, str]] = []
    changed = dict(properties)
    for name, field_schema in properties.items():
        many = isinstance(field_schema, Mapping) and field_schema.get("type") == "array"
        media = _file_type(field_schema.get("items") if many else field_schema)
        if media is None:
            continue
        given = encoding.get(name) if isinstance(encoding, Mapping) else None
        if isinstance(given, Mapping) and isinstance(given.get("contentType"), str):
            media = given["contentType"].split(",")[0].strip()
        if not _MEDIA.fullmatch(media):
            media = "application/octet-stream"  # it goes into a part's header: a type, or none
        file = {
            "type": "string",
            "contentEncoding": "base64",
            "contentMediaType": media,
            "description": "a file: its content, base64-encoded",
        }
        changed[name] = (
            {**field_schema, "items": file}
            if many
            else {
                **{k: v for k, v in field_schema.items() if k in ("title", "description")},
                **file,
            }
        )
        files.append((str(name), media))
    return {**schema, "properties": changed}, tuple(files)


def _output(resolver: Resolver, operation: Operation) -> tuple[dict[str, Any] | None, bool]:
    responses = operation.spec.get("responses")
    if not isinstance(responses, Mapping):
        return None, False
    code = next((c for c in ("200", "201", "202", "203", "2XX") if c in responses), None)
    if code is None:
        return None, False
    response, _ = resolver.deref(responses[code])
    content = response.get("content") if isinstance(response, Mapping) else None
    if not isinstance(content, Mapping):
        return None, False
    media = next((m for m in content if _JSON.fullmatch(str(m))), None)
    if media is None or not isinstance(content[media], Mapping) or "schema" not in content[media]:
        return None, False
    schema = resolver.schema(content[media]["schema"])
    if schema.get("type") == "object":
        return schema, False
    if "type" not in schema and ("properties" in schema or "allOf" in schema):
        return {"type": "object", **schema}, False  # an object made of parts (allOf), say
    return {"type": "object", "properties": {"result": schema}, "required": ["result"]}, True


def _plan(resolver: Resolver, operation: Operation, name: str, trust_extensions: bool) -> ToolPlan:
    args = _arguments(resolver, operation)
    declared = {p.name for p in args.params if p.location == "path"}
    if undeclared := sorted(set(_TEMPLATE.findall(operation.path)) - declared):
        raise DocumentProblem(f"path parameter {undeclared[0]!r} is in the path but not declared")
    body = _body(resolver, operation, args)
    output, wraps = _output(resolver, operation)
    spec = operation.spec
    tool: dict[str, Any] = {
        "name": name,
        "inputSchema": {"type": "object", "properties": args.properties, "required": args.required},
        "annotations": _annotations(operation.method, spec, trust_extensions),
        "_meta": {OPERATION_KEY: f"{operation.method.upper()} {operation.path}"},
    }
    if isinstance(spec.get("summary"), str):
        tool["title"] = spec["summary"][:1024]
    description = spec.get("description") if isinstance(spec.get("description"), str) else spec.get("summary")
    label = f"{operation.method.upper()} {operation.path}"
    tool["description"] = f"{description}\n\n({label})" if isinstance(description, str) else label
    if not args.required:
        del tool["inputSchema"]["required"]
    if output is not None:
        tool["outputSchema"] = output
    params = tuple(args.params)
    call = CallPlan(operation.method.upper(), operation.path, params, body, wraps, output is not None)
    return ToolPlan(label, tool, call)


def _unique(names: Iterable[tuple[str, Operation]]) -> list[str]:
    taken: set[str] = set()
    out: list[str] = []
    for name, operation in names:
        if name in taken:
            digest = hashlib.sha256(f"{operation.method} {operation.path}".encode()).hexdigest()[:6]
            name = f"{name[: MAX_NAME - 7]}-{digest}"
            attempt = 0
            while name in taken:
                attempt += 1
                material = f"{operation.method} {operation.path} {attempt}"
                digest = hashlib.sha256(material.encode()).hexdigest()[:6]
                name = f"{name[: MAX_NAME - 7]}-{digest}"
        taken.add(name)
        out.append(name)
    return out


def plan_tools(
    document: Mapping[str, Any],
    include: OpenApiSelection,
    exclude: OpenApiSelection,
    *,
    max_operations: int,
    trust_extensions: bool = False,
) -> tuple[list[ToolPlan], list[Skipped]]:
    """The tools of the selected operations, in document order, and the operations left out
    because they cannot be served (each with its reason: one bad operation does not sink the rest).

    Raises:
        DocumentProblem: more than ``max_operations`` operations are selected.
    """
    openapi_30 = str(document.get("openapi", "")).startswith("3.0")
    resolver = Resolver(document, openapi_30=openapi_30)
    every = list(operations(document))
    names = _unique((_name_of(op), op) for op in every)
    chosen = [(op, n) for op, n in zip(every, names, strict=True) if selected(include, exclude, op, n)]
    if len(chosen) > max_operations:
        raise DocumentProblem(f"{len(chosen)} operations are selected; at most {max_operations} may be")
    plans: list[ToolPlan] = []
    skipped: list[Skipped] = []
    for operation, name in chosen:
        try:
            plans.append(_plan(resolver, operation, name, trust_extensions))
        except DocumentProblem as exc:
            skipped.append(Skipped(f"{operation.method.upper()} {operation.path}", str(exc)))
    return plans, skipped


def plan_source(document: Mapping[str, Any], source: OpenApiSource) -> tuple[list[ToolPlan], list[Skipped]]:
    """:func:`plan_tools` as ``source`` configures it.

    Raises:
        DocumentProblem: more than its ``max_operations`` operations are selected.
    """
    return plan_tools(
        document,
        source.include,
        source.exclude,
        max_operations=source.max_operations,
        trust_extensions=source.trust_extensions,
    )
