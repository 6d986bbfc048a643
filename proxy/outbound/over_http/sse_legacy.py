"""The legacy HTTP+SSE client transport (protocol revision 2024-11-05), over
:mod:`proxy.outbound.over_http.h1`.

The client GETs the SSE URL; the server's first event (``endpoint``) names the URL to POST
messages to, and every server→client message, responses included, arrives on that one stream
as a ``message`` event. POSTs are answered 202 with no body.

Revision 2026-07-28 does not exist on this transport (it was deprecated before that revision
and has no per-request headers), so a 2026-07-28 request fails here, at once (a
:class:`~proxy.outbound.transport.Failed` outcome, not a made-up answer): the caller then falls
back to ``initialize`` without waiting out a timeout.

The one SSE stream carries everything, so an event past its size limit leaves nothing to read
on: the link ends, and its owner starts over.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import anyio
import anyio.abc
import yarl

from proxy.core.errors import MessageTooLarge, ServerProtocolError, ServerUnavailable
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.common import (
    JSON,
    MAX_BODY,
    SSE,
    TRANSPORT_ERRORS,
    EventReader,
    Inbox,
    client_session,
    describe,
    failure,
    http_failure,
    messages_in,
    owned_task_group,
    request_id_of,
)
from proxy.outbound.over_http.redirects import same_origin
from proxy.outbound.transport import Received
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, Message
from proxy.protocol.sse import SSEEvent
from proxy.protocol.stateless import has_envelope

__all__ = ["LegacySseTransport"]

logger = logging.getLogger("proxy.outbound.over_http.sse_legacy")


class LegacySseTransport:
    """Opens links to one server that speaks the 2024-11-05 HTTP+SSE transport."""

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
        """``max_depth`` bounds the nesting of each message the server sends, ``max_message_bytes``
        the size of each SSE event (``limits.max_server_message_bytes``)."""
        self._server_id = server_id
        self._url = yarl.URL(url)
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout
        self._max_depth = max_depth
        self._max_bytes = max_message_bytes
        self._log = logging.LoggerAdapter(logger, {"server_id": server_id})

    def connect(self) -> AbstractAsyncContextManager[_LegacySseLink]:
        """GET the SSE URL and wait (bounded by ``connect_timeout``) for the ``endpoint`` event.

        Raises:
            ServerUnavailable: refused, not an event stream, no endpoint event in time, or an
                endpoint on another origin.
        """
        return self.open_link()

    @asynccontextmanager
    async def open_link(self, inbox: Inbox | None = None) -> AsyncIterator[_LegacySseLink]:
        """:meth:`connect`, optionally delivering into an inbox the caller shares (``auto`` mode)."""
        owned, inbox = inbox is None, inbox if inbox is not None else Inbox(self._server_id)
        try:
            async with (
                client_session(
                    str(self._url), self._headers, self._connect_timeout, server_id=self._server_id
                ) as http,
                owned_task_group() as tg,
            ):
                endpoint: yarl.URL = await tg.start(self._listen, http, inbox)
                self._log.debug("server %r: messages go to %s", self._server_id, endpoint)
                link = _LegacySseLink(self._server_id, http, endpoint, inbox, self._log)
                try:
                    yield link
                finally:
                    link.closed = True
        finally:
            if owned:  # a shared inbox is its owner's to shut
                inbox.shut()

    async def _listen(
        self, http: h1.Client, inbox: Inbox, *, task_status: anyio.abc.TaskStatus[yarl.URL]
    ) -> None:
        async with AsyncExitStack() as stack:
            try:
                with anyio.fail_after(self._connect_timeout):
                    response = await stack.enter_async_context(
                        http.request("GET", str(self._url), headers={"Accept": SSE})
                    )
                    if response.status != 200 or response.content_type != SSE:
                        raise ServerUnavailable(
                            self._server_id,
                            f"GET {self._url} answered HTTP {response.status} {response.content_type}, "
                            "not an event stream",
                        )
                    reader = EventReader(response, limit=self._max_bytes)
                    endpoint = await self._await_endpoint(reader, inbox)
            except TimeoutError:
                raise ServerUnavailable(
                    self._server_id, f"no endpoint event from {self._url} within {self._connect_timeout:g}s"
                ) from None
            except TRANSPORT_ERRORS as exc:
                raise ServerUnavailable(self._server_id, f"GET {self._url} failed: {describe(exc)}") from None
            except MessageTooLarge as exc:
                raise ServerProtocolError(self._server_id, f"GET {self._url}: {exc.message}") from None
            task_status.started(endpoint)
            ended = "SSE stream closed"
            try:
                while (event := await reader.next()) is not None:
                    self._dispatch(event, inbox)
            except TRANSPORT_ERRORS as exc:
                self._log.info("server %r: SSE stream broke: %s", self._server_id, describe(exc))
            except MessageTooLarge as exc:
                ended = f"SSE stream dropped: {exc.message}"
                self._log.warning("server %r: %s", self._server_id, ended)
            finally:
                inbox.end(ended)

    async def _await_endpoint(self, reader: EventReader, inbox: Inbox) -> yarl.URL:
        while (event := await reader.next()) is not None:
            if event.event != "endpoint":
                self._dispatch(event, inbox)
                continue
            endpoint = self._url.join(yarl.URL(event.data.strip()))
            # The endpoint is the server's to choose, but a different origin would send our
            # messages (and the configured headers, credentials included) to someone else.
            if not same_origin(endpoint, self._url):
                raise ServerUnavailable(
                    self._server_id, f"endpoint {endpoint} is not on the origin of {self._url}; refused"
                )
            return endpoint
        raise ServerUnavailable(
            self._server_id, f"SSE stream from {self._url} ended before the endpoint event"
        )

    def _dispatch(self, event: SSEEvent, inbox: Inbox) -> None:
        if event.event == "message" and event.data:
            decoded = messages_in(event.data, self._server_id, self._log, max_depth=self._max_depth)
            for message in decoded.items:
                inbox.put(message)


class _LegacySseLink:
    def __init__(
        self,
        server_id: str,
        http: h1.Client,
        endpoint: yarl.URL,
        inbox: Inbox,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._server_id = server_id
        self._http = http
        self._endpoint = endpoint
        self._inbox = inbox
        self._log = log
        self.closed = False

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """POST one message; a request that cannot be delivered fails (``receive`` hands out its
        :class:`~proxy.outbound.transport.Failed` outcome).

        ``headers`` are ignored: the 2026-07-28 header mirroring does not exist on this transport,
        and neither do 2026-07-28 requests, which fail without a POST.

        Raises:
            ServerUnavailable: the link is closed, or the SSE stream (and with it the session) ended.
            Unencodable: ``message`` cannot be written as JSON; nothing was sent.
        """
        if self.closed or self._inbox.ended:
            raise ServerUnavailable(
                self._server_id, self._inbox.reason if self._inbox.ended else "link closed"
            )
        request_id = request_id_of(message)
        if request_id is not None and has_envelope(message):
            reason = "the HTTP+SSE transport carries revision 2024-11-05 only"
            self._inbox.put(failure(self._server_id, request_id, reason))
            return
        data = jsonrpc.encode(message)
        try:
            async with self._http.request(
                "POST", str(self._endpoint), body=data, headers={"Content-Type": JSON}
            ) as response:
                if 200 <= response.status < 300:
                    return
                if request_id is not None:
                    self._inbox.put(await http_failure(self._server_id, request_id, response))
                    return
                reason = f"HTTP {response.status} {response.reason or ''}".rstrip()
        except TRANSPORT_ERRORS as exc:
            reason = f"POST {self._endpoint} failed: {describe(exc)}"
            if request_id is not None:
                self._inbox.put(failure(self._server_id, request_id, reason))
                return
        self._log.warning(
            "server %r: %s was not accepted: %s", self._server_id, message.get("method"), reason
        )

    async def receive(self) -> Received:
        """The next message; the related request id is always None (one stream carries everything).

        Raises:
            ServerUnavailable: the link is closed or the SSE stream ended.
        """
        return await self._inbox.get()
