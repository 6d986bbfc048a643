"""An OpenAPI document's bytes to its data, and its operations as selected. Pure.

JSON or YAML (told apart by the first character that is not white space); OpenAPI 3.0 and 3.1.
Swagger 2.0 is refused with a message saying how to convert it. Bounded: the caller reads at
most ``max_document_bytes``; YAML aliases are refused (a few bytes of them can stand for
gigabytes once expanded), and so is nesting past :data:`MAX_NESTING`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
import yaml

from proxy.config.openapi import HTTP_METHODS, OpenApiSelection
from proxy.openapi.schemas import DocumentProblem

__all__ = ["MAX_NESTING", "Operation", "operations", "parse", "parse_data", "selected"]

MAX_NESTING: Final = 256


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation as the document gives it (``spec`` is its raw object)."""

    method: str  # lower case
    path: str
    spec: Mapping[str, Any]
    path_item: Mapping[str, Any]

    @property
    def operation_id(self) -> str | None:
        value = self.spec.get("operationId")
        return value if isinstance(value, str) and value else None

    @property
    def tags(self) -> tuple[str, ...]:
        tags = self.spec.get("tags")
        return tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else ()


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where installed


class _Shared(Exception):
    """One object reached twice: a YAML alias."""


def parse_data(data: bytes, *, where: str) -> dict[str, Any]:
    """The JSON or YAML object in ``data`` (a document, or one its ``$ref``s name), bounded.

    Raises:
        DocumentProblem: not JSON or YAML, not an object, nested too deep, YAML aliases.
    """
    start = data.lstrip()[:1]
    try:
        document = orjson.loads(data) if start in (b"{", b"[") else _yaml(data)
    except (orjson.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise DocumentProblem(f"{where}: not JSON or YAML ({str(exc)[:300]})") from None
    if not isinstance(document, dict):
        raise DocumentProblem(f"{where}: not an OpenAPI document (the top level is not an object)")
    try:
        if _deeper_than(document, MAX_NESTING):
            raise DocumentProblem(f"{where}: nested deeper than {MAX_NESTING} levels")
    except _Shared:
        raise DocumentProblem(
            f"{where}: YAML aliases are not accepted (they can expand without bound)"
        ) from None
    return document


def parse(data: bytes, *, where: str) -> dict[str, Any]:
    """The document in ``data`` (from ``where``, for messages).

    Raises:
        DocumentProblem: not JSON or YAML, not an object, nested too deep, not OpenAPI 3.x.
    """
    document = parse_data(data, where=where)
    if "swagger" in document:
        raise DocumentProblem(
            f"{where}: Swagger {str(document['swagger'])[:20]} is not served; convert it to OpenAPI 3 "
            "first (for example with swagger2openapi or the Swagger Editor)"
        )
    version = document.get("openapi")
    if not (isinstance(version, str) and re.fullmatch(r"3\.[01](\.\d+)?(-.+)?", version)):
        raise DocumentProblem(f"{where}: 'openapi' must be 3.0.x or 3.1.x (got {str(version)[:40]!r})")
    if not isinstance(document.get("paths", {}), dict):
        raise DocumentProblem(f"{where}: 'paths' is not an object")
    return document


def _yaml(data: bytes) -> Any:
    return yaml.load(data, Loader=_Loader)  # a safe loader; aliases are refused after


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests past ``limit``. Raises :class:`_Shared` when a container is reached
    twice (a YAML alias: the walk stops there, so a few bytes of aliases cannot make it long)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen: set[int] = set()
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if id(node) in seen:
            raise _Shared
        seen.add(id(node))
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return False


def operations(document: Mapping[str, Any]) -> Iterator[Operation]:
    """Every operation, in document order (path items given as ``$ref`` are not followed)."""
    paths = document.get("paths") or {}
    for path, item in paths.items():
        if not (isinstance(path, str) and path.startswith("/") and isinstance(item, Mapping)):
            continue
        for method in HTTP_METHODS:
            spec = item.get(method)
            if isinstance(spec, Mapping):
                yield Operation(method, path, spec, item)


def _path_matches(pattern: str, path: str) -> bool:
    """``*`` within one segment, ``**`` across segments; everything else literal. The regular
    expression has no nested quantifiers, so matching stays linear in practice."""
    regex = "".join(
        ".*" if part == "**" else "[^/]*".join(re.escape(piece) for piece in part.split("*"))
        for part in re.split(r"(\*\*)", pattern)
    )
    return re.fullmatch(regex, path) is not None


def _matches(selection: OpenApiSelection, operation: Operation, name: str, *, every: bool) -> bool:
    tests: list[bool] = []
    if selection.tags:
        tests.append(any(tag in selection.tags for tag in operation.tags))
    if selection.paths:
        tests.append(any(_path_matches(p, operation.path) for p in selection.paths))
    if selection.methods:
        tests.append(operation.method.upper() in selection.methods)
    if selection.operations:
        tests.append(operation.operation_id in selection.operations or name in selection.operations)
    return all(tests) if every else any(tests)


def selected(include: OpenApiSelection, exclude: OpenApiSelection, operation: Operation, name: str) -> bool:
    """Whether ``operation`` (to be the tool ``name``) is served: it matches every criterion of
    ``include`` and no criterion of ``exclude``."""
    if not include.empty and not _matches(include, operation, name, every=True):
        return False
    return exclude.empty or not _matches(exclude, operation, name, every=False)
