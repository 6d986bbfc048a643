"""An OpenAPI schema as a self-contained JSON Schema: ``$ref``s within the document inlined,
OpenAPI 3.0's own keywords turned into JSON Schema's, extensions dropped. Pure.

Bounded against hostile documents: a reference that leads back to itself (a recursive schema)
is cut where it recurs, to ``{}`` (any value) with a description saying so; nesting past
:data:`MAX_DEPTH` is cut the same way; a schema that grows past ``max_nodes`` once inlined
(references fanning out: a "billion laughs" made of ``$ref``) raises :class:`DocumentProblem`.
A ``$ref`` to another file or URL raises it too: only the document itself is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote

__all__ = ["MAX_DEPTH", "MAX_NODES", "DocumentProblem", "Resolver"]

MAX_DEPTH: Final = 32  # schema nesting kept; deeper is cut to {}
MAX_NODES: Final = 20_000  # objects and arrays one inlined schema may hold
_DROPPED: Final = frozenset({"discriminator", "xml", "externalDocs", "example", "nullable"})


class DocumentProblem(ValueError):
    """The document cannot be used as it is; the message says where and why."""


class Resolver:
    """Inlines references of one document (its parsed data)."""

    def __init__(self, document: Mapping[str, Any], *, openapi_30: bool, max_nodes: int = MAX_NODES) -> None:
        self._document = document
        self._openapi_30 = openapi_30
        self._max_nodes = max_nodes
        self._nodes = 0

    def target(self, ref: str) -> Any:
        """What a local reference (``#/components/...``) points at.

        Raises:
            DocumentProblem: the reference is remote, malformed or points at nothing.
        """
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise DocumentProblem(
                f"$ref {str(ref)[:200]!r} is not within the document (remote references are refused)"
            )
        node: Any = self._document
        if ref in ("#", "#/"):
            return node
        if not ref.startswith("#/"):
            raise DocumentProblem(f"$ref {ref[:200]!r} is not a JSON pointer")
        for raw in ref[2:].split("/"):
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise DocumentProblem(f"$ref {ref[:200]!r} points at nothing")
        return node

    def deref(self, node: Any, seen: tuple[str, ...] = ()) -> tuple[Any, tuple[str, ...]]:
        """``node`` with any chain of top-level ``$ref`` followed (parameters, bodies, responses).

        Raises:
            DocumentProblem: a remote, dangling or circular chain.
        """
        for _ in range(64):
            if not (isinstance(node, Mapping) and "$ref" in node):
                return node, seen
            ref = node["$ref"]
            if ref in seen:
                raise DocumentProblem(f"$ref {str(ref)[:200]!r} refers to itself")
            seen = (*seen, ref)
            node = self.target(ref)
        raise DocumentProblem("a chain of more than 64 $refs")

    def schema(self, node: Any) -> dict[str, Any]:
        """``node`` (a schema) as a self-contained JSON Schema object.

        Raises:
            DocumentProblem: a remote or dangling reference, or the schema grew past the bound.
        """
        self._nodes = 0
        result = self._convert(node, 0, ())
        return result if isinstance(result, dict) else {}

    def _count(self) -> None:
        self._nodes += 1
        if self._nodes > self._max_nodes:
            raise DocumentProblem(f"a schema grows past {self._max_nodes} nodes once its $refs are inlined")

    def _convert(self, node: Any, depth: int, refs: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            self._count()
            return [self._convert(item, depth + 1, refs) for item in node]
        if not isinstance(node, Mapping):
            return node
        self._count()
        if depth > MAX_DEPTH:
            return {"description": f"(nested deeper than {MAX_DEPTH} levels: not described)"}
        if "$ref" in node:
            ref = node["$ref"]
            if ref in refs:
                return {"description": f"(recursive: {str(ref).rsplit('/', 1)[-1][:100]})"}
            resolved = self._convert(self.target(ref), depth + 1, (*refs, ref))
            # 3.1: siblings of $ref apply too (a description, say); 3.0 ignores them.
            if not self._openapi_30 and isinstance(resolved, dict):
                siblings = {k: v for k, v in node.items() if k != "$ref" and isinstance(k, str)}
                if siblings:
                    return {**resolved, **self._convert(siblings, depth, refs)}
            return resolved
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str) or key.startswith("x-") or key in _DROPPED:
                continue
            if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                if isinstance(value, Mapping):
                    out[key] = {str(name): self._convert(sub, depth + 1, refs) for name, sub in value.items()}
                continue
            out[key] = self._convert(value, depth + 1, refs) if isinstance(value, Mapping | list) else value
        if self._openapi_30:
            _from_30(node, out)
        return out


def _from_30(node: Mapping[str, Any], out: dict[str, Any]) -> None:
    """OpenAPI 3.0's dialect in ``out`` made JSON Schema: nullable, boolean exclusive bounds."""
    if node.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        # 3.0.3 wants null listed in a nullable enum; documents (GitHub's) and servers take
        # nullable to allow it anyway, and a result checked against a stricter schema is withheld.
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    for exclusive, bound in (("exclusiveMaximum", "maximum"), ("exclusiveMinimum", "minimum")):
        flag = out.get(exclusive)
        if isinstance(flag, bool):
            del out[exclusive]
            if flag and bound in out:
                out[exclusive] = out.pop(bound)
