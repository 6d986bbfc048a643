"""Resources and resource templates: merged, but never renamed.

A resource's URI is its identity (clients paste it, servers embed it in tool results), so
Manifold does not rewrite the URIs it lists. It builds a map URI -> server from every server's
list, keyed on each URI's normal form (:mod:`proxy.protocol.uris`), and an ordered list of URI
templates to route URIs that no list names. A URI a client names is normalized before it is
routed, so any spelling of a listed URI (``NOTE://b/%7Ex`` for ``note://b/~x``) finds its
listing: a URI some server lists exactly goes to that server, whatever another server's
template (even an earlier catch-all ``{+anything}``) would match; templates route only what no
list names. When two servers list the same URI (in any spelling), the first (config order)
keeps it; the second's copy is left out of the merged list and the collision is reported, never
silently resolved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import orjson

from proxy.catalog.apps import is_ui, server_spelling
from proxy.catalog.merge import ServerSlice
from proxy.catalog.uri_templates import CompiledTemplate, UriSubject, compile_template
from proxy.core.errors import InvalidParams
from proxy.protocol.uris import normalize_uri

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
    by_uri: Mapping[str, str]  # normal form -> server id
    listed_as: Mapping[str, str]  # normal form -> the URI as its server listed it
    resource_uris: tuple[str, ...]  # the normal form of each of ``resources``: what policy sees
    by_template: Mapping[str, str]  # uriTemplate -> server id (completion refs name templates)
    routes: tuple[_TemplateRoute, ...]
    collisions: tuple[UriCollision, ...]
    invalid: tuple[tuple[str, str], ...]
    generation: str
    templates_generation: str
    has_ui: bool = False  # lists an MCP Apps UI (proxy.catalog.apps): listed only with its tools

    def route(self, uri: str) -> str | None:
        """The server that serves ``uri`` (normalized: :func:`~proxy.protocol.uris.normalize_uri`):
        a listed resource first, then the first matching template."""
        server = self.by_uri.get(uri)
        if server is not None:
            return server
        route = self._template_route(uri)
        return None if route is None else route.server_id

    def template_of(self, uri: str) -> str | None:
        """The ``uriTemplate`` that routes ``uri`` (None for a listed URI, or one no template
        matches): what a read through a template is also judged as."""
        if uri in self.by_uri:
            return None
        route = self._template_route(uri)
        return None if route is None else route.template

    def _template_route(self, uri: str) -> _TemplateRoute | None:
        if not self.routes:
            return None
        # Linear in the URI, however long and whatever the templates (see uri_templates).
        subject = UriSubject(uri)
        for route in self.routes:
            if route.matcher.matches(subject):
                return route
        return None

    def spelling(self, uri: str) -> str:
        """What to send the server for the normalized ``uri``: its own spelling if it lists the
        URI (the same resource, named as the server knows it), else ``uri``; a UI's namespace
        taken off (:mod:`proxy.catalog.apps`)."""
        return server_spelling(self.listed_as.get(uri, uri))


def _same(value: str) -> str:
    return value


def _merge(
    slices: Sequence[ServerSlice],
    key: str,
    invalid: list[tuple[str, str]],
    canonical_of: Callable[[str], str] = _same,
) -> tuple[list[Mapping[str, Any]], dict[str, str], dict[str, str], list[UriCollision], str]:
    items: list[Mapping[str, Any]] = []
    owner: dict[str, str] = {}  # canonical value -> server id
    spelled: dict[str, str] = {}  # canonical value -> the value as listed
    collisions: list[UriCollision] = []
    digest = hashlib.sha256()
    for piece in slices:
        for index, item in enumerate(piece.items):
            value = item.get(key) if isinstance(item, Mapping) else None
            if not isinstance(value, str) or not value:
                invalid.append((piece.server_id, f"item #{index} has no string {key!r}"))
                continue
            try:
                canonical_value = canonical_of(value)
            except InvalidParams as exc:  # no client could name it: left out, and said why
                invalid.append((piece.server_id, f"item #{index} ({value!r}): {exc}"))
                continue
            if canonical_value in owner:
                collisions.append(UriCollision(value, owner[canonical_value], piece.server_id))
                continue
            try:
                canonical = orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
            except orjson.JSONEncodeError as exc:
                invalid.append((piece.server_id, f"item #{index} ({value!r}) is not JSON: {exc}"))
                continue
            owner[canonical_value] = piece.server_id
            spelled[canonical_value] = value
            items.append(item)
            digest.update(orjson.dumps(piece.server_id) + canonical + b"\n")
    return items, owner, spelled, collisions, digest.hexdigest()[:_GENERATION_HEX]


def build_resource_index(resources: Sequence[ServerSlice], templates: Sequence[ServerSlice]) -> ResourceIndex:
    """Merge every server's resources and templates (slices in config order)."""
    invalid: list[tuple[str, str]] = []
    listed, by_uri, listed_as, collisions, generation = _merge(resources, "uri", invalid, normalize_uri)
    template_items, by_template, _, template_collisions, templates_generation = _merge(
        templates, "uriTemplate", invalid
    )
    normal_of = {uri: normal for normal, uri in listed_as.items()}
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
        listed_as=MappingProxyType({normal: uri for normal, uri in listed_as.items() if normal != uri}),
        resource_uris=tuple(normal_of[item["uri"]] for item in listed),
        by_template=MappingProxyType(by_template),
        routes=routes,
        collisions=tuple(collisions + template_collisions),
        invalid=tuple(invalid),
        generation=generation,
        templates_generation=templates_generation,
        has_ui=any(is_ui(uri) for uri in by_uri),
    )


EMPTY_RESOURCES: Final[ResourceIndex] = build_resource_index((), ())
