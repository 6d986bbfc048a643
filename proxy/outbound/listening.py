"""Hearing of a 2026-07-28 server's changes: one ``subscriptions/listen`` stream kept open.

A 2026-07-28 server tells of changes (list_changed, resources/updated) only on a listen stream:
a ``subscriptions/listen`` request whose response never comes while the stream is open. Its
filter asks for every list the server says may change and for the resource URIs clients
subscribed to through Manifold (``resources/(un)subscribe`` are not sent to such a server; they
change the filter, see :meth:`Listening.watch`).

:class:`Listening` belongs to one :class:`~proxy.outbound.connection.ServerConnection`: the URIs
it covers outlive the link, and :meth:`Listening.keep` runs for as long as one link does. The
notifications on the stream arrive on the link like any other; the connection passes them on
:func:`untagged`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio

from proxy.core.errors import (
    InvalidParams,
    MethodNotFound,
    ProtocolError,
    RemoteError,
    ServerProtocolError,
    ServerUnavailable,
)
from proxy.protocol.jsonrpc import Message
from proxy.protocol.subscriptions import SUBSCRIPTION_ID_KEY

__all__ = ["WATCH_METHODS", "Listen", "Listening", "listen_filter", "untagged"]

# Its lines are the connection's, as they were before this module split off from it.
logger = logging.getLogger("proxy.outbound.connection")

# What a client sends that, to a 2026-07-28 server, changes the listen filter instead.
WATCH_METHODS: Final = frozenset({"resources/subscribe", "resources/unsubscribe"})

# Sends ``subscriptions/listen`` with these params on the link and waits for as long as the
# stream lasts (no timeout); raises as ServerConnection's requests do.
Listen = Callable[[dict[str, Any] | None], Awaitable[object]]


def listen_filter(capabilities: Mapping[str, Any], watched: set[str]) -> dict[str, Any] | None:
    """What a listen stream asks a 2026-07-28 server for; None when it offers nothing to hear."""
    wanted: dict[str, Any] = {}
    for kind, key in (("tools", "tools"), ("prompts", "prompts"), ("resources", "resources")):
        if (capabilities.get(kind) or {}).get("listChanged"):
            wanted[f"{key}ListChanged"] = True
    subscribable = bool((capabilities.get("resources") or {}).get("subscribe"))
    if subscribable:
        wanted["resourceSubscriptions"] = sorted(watched)
    return {"notifications": wanted} if wanted else None


def untagged(message: Message) -> Message:
    """A listen stream's notification without the stream's tag: the id is ours, not the client's."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or SUBSCRIPTION_ID_KEY not in meta:
        return message
    rest = {k: v for k, v in meta.items() if k != SUBSCRIPTION_ID_KEY}
    assert isinstance(params, dict)
    stripped = {k: v for k, v in params.items() if k != "_meta"}
    if rest:
        stripped["_meta"] = rest
    return {**message, "params": stripped}


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class Listening:
    """The resource URIs a server's listen stream is to cover, and the keeper of that stream."""

    def __init__(self, server_id: str, *, backoff: Callable[[int], float]) -> None:
        """``backoff``: seconds to wait before reopening a stream the server ended, by attempt."""
        self._server_id = server_id
        self._backoff = backoff
        self._watched: set[str] = set()
        self._changed = anyio.Event()  # set when the URIs change: the stream is then replaced

    def filter(self, capabilities: Mapping[str, Any]) -> dict[str, Any] | None:
        """The listen filter for a server with these capabilities; None: nothing to listen for."""
        return listen_filter(capabilities, self._watched)

    def watch(
        self, method: str, params: dict[str, Any] | None, capabilities: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``resources/(un)subscribe`` to a 2026-07-28 server: which URIs its listen stream covers.

        Raises:
            MethodNotFound: the server offers no resource subscriptions.
            InvalidParams: no URI.
        """
        if not (capabilities.get("resources") or {}).get("subscribe"):
            raise MethodNotFound(f"server {self._server_id!r} offers no resource subscriptions")
        uri = (params or {}).get("uri")
        if not isinstance(uri, str):
            raise InvalidParams(f'{method} needs a string "uri"')
        before = len(self._watched)
        (self._watched.add if method == "resources/subscribe" else self._watched.discard)(uri)
        if len(self._watched) != before:
            self._changed.set()
        return {}

    async def keep(self, listen: Listen, capabilities: Mapping[str, Any]) -> None:
        """One ``subscriptions/listen`` stream open until cancelled (for as long as the link lives);
        replaced when the URIs it should cover change (the new one opens before the old one is
        cancelled, so no change falls between them), reopened after a backoff when the server
        ends it. ``listen`` sends the request on the link; a stream's failures are logged."""
        async with anyio.create_task_group() as streams:
            previous: anyio.CancelScope | None = None
            attempt = 0
            while True:
                self._changed = changed = anyio.Event()
                ended, scope = anyio.Event(), anyio.CancelScope()
                streams.start_soon(self._listen, listen, self.filter(capabilities), scope, ended)
                if previous is not None:
                    previous.cancel()
                previous = scope
                async with anyio.create_task_group() as waiting:
                    for event in (changed, ended):
                        waiting.start_soon(_cancel_when_set, event, waiting.cancel_scope)
                if ended.is_set() and not changed.is_set():
                    delay = self._backoff(attempt)
                    attempt += 1
                    logger.info(
                        "server %s: its listen stream ended; reopening in %.1fs", self._server_id, delay
                    )
                    await anyio.sleep(delay)
                else:
                    attempt = 0

    async def _listen(
        self, listen: Listen, params: dict[str, Any] | None, scope: anyio.CancelScope, ended: anyio.Event
    ) -> None:
        with scope:
            try:
                await listen(params)
            except (RemoteError, ProtocolError, ServerProtocolError) as exc:
                logger.warning("server %s: subscriptions/listen failed: %s", self._server_id, exc)
            except ServerUnavailable as exc:
                # Its POST failed, or the link is going (then its supervisor restarts everything).
                logger.info("server %s: subscriptions/listen ended: %s", self._server_id, exc.reason)
            finally:
                ended.set()
