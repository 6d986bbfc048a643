"""Named endpoints: views of the one merged catalog, each served at ``/mcp/<name>``.

The catalogs are merged once (:class:`~proxy.views.catalogs.Catalogs`, the whole catalog at ``/mcp``).
Each configured endpoint is another :class:`~proxy.views.catalogs.Catalogs` that merges nothing: after
every merge and policy reload of the whole catalog it is shown ``view(snapshot)``, where
``view`` is the endpoint's :data:`ViewFunction` (by default :func:`selection_view`: the
endpoint's servers and globs, named in its naming profile). Paging, cursors, lookups and the
policy's per-identity filtering are then the same code for every endpoint, and each endpoint
tells only its own clients that a list changed, and only when its view did.

An endpoint only narrows: its view is taken from what the whole catalog serves (trust, pins and
the tools pins withhold included), and the policy still decides inside it; ``roles`` narrows who
may use the endpoint at all.

Progressive discovery is per endpoint too (:func:`make_discovery`): an endpoint's own
``discovery`` block, else the top-level one, which is also the plain ``/mcp``'s. Its meta-tools are
named in the endpoint's profile and search, describe and call only what the endpoint's view shows
the caller (so the names they return and take are the endpoint's spelling); what a session
promoted is its own, and a session belongs to one endpoint.

A view function is the extension point (``endpoint_inbounds(..., wrap=...)``): a wrapper
(``lambda snap: shape(inner(snap))``) may replace what an endpoint lists, as long as every entry
it shows keeps its route.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from proxy.catalog.merge import Catalog
from proxy.catalog.naming import NamingCodec
from proxy.catalog.resources import ResourceIndex, build_resource_index
from proxy.catalog.views import Selection, select_named, select_slices
from proxy.clients.contract import Endpoint, Inbound
from proxy.clients.sessions import Sessions
from proxy.config.discovery import DiscoverySettings
from proxy.config.model import Config, EndpointConfig
from proxy.enforce.access import Access, ServedTools, renames
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.views.catalogs import Catalogs, Snapshot

if TYPE_CHECKING:  # imported by make_discovery, for a config that turns discovery on
    from proxy.views.discovery import Discovery

__all__ = [
    "MakeDiscovery",
    "ViewFunction",
    "Views",
    "admits",
    "codec_of",
    "discovery_of",
    "endpoint_inbounds",
    "make_discovery",
    "selection_view",
    "views_of",
]

ViewFunction = Callable[[Snapshot], Snapshot]
MakeDiscovery = Callable[..., "Discovery | None"]  # make_discovery, with the config first


def codec_of(config: Config, endpoint: EndpointConfig | None) -> NamingCodec:
    """The naming profile of ``endpoint`` (the top-level ``naming`` where it gives none)."""
    naming = endpoint.naming if endpoint is not None and endpoint.naming is not None else config.naming
    return NamingCodec(naming.separator, naming.max_length)


def discovery_of(config: Config, endpoint: EndpointConfig | None) -> DiscoverySettings:
    """The discovery settings of ``endpoint``: its own block as a whole, else the top-level
    ``discovery`` (which ``endpoint=None``, the plain ``/mcp``, always has)."""
    if endpoint is not None and endpoint.discovery is not None:
        return endpoint.discovery
    return config.discovery


def make_discovery(
    config: Config, name: str, *, access: Access, sessions: Sessions, metrics: Metrics
) -> Discovery | None:
    """Progressive discovery for endpoint ``name`` (``""``: the plain ``/mcp``), its meta-tools
    named with the endpoint's separator and counted under its name; None where it is off."""
    endpoint = config.endpoints[name] if name else None
    settings = discovery_of(config, endpoint)
    if not settings.enabled:
        return None
    from proxy.views.discovery import Discovery  # its index (BM25F, stemmer) only when on

    on_answer = functools.partial(metrics.discovery_call, name)
    discovery = Discovery(
        settings, access, separator=codec_of(config, endpoint).separator, on_answer=on_answer
    )
    sessions.on_end(discovery.ended)  # what its sessions promoted is forgotten with them
    return discovery


def admits(endpoint: EndpointConfig | None, identity: Identity) -> bool:
    """Whether ``identity`` may use ``endpoint`` at all (its ``roles``; None: everyone)."""
    return endpoint is None or endpoint.roles is None or bool(identity.roles & set(endpoint.roles))


def _served(base: ServedTools, tools: Catalog) -> ServedTools:
    """What the whole catalog serves of each tool (trust, pins), under the view's names."""
    names = {(e.server_id, e.original_name): e.name for e in base.catalog.entries}
    definitions = {}
    effective = {}
    blocked = {}
    for entry in tools.entries:
        origin = names[(entry.server_id, entry.original_name)]
        definition = dict(base.definitions[origin])
        definition["name"] = entry.name
        definitions[entry.name] = definition
        if origin in base.effective:
            effective[entry.name] = base.effective[origin]
        if origin in base.blocked:
            blocked[entry.name] = base.blocked[origin]
    return ServedTools(tools, definitions, effective, blocked)


def selection_view(
    selection: Selection,
    codec: NamingCodec,
    prefixes: Mapping[str, str],
    renames: Mapping[tuple[str, str], str] | None = None,
) -> ViewFunction:
    """The default view: ``selection`` of the snapshot, tools and prompts named by ``codec``.

    Each kind is recomputed only when the snapshot's part it comes from changed.
    """
    # The last source of each part and what it gave: a part is recomputed only when its
    # source (an immutable object the whole catalog replaces on change) is another.
    tools_memo: list[tuple[ServedTools, tuple[Catalog, ServedTools]]] = []
    prompts_memo: list[tuple[Catalog, Catalog]] = []
    resources_memo: list[tuple[ResourceIndex, ResourceIndex]] = []

    def view(snapshot: Snapshot) -> Snapshot:
        if not tools_memo or tools_memo[0][0] is not snapshot.served:
            catalog = select_named(snapshot.served.catalog, "tools", selection, codec, prefixes, renames)
            tools_memo[:] = [(snapshot.served, (catalog, _served(snapshot.served, catalog)))]
        tools, served = tools_memo[0][1]
        if not prompts_memo or prompts_memo[0][0] is not snapshot.prompts:
            prompts_memo[:] = [
                (snapshot.prompts, select_named(snapshot.prompts, "prompts", selection, codec, prefixes))
            ]
        slices = {
            kind: tuple(p for p in pieces if selection.servers is None or p.server_id in selection.servers)
            for kind, pieces in snapshot.slices.items()
        }
        slices["resources"] = select_slices(snapshot.slices.get("resources", ()), selection, "uri")
        slices["resourceTemplates"] = select_slices(
            snapshot.slices.get("resourceTemplates", ()), selection, "uriTemplate"
        )
        if not resources_memo or resources_memo[0][0] is not snapshot.resources:
            index = build_resource_index(slices["resources"], slices["resourceTemplates"])
            resources_memo[:] = [(snapshot.resources, index)]
        return Snapshot(tools, served, prompts_memo[0][1], resources_memo[0][1], slices)

    return view


def endpoint_inbounds(
    config: Config,
    catalogs: Catalogs,
    inbound: Inbound,
    router: Callable[..., Endpoint],
    list_changed: Callable[..., None],
    wrap: Callable[[str, EndpointConfig, ViewFunction], ViewFunction] | None = None,
    discover: Callable[[str], Discovery | None] | None = None,
) -> dict[str, Inbound]:
    """What each endpoint's transports are given: ``inbound`` with the endpoint's own router
    (``router`` called with ``catalogs=`` its view of ``catalogs``, ``endpoint=`` its name,
    ``discovery=`` what ``discover(name)`` gives and ``own=None``), by name.
    ``list_changed(kind, endpoint=name)`` hears of the changes of its view. ``wrap(name, settings,
    view)`` may replace an endpoint's default view with one built on it."""
    found = {}
    for name, (settings, _, view) in views_of(config).items():
        if wrap is not None:
            view = wrap(name, settings, view)
        viewed = catalogs.viewed(name, view, on_change=functools.partial(list_changed, endpoint=name))
        found[name] = dataclasses.replace(
            inbound,
            endpoint=router(
                catalogs=viewed,
                endpoint=name,
                servers=settings.servers,
                discovery=discover(name) if discover is not None else None,
                # A client's own catalog (per_client servers) is of the whole catalog, not of this
                # view: it would show (and resolve) what the endpoint leaves out. The endpoint
                # shows those servers' shared lists; calls still go to the client's own connection.
                own=None,
            ),
            endpoint_name=name,
            admits=functools.partial(admits, settings),
        )
    return found


class Views:
    """Each endpoint's view, replaceable by a config reload (:mod:`proxy.app.reloader`); give
    :meth:`wrap` as ``endpoint_inbounds(..., wrap=)``."""

    def __init__(self) -> None:
        self._slots: dict[str, _Slot] = {}

    def wrap(self, name: str, settings: EndpointConfig, view: ViewFunction) -> ViewFunction:
        slot = self._slots[name] = _Slot(view)
        return slot

    def replace(self, name: str, view: ViewFunction) -> None:
        """Endpoint ``name`` shows ``view`` from the next merge on (the servers changed)."""
        self._slots[name].view = view

    def retire(self, name: str) -> None:
        """Endpoint ``name`` was removed or is served anew: its old view shows what it showed
        last, forever, so it never tells a client of a change again."""
        slot = self._slots.pop(name, None)
        if slot is not None and slot.last is not None:
            last = slot.last
            slot.view = lambda _: last


class _Slot:
    def __init__(self, view: ViewFunction) -> None:
        self.view = view
        self.last: Snapshot | None = None

    def __call__(self, snapshot: Snapshot) -> Snapshot:
        self.last = self.view(snapshot)
        return self.last


def views_of(config: Config) -> dict[str, tuple[EndpointConfig, NamingCodec, ViewFunction]]:
    """Each configured endpoint, its naming profile and its default view, by name."""
    servers = {s.id: s for s in config.enabled_servers()}
    prefixes = {sid: s.prefix for sid, s in servers.items()}
    names = renames(servers)
    found = {}
    for name, endpoint in config.endpoints.items():
        selection = Selection(
            servers=frozenset(endpoint.servers) if endpoint.servers is not None else None,
            tools=endpoint.tools,
            prompts=endpoint.prompts,
            resources=endpoint.resources,
        )
        codec = codec_of(config, endpoint)
        found[name] = (endpoint, codec, selection_view(selection, codec, prefixes, names))
    return found
