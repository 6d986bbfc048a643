"""Every problem of an OpenAPI document, for ``manifold check``: what the schema of its OpenAPI
version says (``openapi-spec-validator``, a well-kept validator of both 3.0 and 3.1), and what
Manifold itself refuses (remote ``$ref``s, operations it cannot serve, an unknown security
scheme, no base URL). Pure: the document's data in, problems out.

The validator is run only on a document whose every ``$ref`` is local: it would fetch remote
ones itself, and reading a URL is not for ``check`` to do on a document's word.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any, Final

from proxy.config.openapi import OpenApiSource
from proxy.openapi.schemas import DocumentProblem
from proxy.openapi.security import scheme_of
from proxy.openapi.tools import plan_source

__all__ = ["MAX_PROBLEMS", "problems"]

MAX_PROBLEMS: Final = 100  # listed per document; a broken generator can produce thousands


def _remote_refs(node: Any, where: tuple[str, ...] = ()) -> Iterator[str]:
    stack: list[tuple[Any, tuple[str, ...]]] = [(node, where)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, Mapping):
            ref = value.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                yield f"{'.'.join(path) or '(top)'}: $ref {ref[:200]!r} is remote (refused)"
            stack.extend((v, (*path, str(k))) for k, v in value.items() if isinstance(v, Mapping | list))
        elif isinstance(value, list):
            stack.extend((v, (*path, str(i))) for i, v in enumerate(value) if isinstance(v, Mapping | list))


def _schema_problems(document: Mapping[str, Any]) -> Iterator[str]:
    from openapi_spec_validator import OpenAPIV30SpecValidator, OpenAPIV31SpecValidator

    version = str(document.get("openapi", ""))
    validator = OpenAPIV30SpecValidator if version.startswith("3.0") else OpenAPIV31SpecValidator
    for error in validator(document).iter_errors():
        path = ".".join(str(p) for p in getattr(error, "absolute_path", ()))
        yield f"{path or '(top)'}: {str(getattr(error, 'message', error))[:300]}"


def problems(document: Mapping[str, Any], source: OpenApiSource) -> list[str]:
    """What is wrong with ``document`` as ``source`` configures it, at most :data:`MAX_PROBLEMS`."""
    found = list(itertools.islice(_remote_refs(document), MAX_PROBLEMS))
    if not found:
        found += itertools.islice(_schema_problems(document), MAX_PROBLEMS)
    try:
        plans, skipped = plan_source(document, source)
        found += [f"{s.operation} is not served: {s.reason}" for s in skipped]
        if not plans:
            found.append("no operation is selected (see include and exclude)")
    except DocumentProblem as exc:
        found.append(str(exc))
    try:
        scheme_of(document, source.security_scheme)
    except DocumentProblem as exc:
        found.append(str(exc))
    return found[:MAX_PROBLEMS]
