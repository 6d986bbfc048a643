"""The search index of one view of the tools: lexical always, semantic when the model is there.

:func:`build_index` is CPU work (tokenizing, stemming, embedding: about a second for 10,000 tools)
and is run off the event loop by :class:`proxy.views.discovery.Discovery`. The semantic model
is loaded once per process on the first build that wants it (:class:`Semantic`); if the ``search``
extra is not installed, or discovery's ``semantic`` setting is ``off``, the index is lexical only
and says so (:attr:`ViewIndex.semantic` is ``None``).

:func:`warm` embeds every tool of the catalog when it changes (in a worker thread, one batch at a
time, only the tools whose text changed), so that the first search after a change finds the
vectors ready and only builds the view's lexical index.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from proxy.catalog.fusion import DEFAULT, Fusion, fuse
from proxy.catalog.search import Hit, ToolIndex

if TYPE_CHECKING:
    from proxy.enforce.access import ServedTools
    from proxy.views.semantic import SemanticIndex, VectorCache

__all__ = ["Semantic", "ToolCatalogs", "ViewIndex", "build_index", "warm"]

logger = logging.getLogger("proxy.views.discovery")


class Semantic:
    """The process's one model and vector cache, loaded on first use (in a worker thread);
    ``None`` for good if the ``search`` extra is not installed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded = False
        self._cache: VectorCache | None = None

    def cache(self) -> VectorCache | None:
        with self._lock:
            if not self._loaded:
                self._loaded = True
                from proxy.views.semantic import (
                    SemanticUnavailable,
                    StaticModel,
                    VectorCache,
                )

                try:
                    self._cache = VectorCache(StaticModel.load())
                except SemanticUnavailable as exc:
                    logger.info("tool search is lexical only: %s", exc)
            return self._cache


@dataclass(frozen=True, slots=True)
class ViewIndex:
    lexical: ToolIndex
    semantic: SemanticIndex | None
    definitions: Mapping[str, Mapping[str, Any]]  # name -> definition, of this view only

    def search(self, query: str, limit: int, fusion: Fusion = DEFAULT) -> tuple[Hit, ...]:
        """The best ``limit`` tools for ``query``: fused when there is a semantic index."""
        if self.semantic is None:
            return self.lexical.search(query, limit)
        depth = max(fusion.depth, limit)
        return fuse(self.lexical.search(query, depth), self.semantic.ranking(query, depth), limit, fusion)


def build_index(
    view: Sequence[Mapping[str, Any]], servers: Mapping[str, str], semantic: Semantic | None
) -> ViewIndex:
    """The index of ``view`` (tool definitions); ``servers``: tool name -> its server's text."""
    lexical = ToolIndex.build(view, servers=servers)
    cache = semantic.cache() if semantic is not None else None
    vectors = None
    if cache is not None:
        from proxy.views.semantic import SemanticIndex

        vectors = SemanticIndex.build(view, cache, servers=servers)
    return ViewIndex(lexical, vectors, {d["name"]: d for d in view})


class ToolCatalogs(Protocol):
    """What :func:`warm` reads of :class:`proxy.views.catalogs.Catalogs`."""

    @property
    def served(self) -> ServedTools: ...

    def follow(self, follower: Callable[[bool], None]) -> None: ...


def _embed_catalog(served: ServedTools, semantic: Semantic) -> None:
    cache = semantic.cache()
    if cache is None:
        return
    from proxy.views.semantic import tool_text

    by_name = served.catalog.by_name
    texts = [
        tool_text(definition, by_name[name].server_id if name in by_name else "")
        for name, definition in served.definitions.items()
    ]
    cache.embed(texts)


async def warm(catalogs: ToolCatalogs, semantic: Semantic) -> None:
    """Until cancelled: embed the catalog's tools now, and again after every change (merges that
    come in a burst are embedded once). Loads the model on the first pass."""
    changed = [anyio.Event()]  # the current one: set by the follower, replaced before each pass
    catalogs.follow(lambda _policy_changed: changed[0].set())
    limiter = anyio.CapacityLimiter(1)
    while True:
        await anyio.to_thread.run_sync(_embed_catalog, catalogs.served, semantic, limiter=limiter)
        await changed[0].wait()
        changed[0] = anyio.Event()  # before the next pass reads the catalog: no change is lost
