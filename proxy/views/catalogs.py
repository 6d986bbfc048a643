"""The merged catalogs: what every server listed, merged under namespaced names, and the view of
it each identity is served, page by page.

Server connections tell :meth:`Catalogs.listed` each list they drained; the merge is pure
(:mod:`proxy.catalog.merge`, :mod:`proxy.catalog.resources`), this keeps its result, the policy's
view of it (:class:`~proxy.enforce.access.Access`) and the encoded pages. When what clients see changes
(a merge, a policy reload) it says which kind changed through ``on_change``; telling the clients
is the composition root's wiring, not this module's business.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson
from cachetools import LRUCache

from proxy.catalog import apps
from proxy.catalog.cursors import CursorCodec, paginate
from proxy.catalog.merge import EMPTY_CATALOG, Catalog, Entry, ServerSlice, build_catalog, replace_slice
from proxy.catalog.naming import NamingCodec
from proxy.catalog.resources import EMPTY_RESOURCES, ResourceIndex, build_resource_index
from proxy.core.errors import InvalidParams, ResourceNotFound
from proxy.core.keys import fingerprint
from proxy.enforce.access import Access, ServedTools
from proxy.observe.metrics import Metrics
from proxy.outbound.lists import LIST_KINDS
from proxy.policy import Identity, Subject
from proxy.protocol import results
from proxy.protocol.results import CacheHint

__all__ = ["Catalogs", "HintSource", "Snapshot"]

logger = logging.getLogger("proxy.views.catalogs")

# Encoded pages kept, (view, generation, cursor, hint) -> bytes, least recently used first out,
# bounded in bytes: one identity's view is not another's, so their count grows with identities,
# and one page is as big as page_size definitions. Each page counts its bytes and _PAGE_OVERHEAD.
_PAGE_BYTES: Final = 32 * 1024 * 1024  # the whole catalog's, and each endpoint's view's
_OWN_PAGE_BYTES: Final = 2 * 1024 * 1024  # each client's own view (per_client servers): one owner
_PAGE_OVERHEAD: Final = 256  # the key and the entry, about
# Freshness of what Manifold answers 2026-07-28 callers from its catalog when no server said more.
_DEFAULT_TTL_MS: Final = 0


class HintSource(Protocol):
    """What a server's connection said of each list's freshness (2026-07-28 servers only)."""

    @property
    def cache_hints(self) -> Mapping[str, CacheHint]: ...


@dataclass(frozen=True)
class Snapshot:
    """Everything a client can be shown of the catalogs at one moment: what an endpoint's view
    (:mod:`proxy.views.endpoints`) takes and gives."""

    tools: Catalog
    served: ServedTools
    prompts: Catalog
    resources: ResourceIndex
    slices: Mapping[str, tuple[ServerSlice, ...]]  # list kind -> the slices it was merged from


class Catalogs:
    def __init__(
        self,
        prefixes: Mapping[str, str],  # server id -> its namespace prefix, in config order
        *,
        codec: NamingCodec,
        cursors: CursorCodec,
        access: Access,
        metrics: Metrics,
        page_size: int,
        hints: Mapping[str, HintSource],
        private: bool,
        on_change: Callable[[str], None],
        measured: bool = True,  # its sizes are the servers' (one client's own view's are not)
        name: str = "",  # the endpoint this serves ("": the whole catalog at /mcp)
        renames: Mapping[tuple[str, str], str] | None = None,  # tool overrides' names
    ) -> None:
        self._measured = measured
        self._renames = renames
        self.name = name
        self._followers: list[Callable[[bool], None]] = []
        self._prefixes = prefixes
        self._codec = codec
        self._cursors = cursors
        self._access = access
        self._metrics = metrics
        self._page_size = page_size
        self._hints = hints
        self._private = private  # a policy is in force: one identity's view is not another's
        self._on_change = on_change
        self._slices = {
            kind: tuple(ServerSlice(s, p, ()) for s, p in prefixes.items()) for kind in LIST_KINDS
        }
        self._slices_shown = False  # the slices are as servers listed them
        self.tools: Catalog = EMPTY_CATALOG
        self.served: ServedTools = access.serve_tools(EMPTY_CATALOG)
        self.prompts: Catalog = EMPTY_CATALOG
        self.resources: ResourceIndex = EMPTY_RESOURCES
        # MCP Apps: each UI a tool points at -> (its server, those tools); of self.served.
        self._links: tuple[ServedTools | None, dict[str, tuple[str, tuple[str, ...]]]] = (None, {})
        # A warm list request costs one dict lookup and no re-encoding of the definitions.
        self.max_page_bytes = _PAGE_BYTES if measured else _OWN_PAGE_BYTES
        self._pages: LRUCache[tuple[str, str, str | None, CacheHint | None], tuple[orjson.Fragment, int]] = (
            LRUCache(maxsize=self.max_page_bytes, getsizeof=_page_size)
        )

    # ---- what servers listed ---------------------------------------------------------------

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        """One server's whole list of ``kind`` as it drained it: merge, and say if it changed."""
        if server_id not in self._prefixes:  # removed by a reload as its connection stopped
            return
        slices = replace_slice(self._slices[kind], ServerSlice(server_id, self._prefixes[server_id], items))
        for problem in apps.namespace_items(server_id, kind, items)[1]:
            logger.warning("server %s: %s", server_id, problem)
        self._slices[kind] = slices
        if kind == "tools" and self._measured:
            self._metrics.catalog_size(server_id, len(items))
        named = kind in ("tools", "prompts")
        if self._merge_named(kind, slices) if named else self._merge_resources():
            self._on_change(kind)
        for follower in self._followers:
            follower(False)

    def slices(self, kind: str) -> Sequence[ServerSlice]:
        """What each server listed of ``kind``, in config order (a client's own view starts from it)."""
        return self._slices[kind]

    def _merge_named(self, kind: str, slices: Sequence[ServerSlice]) -> bool:
        old: Catalog = self.tools if kind == "tools" else self.prompts
        catalog = build_catalog(_shown(kind, slices), self._codec, self._renames if kind == "tools" else None)
        for collision in catalog.collisions:
            if collision not in old.collisions:
                logger.warning("%s name collision: %s", kind, collision.describe())
        for server, reason in catalog.invalid:
            logger.warning("server %s: skipped one of its %s: %s", server, kind, reason)
        changed = catalog.generation != old.generation
        if kind == "prompts":
            self.prompts = catalog
            self._access.judge_definitions(
                "prompt", [(e.server_id, e.canonical, e.definition) for e in catalog.entries]
            )
            return changed
        self.tools = catalog
        blocked_before = self.served.blocked
        self.served = self._access.serve_tools(catalog)
        return changed or self.served.blocked != blocked_before

    def _merge_resources(self) -> bool:
        before = self.resources
        self.resources = build_resource_index(
            _shown("resources", self._slices["resources"]),
            _shown("resourceTemplates", self._slices["resourceTemplates"]),
        )
        index = self.resources
        # Templates are definitions too (a poisoned description reaches every agent that lists
        # them): judged with the resources, by their uriTemplate, as the templates list shows them.
        self._access.judge_definitions(
            "resource",
            [
                *(
                    (index.by_uri[uri], uri, item)
                    for item, uri in zip(index.resources, index.resource_uris, strict=True)
                ),
                *((index.by_template[t["uriTemplate"]], t["uriTemplate"], t) for t in index.templates),
            ],
        )
        for collision in self.resources.collisions:
            if collision not in before.collisions:
                logger.warning("URI collision: %s", collision.describe())
        return (self.resources.generation, self.resources.templates_generation) != (
            before.generation,
            before.templates_generation,
        )

    def servers_changed(self) -> None:
        """The servers changed (a config reload): the prefixes and renames this was given (the
        caller changed them in place) are read again, the lists of a server no longer among them
        drop out, and each kind is merged anew. ``on_change`` hears once of each kind whose
        content changed: a restarted server's new overrides change what clients are shown of
        what it sent (its definitions are compared); a restarted server that lists the same
        again changes nothing (its lists are compared when it lists, :meth:`listed`)."""
        served = self.served
        for kind in LIST_KINDS:
            self._slices[kind] = tuple(
                ServerSlice(piece.server_id, self._prefixes[piece.server_id], piece.items)
                for piece in self._slices[kind]
                if piece.server_id in self._prefixes
            )
        changed = {kind for kind in ("tools", "prompts") if self._merge_named(kind, self._slices[kind])}
        if self.served.definitions != served.definitions:
            changed.add("tools")
        if self._merge_resources():
            changed.add("resources")
        self._pages.clear()
        for kind in ("tools", "prompts", "resources"):
            if kind in changed:
                self._on_change(kind)
        for follower in self._followers:
            follower(False)

    def policy_changed(self) -> None:
        """The policy was reloaded: what each identity may see may have changed."""
        self.served = self._access.serve_tools(self.tools)
        self._pages.clear()
        for kind in ("tools", "prompts", "resources"):
            self._on_change(kind)
        for follower in self._followers:
            follower(True)

    # ---- views of another catalog (endpoints) ------------------------------------------------

    def follow(self, follower: Callable[[bool], None]) -> None:
        """Call ``follower`` after every merge (``False``) and policy reload (``True``)."""
        self._followers.append(follower)

    def viewed(
        self, name: str, view: Callable[[Snapshot], Snapshot], on_change: Callable[[str], None]
    ) -> Catalogs:
        """The catalogs of endpoint ``name``: ``view`` of these (which also names its entries),
        taken again after every merge and policy reload, and paged and looked up as these are,
        its cursors its own. ``on_change`` hears of the changes of the view only."""
        catalogs = Catalogs(
            {},
            codec=self._codec,  # unused: a view merges nothing
            cursors=self._cursors,
            access=self._access,
            metrics=self._metrics,
            page_size=self._page_size,
            hints=self._hints,
            private=self._private,
            on_change=on_change,
            name=name,
        )
        catalogs.show(view(self.snapshot()))
        self.follow(
            lambda policy_changed: catalogs.show(view(self.snapshot()), policy_changed=policy_changed)
        )
        return catalogs

    def snapshot(self) -> Snapshot:
        # A view is handed the slices as clients are shown them (MCP Apps' UIs namespaced).
        slices = self._slices
        if not self._slices_shown:
            slices = {kind: _shown(kind, pieces) for kind, pieces in slices.items()}
        return Snapshot(self.tools, self.served, self.prompts, self.resources, dict(slices))

    def show(self, view: Snapshot, *, policy_changed: bool = False) -> None:
        """Serve ``view`` (an endpoint's view of another :class:`Catalogs`) instead of merging:
        tell ``on_change`` of each list whose content changed, or of all after a policy reload."""
        before = self.snapshot()
        self.tools, self.served, self.prompts, self.resources = (
            view.tools,
            view.served,
            view.prompts,
            view.resources,
        )
        self._slices = {kind: tuple(view.slices.get(kind, ())) for kind in LIST_KINDS}
        self._slices_shown = True  # a view's slices come namespaced (snapshot)
        if policy_changed:
            self._pages.clear()
        changed = {
            "tools": policy_changed
            or view.tools.generation != before.tools.generation
            or view.served.blocked != before.served.blocked
            # a restarted server's new override: the same lists, other definitions shown
            or (view.served is not before.served and view.served.definitions != before.served.definitions),
            "prompts": policy_changed or view.prompts.generation != before.prompts.generation,
            "resources": policy_changed
            or (view.resources.generation, view.resources.templates_generation)
            != (before.resources.generation, before.resources.templates_generation),
        }
        for kind, moved in changed.items():
            if moved:
                self._on_change(kind)

    # ---- lookups ---------------------------------------------------------------------------

    def tool(self, name: str) -> Entry | None:
        return self.tools.by_name.get(name)

    def prompt(self, name: str) -> Entry:
        """The prompt ``name`` names. Whether the policy hides it is the authorize stage's call.

        Raises:
            InvalidParams: no server lists a prompt of that name.
        """
        entry = self.prompts.by_name.get(name)
        if entry is None:
            raise InvalidParams(f"unknown prompt: {name}")
        return entry

    def route(self, uri: str) -> str:
        """The server a resource URI (or template) belongs to.

        Raises:
            ResourceNotFound: no server serves it.
        """
        server = self.resources.by_template.get(uri) or self.resources.route(uri)
        if server is None:
            raise ResourceNotFound.of(uri)
        return server

    def readable(self, uri: str, identity: Identity) -> str:
        """The server of a (normalized) URI ``identity`` may read; a hidden one looks exactly like
        a missing one.

        Raises:
            ResourceNotFound: no server serves it, or the policy hides it.
        """
        server = self.route_resource(uri, identity)
        if server is None or not self._access.allows(identity, Subject.resource(uri, server)):
            raise ResourceNotFound.of(uri)
        return server

    def route_resource(self, uri: str, identity: Identity) -> str | None:
        """The server of a concrete (normalized) resource URI, before the policy is asked; none
        through a quarantined template. A UI (``ui://``) is ``identity``'s only while it is shown
        a tool here that points at it (:mod:`proxy.catalog.apps`), listed or not; never routed
        by a template."""
        if not apps.is_ui(uri):
            # A URI only a quarantined template routes is withheld with it (until accepted).
            template = self.resources.template_of(uri) if self._access.held("resource") else None
            if template is not None and self._access.held("resource", template):
                return None
            return self.resources.route(uri)
        link = self._ui_links().get(uri)
        if link is None:
            return None
        server, tools = link
        served = self.served
        return server if any(self._access.tool_visible(served, t, identity) for t in tools) else None

    def _ui_links(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        served, links = self._links
        if served is not self.served:
            served = self.served
            entries = served.catalog.entries
            links = apps.links(
                (e.server_id, e.name, served.definitions.get(e.name, e.definition)) for e in entries
            )
            self._links = (served, links)
        return links

    def hides(self, subject: Subject, identity: Identity) -> bool:
        """Whether the policy hides ``subject`` from ``identity`` (not listed; a call to it must
        answer exactly as one to a missing thing, before anything else is checked)."""
        return not self._access.allows(identity, subject)

    def visible_definition(self, name: str, identity: Identity) -> Mapping[str, Any] | None:
        """The definition of tool ``name`` as ``identity`` is shown it, if it is shown it."""
        served = self.served
        if not self._access.tool_visible(served, name, identity):
            return None
        return served.definitions.get(name)

    # ---- pages -----------------------------------------------------------------------------

    def cache_hint(self, kind: str | None = None) -> CacheHint:
        """What a 2026-07-28 caller may do with an answer: for a merged list, the shortest
        freshness and the most restrictive scope of the servers in it (one that gave none: stale
        at once); and with a policy in force, what one identity is shown is not for another."""
        private = self._private
        default = CacheHint(_DEFAULT_TTL_MS, "public")
        if kind is None:
            return CacheHint(_DEFAULT_TTL_MS, "private" if private else "public")
        servers = [piece.server_id for piece in self._slices[kind] if piece.items]
        hints = [self._hints[s].cache_hints.get(kind, default) for s in servers]
        merged = results.merge_cache(hints) if hints else default
        return CacheHint(merged.ttl_ms, "private") if private else merged

    def page(
        self,
        kind: str,
        cursor: object,
        identity: Identity,
        *,
        hint: CacheHint | None = None,
        server_info: Mapping[str, Any] | None = None,
    ) -> orjson.Fragment:
        """One page of a merged list as ``identity`` may see it, encoded; shaped for a
        2026-07-28 caller when ``hint`` is given.

        Raises:
            InvalidParams: the cursor is not one Manifold issued for this view.
        """
        if cursor is None:
            self._metrics.list_request(kind)  # type: ignore[arg-type]
        else:
            self._metrics.list_page_served(kind)  # type: ignore[arg-type]
        items, generation = self._view(kind, identity)
        # A cursor is good only for the view it was cut from: the list kind and the identity (its
        # key, name and roles: one issuer's alice may not page through another's).
        # An endpoint's cursors are its own: one cut on /mcp/a is refused on /mcp/b.
        scope = (
            f"{kind}|{fingerprint(identity)}"
            if not self.name
            else f"{self.name}|{kind}|{fingerprint(identity)}"
        )
        key = (scope, generation, cursor if isinstance(cursor, str) else None, hint)
        cached = self._pages.get(key) if cursor is None or isinstance(cursor, str) else None
        if cached is not None:
            return cached[0]
        page = paginate(
            items,
            cursor=cursor,
            page_size=self._page_size,
            codec=self._cursors,
            generation=generation,
            scope=scope,
        )
        result: dict[str, Any] = {kind: page.items}
        if page.next_cursor is not None:
            result["nextCursor"] = page.next_cursor
        if hint is not None:
            result = results.stateless(result, server_info=dict(server_info or {}), cache=hint)
        encoded = orjson.dumps(result)
        fragment = orjson.Fragment(encoded)
        size = len(encoded) + _PAGE_OVERHEAD
        if size <= self.max_page_bytes:  # a bigger one is served, never kept
            self._pages[key] = (fragment, size)
        return fragment

    def cached_page_bytes(self) -> int:
        """Bytes the kept pages take, as counted against :attr:`max_page_bytes`."""
        return int(self._pages.currsize)

    def _view(self, kind: str, identity: Identity) -> tuple[Sequence[Mapping[str, Any]], str]:
        """What ``identity`` may see of one list, and the generation its cursors are bound to."""
        access = self._access
        if kind == "tools":
            served = self.served
            items = access.tools_view(served, identity)
            return items, f"{served.catalog.generation}.{access.version}.{len(served.blocked)}"
        if kind == "prompts":
            return access.prompts_view(self.prompts, identity), f"{self.prompts.generation}.{access.version}"
        index = self.resources
        templates = kind == "resourceTemplates"
        generation = index.templates_generation if templates else index.generation
        viewed = access.resources_view(index, identity, templates=templates)
        if templates or not index.has_ui:
            return viewed, f"{generation}.{access.version}"
        # A UI is listed only to an identity shown a tool here that points at it.
        served = self.served
        shown = [i for i in viewed if not apps.is_ui(i["uri"]) or self.route_resource(i["uri"], identity)]
        return shown, f"{generation}.{access.version}.{served.catalog.generation}.{len(served.blocked)}"


def _shown(kind: str, slices: Sequence[ServerSlice]) -> tuple[ServerSlice, ...]:
    """What servers listed as clients are shown it: MCP Apps' UIs namespaced (the problems are
    logged as a server lists, :meth:`Catalogs.listed`)."""
    return tuple(
        ServerSlice(s.server_id, s.prefix, apps.namespace_items(s.server_id, kind, s.items)[0])
        for s in slices
    )


def _page_size(entry: tuple[orjson.Fragment, int]) -> int:
    return entry[1]
