"""Resources and resource templates: merged, but never renamed.

A resource's URI is its identity (clients paste it, servers embed it in tool results), so
Manifold does not rewrite URIs. It builds a map URI -> server from every server's list, and an
ordered list of URI templates to route URIs that no list names. When two servers list the same
URI, the first (config order) keeps it; the second's copy is left out of the merged list and the
collision is reported, never silently resolved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import orjson

from proxy.catalog.merge import ServerSlice
from proxy.catalog.uri_templates import CompiledTemplate, UriSubject, compile_template

__all__ = ["EMPTY_RESOURCES", "ResourceIndex", "UriCollision", "build_resource_index"]

_GENERATION_HEX: Final = 16


@dataclass(frozen=True, slots=True)
class UriCollision:
    uri: str
    kept_by: str
    also_listed_by: str

    def describe(self) -> str:
        return (
            f"{self.also_listed_by!r} lists {self.uri!r}, which {self.kept_by!r} already lists; "
            f"reads go to {self.kept_by!r}"
        )


@dataclass(frozen=True, slots=True)
class _TemplateRoute:
    matcher: CompiledTemplate
    server_id: str
    template: str


@dataclass(frozen=True)
class ResourceIndex:
    resources: tuple[Mapping[str, Any], ...]
    templates: tuple[Mapping[str, Any], ...]
    by_uri: Mapping[str, str]
    by_template: Mapping[str, str]  # uriTemplate -> server id (completion refs name templates)
    routes: tuple[_TemplateRoute, ...]
    collisions: tuple[UriCollision, ...]
    invalid: tuple[tuple[str, str], ...]
    generation: str
    templates_generation: str

    def route(self, uri: str) -> str | None:
        """The server that serves ``uri``: a listed resource first, then the first matching template."""
        server = self.by_uri.get(uri)
        if server is not None:
            return server
        if not self.routes:
            return None
        # Linear in the URI, however long and whatever the templates (see uri_templates).
        subject = UriSubject(uri)
        for route in self.routes:
            if route.matcher.matches(subject):
                return route.server_id
        return None


def _merge(
    slices: Sequence[ServerSlice], key: str, invalid: list[tuple[str, str]]
) -> tuple[list[Mapping[str, Any]], dict[str, str], list[UriCollision], str]:
    items: list[Mapping[str, Any]] = []
    owner: dict[str, str] = {}
    collisions: list[UriCollision] = []
    digest = hashlib.sha256()
    for piece in slices:
        for index, item in enumerate(piece.items):
            value = item.get(key) if isinstance(item, Mapping) else None
            if not isinstance(value, str) or not value:
                invalid.append((piece.server_id, f"item #{index} has no string {key!r}"))
                continue
            if value in owner:
                collisions.append(UriCollision(value, owner[value], piece.server_id))
                continue
            try:
                canonical = orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
            except orjson.JSONEncodeError as exc:
                invalid.append((piece.server_id, f"item #{index} ({value!r}) is not JSON: {exc}"))
                continue
            owner[value] = piece.server_id
            items.append(item)
            digest.update(orjson.dumps(piece.server_id) + canonical + b"\n")
    return items, owner, collisions, digest.hexdigest()[:_GENERATION_HEX]


def build_resource_index(resources: Sequence[ServerSlice], templates: Sequence[ServerSlice]) -> ResourceIndex:
    """Merge every server's resources and templates (slices in config order)."""
    invalid: list[tuple[str, str]] = []
    listed, by_uri, collisions, generation = _merge(resources, "uri", invalid)
    template_items, by_template, template_collisions, templates_generation = _merge(
        templates, "uriTemplate", invalid
    )
    routes = tuple(
        _TemplateRoute(
            compile_template(item["uriTemplate"]), by_template[item["uriTemplate"]], item["uriTemplate"]
        )
        for item in template_items
    )
    return ResourceIndex(
        resources=tuple(listed),
        templates=tuple(template_items),
        by_uri=MappingProxyType(by_uri),
        by_template=MappingProxyType(by_template),
        routes=routes,
        collisions=tuple(collisions + template_collisions),
        invalid=tuple(invalid),
        generation=generation,
        templates_generation=templates_generation,
    )


EMPTY_RESOURCES: Final[ResourceIndex] = build_resource_index((), ())
