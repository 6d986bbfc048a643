"""A server's lists (tools, prompts, resources, resource templates): which it offers, and every
page of one, guarded against servers that page forever or list without end: at most
``max_pages`` pages (``catalog.max_server_pages``) and ``max_items`` items of each kind
(``limits.max_server_items``; the first ones are kept).

:func:`drain` does no I/O itself: it is handed ``fetch``, which sends one list request (on the
connection's link) and returns its result, so the paging rules are tested without a server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.errors import RemoteError, ServerProtocolError
from proxy.protocol.results import CacheHint, hint_of, merge_cache

__all__ = ["CHANGED", "LIST_KINDS", "Drained", "Fetch", "drain", "offered"]

# Its lines are the connection's, as they were before this module split off from it.
logger = logging.getLogger("proxy.outbound.connection")

# kind -> (the capability that offers it, its list method). The kind is also the result key.
LIST_KINDS: Final[dict[str, tuple[str, str]]] = {
    "tools": ("tools", "tools/list"),
    "prompts": ("prompts", "prompts/list"),
    "resources": ("resources", "resources/list"),
    "resourceTemplates": ("resources", "resources/templates/list"),
}
# A server's list_changed notification -> the kinds it makes stale.
CHANGED: Final[dict[str, tuple[str, ...]]] = {
    "notifications/tools/list_changed": ("tools",),
    "notifications/prompts/list_changed": ("prompts",),
    "notifications/resources/list_changed": ("resources", "resourceTemplates"),
}

# Sends one list request (method, params) and returns its result; raises as a request does.
Fetch = Callable[[str, dict[str, Any] | None], Awaitable[Any]]


def offered(capabilities: Mapping[str, Any]) -> list[str]:
    """The kinds of list a server with these capabilities offers, in :data:`LIST_KINDS` order."""
    return [kind for kind, (capability, _) in LIST_KINDS.items() if capability in capabilities]


@dataclass(frozen=True, slots=True)
class Drained:
    """One list, as far as it was drained."""

    items: list[dict[str, Any]]
    # The server's last page ended the list (no nextCursor). False when it was cut short (a bad
    # or repeated cursor, too many pages) or the server has no such list (-32601).
    ended: bool
    # What the server said of the list's freshness (ttlMs, cacheScope), merged over its pages;
    # None when a page said nothing.
    hint: CacheHint | None = None
    # The list was cut at ``max_items`` (limits.max_server_items): the server listed more.
    capped: bool = False


async def drain(
    fetch: Fetch, kind: str, *, max_pages: int, server_id: str, max_items: int = 10_000
) -> Drained:
    """Every page of one list, at most ``max_pages`` of them and ``max_items`` items (the first
    ones; no further page is asked for once the list is full, and the cut is logged once).

    A server that offers a capability but not one of its lists (resources without templates,
    say) answers -32601: that list is empty, not a broken server.

    Raises:
        RemoteError: the server refused a page (but -32601 before any item: an empty list).
        ServerProtocolError: a page without the list's array.
        ServerUnavailable, ServerTimeout: as ``fetch`` raises them.
    """
    method = LIST_KINDS[kind][1]
    pages: list[CacheHint | None] = []
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    cursor: str | None = None
    for _ in range(max_pages):
        try:
            result = await fetch(method, {"cursor": cursor} if cursor else None)
        except RemoteError as exc:
            if exc.error.get("code") == -32601 and not items:
                return Drained([], ended=False)
            raise
        page = result.get(kind) if isinstance(result, dict) else None
        if not isinstance(page, list):
            raise ServerProtocolError(server_id, f"it answered {method} without a {kind!r} array")
        items.extend(item for item in page if isinstance(item, dict))  # anything else names nothing
        pages.append(hint_of(result))
        if len(items) > max_items or (len(items) == max_items and result.get("nextCursor") is not None):
            logger.warning(
                "server %s: %s listed more than %d %s; keeping the first %d (limits.max_server_items)",
                server_id, method, max_items, kind, max_items,
            )  # fmt: skip
            return Drained(items[:max_items], ended=False, hint=_merged(pages), capped=True)
        cursor = result.get("nextCursor")
        if cursor is None:
            return Drained(items, ended=True, hint=_merged(pages))
        if not isinstance(cursor, str) or not cursor or cursor in seen:
            logger.warning(
                "server %s: %s returned a bad or repeated cursor %r; keeping the %d items so far",
                server_id, method, cursor, len(items),
            )  # fmt: skip
            return Drained(items, ended=False, hint=_merged(pages))
        seen.add(cursor)
    logger.warning("server %s: %s still paging after %d pages; stopped", server_id, method, max_pages)
    return Drained(items, ended=False, hint=_merged(pages))


def _merged(pages: list[CacheHint | None]) -> CacheHint | None:
    """The list's hint: every page's merged, or None when a page had none."""
    return merge_cache(h for h in pages if h is not None) if pages and all(pages) else None
