"""An endpoint's view of the merged catalog: a selection of it, named in the endpoint's profile.

The catalog is merged once (:mod:`proxy.catalog.merge`); an endpoint shows a part of it. A
:class:`Selection` keeps a server's items when the server is selected and the item's glob key
matches one of the kind's globs: the **canonical** name for tools and prompts (what the policy
matches too, whatever spelling a client is shown), the URI or URI template for resources.

:func:`select_named` names what it keeps with the endpoint's :class:`NamingCodec` (its own
separator and maximum length), so one server's tool can be ``github.create_issue`` on one
endpoint and ``github__create_issue`` on another. Every entry keeps its route (server id,
original name) and its canonical name, so a call made with either spelling reaches the same
tool and the policy decides on the same name. Naming follows the merge's rules: a name that is
taken is disambiguated, and an unprefixed server's item named in another server's namespace (in
this profile's separator) is left out, so a namespace stays its server's in every view; so is
one named in Manifold's own namespace in this profile (``manifold__`` …), where the endpoint's
discovery meta-tools live.

Pure and deterministic: the same catalog and selection give the same view, and the view's
generation is a hash of its content, so a change to a server the endpoint does not show leaves
the endpoint's generation (and its clients' cursors) alone.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import orjson

from proxy.catalog.merge import Catalog, Entry, ServerSlice
from proxy.catalog.naming import RESERVED_PREFIX, NamingCodec

__all__ = ["Selection", "select_named", "select_slices"]

_GENERATION_HEX: Final = 16
_EVERYTHING: Final = ("*",)


def _matcher(globs: Sequence[str]) -> Callable[[str], bool]:
    if tuple(globs) == _EVERYTHING:
        return lambda _: True
    if not globs:
        return lambda _: False
    # fnmatch.translate anchors the end; re.match anchors the start. The globs are the
    # operator's (config), not a peer's.
    match = re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs)).match
    return lambda key: match(key) is not None


@dataclass(frozen=True)
class Selection:
    """What one endpoint shows: servers (None: all), and globs per kind."""

    servers: frozenset[str] | None = None
    tools: tuple[str, ...] = _EVERYTHING
    prompts: tuple[str, ...] = _EVERYTHING
    resources: tuple[str, ...] = _EVERYTHING

    def __post_init__(self) -> None:
        matchers = {kind: _matcher(getattr(self, kind)) for kind in ("tools", "prompts", "resources")}
        object.__setattr__(self, "_matchers", matchers)

    def keeps(self, kind: str, server_id: str, key: str) -> bool:
        """Whether an item of ``kind`` (``tools``, ``prompts``, ``resources``; templates are
        ``resources``) of ``server_id``, with glob key ``key``, is in the view."""
        if self.servers is not None and server_id not in self.servers:
            return False
        matchers: dict[str, Callable[[str], bool]] = self._matchers  # type: ignore[attr-defined]
        return matchers[kind](key)


def _squatted(original: str, namespaces: Mapping[str, str]) -> bool:
    return any(original.startswith(namespace) for namespace in namespaces)


def select_named(
    catalog: Catalog,
    kind: str,
    selection: Selection,
    codec: NamingCodec,
    prefixes: Mapping[str, str],
    renames: Mapping[tuple[str, str], str] | None = None,
) -> Catalog:
    """The entries of ``catalog`` (tools or prompts) that ``selection`` keeps, named by ``codec``.

    ``prefixes`` is every configured server's prefix (server id -> prefix), selected or not:
    the namespaces of this profile are kept apart across all of them. ``renames``: the names
    tool overrides show instead of the servers' own (:func:`~proxy.catalog.merge.build_catalog`).
    """
    namespaces = {codec.namespace(prefix): sid for sid, prefix in prefixes.items() if prefix}
    namespaces.setdefault(codec.namespace(RESERVED_PREFIX), "")  # "": Manifold's own
    entries: list[Entry] = []
    by_name: dict[str, Entry] = {}
    digest = hashlib.sha256()
    for entry in catalog.entries:
        if not selection.keeps(kind, entry.server_id, entry.canonical):
            continue
        prefix = prefixes.get(entry.server_id, "")
        route = (entry.server_id, entry.original_name)
        shown = renames.get(route, entry.original_name) if renames else entry.original_name
        if not prefix and _squatted(shown, namespaces):
            continue
        wanted = codec.render(prefix, shown)
        name = wanted
        if name in by_name:
            for attempt in itertools.count():
                name = codec.disambiguate(wanted, entry.server_id, entry.original_name, attempt=attempt)
                if name not in by_name:
                    break
        definition = dict(entry.definition)
        definition["name"] = name
        kept = Entry(name, entry.server_id, entry.original_name, definition, entry.canonical)
        by_name[name] = kept
        entries.append(kept)
        digest.update(orjson.dumps([entry.server_id, entry.original_name]))
        digest.update(orjson.dumps(definition, option=orjson.OPT_SORT_KEYS))
        digest.update(b"\n")
    return Catalog(
        entries=tuple(entries),
        by_name=MappingProxyType(by_name),
        collisions=(),  # the merge reported them; a view's renames follow from its profile
        invalid=(),
        generation=digest.hexdigest()[:_GENERATION_HEX],
    )


def select_slices(slices: Sequence[ServerSlice], selection: Selection, key: str) -> tuple[ServerSlice, ...]:
    """The resource (``key="uri"``) or template (``key="uriTemplate"``) slices, with only what
    ``selection`` keeps; an item without a string ``key`` is left for the merge to report."""
    kept: list[ServerSlice] = []
    for piece in slices:
        if selection.servers is not None and piece.server_id not in selection.servers:
            continue
        items = [
            item
            for item in piece.items
            if not isinstance(item, Mapping)
            or not isinstance(item.get(key), str)
            or selection.keeps("resources", piece.server_id, item[key])
        ]
        kept.append(ServerSlice(piece.server_id, piece.prefix, items))
    return tuple(kept)
