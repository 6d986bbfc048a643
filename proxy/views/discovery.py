"""What progressive discovery keeps at run time, and its answers to the meta-tools.

Every answer comes from the caller's own view of the tools (what ``tools/list`` would show that
identity without discovery: :meth:`proxy.enforce.access.Access.tools_view`), so a search, a description
or a call never tells of a tool the policy hides: a hidden name and a missing one answer alike.

A view's index (:mod:`proxy.views.search_index`: BM25F, and sentence vectors when the ``search``
extra is installed) is built the first time someone searches it after the catalog changed, in a
worker thread (:meth:`Discovery.prepare`; one build at a time), and kept while the view is (views
are cached per catalog generation, policy version and identity); identities with the same view
share one index. The vectors themselves are embedded when the catalog changes (:meth:`Discovery.warm`,
run by the gateway, also in a worker thread, only the tools whose text changed), so that build
mostly finds them cached.
``call_tool`` is not answered here: :meth:`Discovery.answer` returns a
:class:`Call`, which the router sends down the same path as a direct ``tools/call`` (policy,
validation, rate limits, audit under the real tool's name).

Each answer is told to ``on_answer(tool, outcome)`` (the metrics): ``tool`` is ``search_tools``,
``describe_tools`` or ``call_tool`` whatever the separator, ``outcome`` one of
:data:`META_OUTCOMES`, so the labels stay few.

``promote`` mode keeps, per handshake-era session, the names its searches found (at most
``max_promoted``, the oldest dropped first), lists them after the meta-tools, and tells that
session alone with ``notifications/tools/list_changed`` when they change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
from cachetools import LRUCache

from proxy.catalog.meta_tools import (
    MetaArgumentError,
    MetaNames,
    describe_result,
    meta_definitions,
    parse_call,
    parse_describe,
    parse_search,
    search_result,
)
from proxy.clients.session import ClientSession, InboundRequest
from proxy.config.discovery import DiscoverySettings
from proxy.core.errors import InvalidParams
from proxy.enforce.access import Access, ServedTools
from proxy.pipeline.context import tool_error
from proxy.protocol import jsonrpc
from proxy.views.search_index import Semantic, ToolCatalogs, ViewIndex, build_index, warm

__all__ = ["META_OUTCOMES", "Call", "Discovery", "MetaOutcome", "MetaTool"]

logger = logging.getLogger("proxy.config.discovery")

_INDEXES: Final = 256  # views whose index is kept
_LIST_CHANGED: Final = jsonrpc.notification("notifications/tools/list_changed")

MetaTool = Literal["search_tools", "describe_tools", "call_tool"]
#: ``no_results``: a search that found nothing, or a description of names none of which it knows.
MetaOutcome = Literal["ok", "no_results", "invalid_arguments"]
META_OUTCOMES: Final = frozenset({"ok", "no_results", "invalid_arguments"})


@dataclass(frozen=True, slots=True)
class Call:
    """``call_tool`` asked for a call of ``name``: the router makes it as a direct call."""

    name: str
    arguments: Any


# The model and its vector cache are the process's, shared by every endpoint's discovery.
_SEMANTIC: Final = Semantic()


class Discovery:
    def __init__(
        self,
        settings: DiscoverySettings,
        access: Access,
        *,
        separator: str,
        on_answer: Callable[[MetaTool, MetaOutcome], None] | None = None,
        semantic: Semantic | None = _SEMANTIC,
    ) -> None:
        self.settings = settings
        self._semantic = semantic if settings.semantic != "off" else None
        # Index builds are CPU-bound: one at a time, so a burst of catalog changes cannot take
        # every core (made on the first build: a limiter belongs to the loop it is used in).
        self._builds: anyio.CapacityLimiter | None = None
        self._on_answer = on_answer or (lambda tool, outcome: None)
        self.names = MetaNames.with_separator(separator)
        self._access = access
        self._definitions = meta_definitions(
            self.names,
            default_limit=settings.default_results,
            max_limit=settings.max_results,
            max_names=settings.max_describe,
        )
        # By the view object (kept in the value, so its id cannot be reused while cached) …
        self._by_view: LRUCache[int, tuple[Sequence[Mapping[str, Any]], ViewIndex]] = LRUCache(_INDEXES)
        # … and by content, so that identities shown the same tools share one index.
        self._by_content: LRUCache[tuple[str, tuple[str, ...]], ViewIndex] = LRUCache(_INDEXES)
        self._promoted: dict[str, dict[str, None]] = {}  # session id -> names, oldest first

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    async def warm(self, catalogs: ToolCatalogs) -> None:
        """Until cancelled: embed ``catalogs``' tools now and after every change (in a worker
        thread), so a search after a change finds their vectors ready; returns at once when this
        discovery ranks by words alone."""
        if self._semantic is not None:
            await warm(catalogs, self._semantic)

    def instructions(self) -> str:
        """What ``initialize`` and ``server/discover`` tell a client's model about finding tools."""
        names = self.names
        return (
            f"This gateway lists tools on demand: use {names.search} to find the tools for a task, "
            f"{names.describe} to see their arguments, and {names.call} to call one."
        )

    # ---- tools/list ------------------------------------------------------------------------

    def tools(self, served: ServedTools, caller: InboundRequest) -> list[Mapping[str, Any]]:
        """What ``tools/list`` shows ``caller``: the meta-tools, then its promoted tools that
        it may still see."""
        listed: list[Mapping[str, Any]] = list(self._definitions)
        promoted = self._promoted.get(_session_id(caller) or "")
        if promoted:
            view = self._access.tools_view(served, caller.identity)
            visible = {d["name"]: d for d in view}  # no index needed: tools/list never builds one
            listed += [visible[name] for name in promoted if name in visible]
        return listed

    def page(self, served: ServedTools, caller: InboundRequest, cursor: object) -> dict[str, Any]:
        """The whole list, in one page (it is short: the meta-tools and at most
        ``max_promoted`` tools).

        Raises:
            InvalidParams: a cursor was given; none is ever issued for this list.
        """
        if cursor is not None:
            raise InvalidParams("invalid cursor: this list has a single page; list again without one")
        return {"tools": self.tools(served, caller)}

    # ---- the meta-tools --------------------------------------------------------------------

    def answer(
        self, served: ServedTools, caller: InboundRequest, name: str, arguments: object
    ) -> dict[str, Any] | Call:
        """The result of meta-tool ``name``, or the :class:`Call` that ``call_tool`` asks for.
        Bad arguments are a tool result with ``isError`` naming the problem, as the spec has
        input errors of tools reported."""
        tool: MetaTool = "call_tool"
        try:
            if name == self.names.search:
                tool = "search_tools"
                return self._search(served, caller, arguments)
            if name == self.names.describe:
                tool = "describe_tools"
                names = parse_describe(arguments, max_names=self.settings.max_describe)
                definitions = self._indexed(served, caller).definitions
                self._on_answer(tool, "ok" if any(n in definitions for n in names) else "no_results")
                return describe_result(names, definitions)
            call = Call(*parse_call(arguments))
            self._on_answer(tool, "ok")  # whether the tool exists, the call itself tells (metrics)
            return call
        except MetaArgumentError as exc:
            self._on_answer(tool, "invalid_arguments")
            return tool_error(str(exc), outcome="invalid_arguments")

    def _search(self, served: ServedTools, caller: InboundRequest, arguments: object) -> dict[str, Any]:
        settings = self.settings
        query, limit = parse_search(
            arguments,
            default_limit=settings.default_results,
            max_limit=settings.max_results,
            max_query_chars=settings.max_query_chars,
        )
        indexed = self._indexed(served, caller)
        hits = indexed.search(query, limit)
        self._on_answer("search_tools", "ok" if hits else "no_results")
        if settings.mode == "promote" and hits:
            self._promote(caller, [hit.name for hit in hits])
        return search_result(hits, indexed.definitions)

    def _promote(self, caller: InboundRequest, names: Sequence[str]) -> None:
        session = _session_of(caller)
        if session is None:
            return  # a 2026-07-28 caller: no session to add tools to
        promoted = self._promoted.setdefault(session.id, {})
        before = list(promoted)
        for name in names:
            promoted.pop(name, None)
            promoted[name] = None  # found again: the newest
        while len(promoted) > self.settings.max_promoted:
            del promoted[next(iter(promoted))]
        if set(promoted) != set(before) and session.initialized:
            session.notify(_LIST_CHANGED)

    async def ended(self, session: ClientSession) -> None:
        """A session ended: forget what it promoted."""
        self._promoted.pop(session.id, None)

    # ---- the index of a view ---------------------------------------------------------------

    async def prepare(self, served: ServedTools, caller: InboundRequest) -> None:
        """Build the index of ``caller``'s view in a worker thread if it is not built yet, so
        that :meth:`answer` finds it ready and the event loop never tokenizes or embeds."""
        view = self._access.tools_view(served, caller.identity)
        if self._cached(served, view) is None:
            if self._builds is None:
                self._builds = anyio.CapacityLimiter(1)
            indexed = await anyio.to_thread.run_sync(
                build_index, view, _servers(served, view), self._semantic, limiter=self._builds
            )
            self._keep(served, view, indexed)

    def _indexed(self, served: ServedTools, caller: InboundRequest) -> ViewIndex:
        view = self._access.tools_view(served, caller.identity)
        indexed = self._cached(served, view)
        if indexed is None:  # not prepared (an in-memory caller): build it here
            indexed = build_index(view, _servers(served, view), self._semantic)
            self._keep(served, view, indexed)
        return indexed

    def _cached(self, served: ServedTools, view: Sequence[Mapping[str, Any]]) -> ViewIndex | None:
        """The index of ``view``: by the view object (cheap), else by its content (the names, so
        that identities shown the same tools share one index)."""
        cached = self._by_view.get(id(view))
        if cached is not None and cached[0] is view:
            return cached[1]
        indexed = self._by_content.get(_content(served, view))
        if indexed is not None:
            self._by_view[id(view)] = (view, indexed)
        return indexed

    def _keep(self, served: ServedTools, view: Sequence[Mapping[str, Any]], indexed: ViewIndex) -> None:
        self._by_content[_content(served, view)] = indexed
        self._by_view[id(view)] = (view, indexed)


def _content(served: ServedTools, view: Sequence[Mapping[str, Any]]) -> tuple[str, tuple[str, ...]]:
    return served.catalog.generation, tuple(definition["name"] for definition in view)


def _servers(served: ServedTools, view: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Tool name -> the text of its server (its id) for the index's ``server`` field."""
    by_name = served.catalog.by_name
    return {d["name"]: by_name[d["name"]].server_id for d in view if d["name"] in by_name}


def _session_of(caller: InboundRequest) -> ClientSession | None:
    session = caller.session
    return session if isinstance(session, ClientSession) else None


def _session_id(caller: InboundRequest) -> str | None:
    session = _session_of(caller)
    return session.id if session is not None else None
