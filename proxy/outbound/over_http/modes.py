"""The HTTP transports by configured mode, and ``auto``: Streamable HTTP, else legacy HTTP+SSE.

``auto`` finds out which transport a server's URL speaks from the answers to the first POSTs,
as the spec's backwards-compatibility rules say. A 2026-07-28 request (``server/discover``,
sent first by a caller that negotiates the era) settles it only when the answer is one of the
revision's own (a 2xx, or a 4xx with a 2026-07-28 error code); any other answer is delivered as
the request's error and leaves the question open, so the ``initialize`` that follows runs the
handshake-era probe: Streamable HTTP if it is answered, else the HTTP+SSE transport.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal

import anyio
import anyio.abc

from proxy.core.errors import ConfigError, ServerUnavailable
from proxy.outbound.over_http.common import MAX_BODY, Inbox, Probe, Verdict, owned_task_group
from proxy.outbound.over_http.sse_legacy import LegacySseTransport
from proxy.outbound.over_http.stateless import is_stateless_request
from proxy.outbound.over_http.streamable import StreamableHttpTransport, _StreamableHttpLink
from proxy.outbound.transport import Link, Received, Transport
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, Message

__all__ = ["AutoHttpTransport", "StreamableHttpTransport", "http_transport"]

logger = logging.getLogger("proxy.outbound.over_http.modes")


class AutoHttpTransport:
    """Streamable HTTP if the server speaks it, else the legacy HTTP+SSE transport on the same URL.

    A 2026-07-28 answer to a 2026-07-28 request, or else the first ``initialize``, decides (the
    spec's backwards-compatibility rules); the choice is remembered for later links from the same
    transport object.
    """

    def __init__(
        self,
        server_id: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        connect_timeout: float = 30.0,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_message_bytes: int = MAX_BODY,
    ) -> None:
        self.server_id = server_id
        self._streamable = StreamableHttpTransport(
            server_id,
            url,
            headers,
            connect_timeout=connect_timeout,
            max_depth=max_depth,
            max_message_bytes=max_message_bytes,
        )
        self.legacy = LegacySseTransport(
            server_id,
            url,
            headers,
            connect_timeout=connect_timeout,
            max_depth=max_depth,
            max_message_bytes=max_message_bytes,
        )
        self.chosen: Literal["streamable-http", "sse"] | None = None

    def connect(self) -> AbstractAsyncContextManager[Link]:
        """Raises: ServerUnavailable: only when the legacy transport was chosen and cannot connect."""
        return self._connect()

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Link]:
        if self.chosen == "sse":
            async with self.legacy.connect() as legacy:
                yield legacy
            return
        inbox = Inbox(self.server_id)
        try:
            async with self._streamable.open_link(inbox) as streamable, owned_task_group() as tg:
                link = _AutoLink(self, streamable, inbox, tg)
                try:
                    yield link
                finally:
                    link.closing.set()
        finally:
            inbox.shut()

    def choose(self, chosen: Literal["streamable-http", "sse"]) -> None:
        if self.chosen != chosen:
            logger.info("server %r: using the %s transport", self.server_id, chosen)
        self.chosen = chosen


class _AutoLink:
    def __init__(
        self,
        transport: AutoHttpTransport,
        streamable: _StreamableHttpLink,
        inbox: Inbox,
        tg: anyio.abc.TaskGroup,
    ) -> None:
        self._transport = transport
        self._streamable = streamable
        self._inbox = inbox
        self._tg = tg
        self._active: Link | None = streamable if transport.chosen == "streamable-http" else None
        self.closing = anyio.Event()

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """Raises: ServerUnavailable: the link is closed. Unencodable: ``message`` is not JSON data."""
        if self.closing.is_set():
            raise ServerUnavailable(self._transport.server_id, "link closed")
        if self._active is not None:
            await self._active.send(message, headers=headers)
            return
        if is_stateless_request(message):
            # Not awaited, unlike initialize's probe: the caller's timeout covers the answer.
            self._streamable.stateless.start(message, headers, Probe(on_settle=self._settled_stateless))
            return
        if message.get("method") != "initialize" or "id" not in message:
            await self._streamable.send(message, headers=headers)
            return
        probe = await self._streamable.probe(message, headers)
        if probe.verdict is Verdict.SPEAKS:
            self._transport.choose("streamable-http")
            self._active = self._streamable
        elif probe.verdict is Verdict.NOT_STREAMABLE:
            try:
                legacy: Link = await self._tg.start(self._host_legacy)
            except ServerUnavailable as exc:
                logger.warning(
                    "server %r: neither Streamable HTTP nor HTTP+SSE works: %s", exc.server_id, exc.reason
                )
                assert probe.error is not None
                self._inbox.put(probe.error, message["id"])
                return
            self._transport.choose("sse")
            self._active = legacy
            await legacy.send(message, headers=headers)

    async def receive(self) -> Received:
        """Raises: ServerUnavailable: the link is closed."""
        return await self._inbox.get()

    def _settled_stateless(self, verdict: Verdict) -> None:
        # Only a 2026-07-28 answer proves Streamable HTTP here; anything else is left to initialize.
        if verdict is Verdict.SPEAKS and self._active is None:
            self._transport.choose("streamable-http")
            self._active = self._streamable

    async def _host_legacy(self, *, task_status: anyio.abc.TaskStatus[Link]) -> None:
        # The legacy link is entered and left in this one task, as anyio requires of its task group.
        async with self._transport.legacy.open_link(self._inbox) as legacy:
            task_status.started(legacy)
            await self.closing.wait()


def http_transport(
    server_id: str,
    url: str,
    headers: Mapping[str, str] | None,
    mode: Literal["auto", "streamable-http", "sse"],
    *,
    connect_timeout: float = 30.0,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_message_bytes: int = MAX_BODY,
) -> Transport:
    """The HTTP transport for ``mode``; ``max_depth`` bounds the nesting of the server's messages,
    ``max_message_bytes`` the size of each (``limits.max_server_message_bytes``).

    Raises:
        ConfigError: an unknown mode.
    """
    kinds: dict[str, type[StreamableHttpTransport | LegacySseTransport | AutoHttpTransport]] = {
        "auto": AutoHttpTransport,
        "streamable-http": StreamableHttpTransport,
        "sse": LegacySseTransport,
    }
    if mode not in kinds:
        raise ConfigError(
            f"server {server_id!r}: unknown HTTP transport {mode!r} (auto, streamable-http, sse)"
        )
    return kinds[mode](
        server_id,
        url,
        headers,
        connect_timeout=connect_timeout,
        max_depth=max_depth,
        max_message_bytes=max_message_bytes,
    )
