"""The legacy HTTP+SSE client transport (protocol revision 2024-11-05), over aiohttp.

The client GETs the SSE URL; the server's first event (``endpoint``) names the URL to POST
messages to, and every server→client message, responses included, arrives on that one stream
as a ``message`` event. POSTs are answered 202 with no body.

This module also holds the pieces the Streamable HTTP transport (:mod:`proxy.outbound.http`)
shares with it — the inbox behind ``receive()``, the synthetic error responses, SSE reading over
aiohttp — because that module builds on this one for its ``auto`` fallback, not the reverse.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from typing import Any, Final

import aiohttp
import anyio
import anyio.abc
import yarl

from proxy.errors import CONNECTION_CLOSED, ProtocolError, ServerUnavailable
from proxy.outbound.transport import Received
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.sse import SSEDecoder, SSEEvent

__all__ = ["LegacySseTransport"]

logger = logging.getLogger("proxy.outbound.sse_legacy")

# Foreign exceptions an HTTP exchange can raise; they are turned into ours at this edge.
# ValueError covers an SSE event past the decoder's size limit and malformed headers.
TRANSPORT_ERRORS: Final = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
SSE: Final = "text/event-stream"
_MAX_ERROR_BODY: Final = 64 * 1024


# ------------------------------------------------------------------ shared with proxy.outbound.http


class Inbox:
    """What ``receive()`` hands out, and why it stopped.

    Unbounded on purpose: it only ever holds answers to requests the caller sent (the caller
    bounds those) and the server's occasional notifications, and a bound would let a caller that
    is slow to read stall the tasks reading HTTP responses.
    """

    def __init__(self, server_id: str) -> None:
        self._server_id = server_id
        self._send, self._receive = anyio.create_memory_object_stream[Received](math.inf)
        self.reason = "link closed"
        self.ended = False

    def put(self, message: Message, related: RequestId | None = None) -> None:
        """Queue ``message``; ``related`` is the request whose response stream carried it, if known."""
        # Once the link is closing nobody will read it any more.
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait((message, related))

    def end(self, reason: str) -> None:
        """No more messages: ``get`` drains what is queued, then raises with ``reason``."""
        if not self.ended:
            self.ended, self.reason = True, reason
            self._send.close()

    def shut(self) -> None:
        """The link is gone: ``get`` raises at once, queued or not."""
        self.end("link closed")
        self._receive.close()

    async def get(self) -> Received:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ServerUnavailable(self._server_id, self.reason) from None


def failure(server_id: str, request_id: RequestId, reason: str) -> Message:
    """The error response that stands in for an answer the server could not give."""
    return jsonrpc.error_response(request_id, CONNECTION_CLOSED, f"server {server_id!r}: {reason}")


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def http_failure(server_id: str, request_id: RequestId, response: aiohttp.ClientResponse) -> Message:
    """The answer to a request whose POST got an HTTP error status.

    A 4xx whose body is a JSON-RPC error is the server's own answer, so it is passed on (with the
    request's id: servers send ``id: null`` there); anything else names the status.
    """
    status = f"HTTP {response.status} {response.reason or ''}".rstrip()
    try:
        body = await response.content.read(_MAX_ERROR_BODY)
        error = jsonrpc.validate(jsonrpc.decode(body)).get("error")
    except (*TRANSPORT_ERRORS, ProtocolError):
        error = None
    if isinstance(error, dict) and 400 <= response.status < 500:
        return jsonrpc.error_response(request_id, error["code"], error["message"], error.get("data"))
    detail = f": {error['message']}" if isinstance(error, dict) else ""
    return failure(server_id, request_id, status + detail)


def messages_in(data: str | bytes, log: logging.LoggerAdapter[logging.Logger]) -> list[Message]:
    """The JSON-RPC messages in one body or event (an array is a batch); malformed ones are dropped."""
    try:
        decoded: Any = jsonrpc.decode(data)
        items = decoded if isinstance(decoded, list) else [decoded]
        return [jsonrpc.validate(item) for item in items]
    except ProtocolError as exc:
        log.warning("dropped a malformed message from the server: %s", exc.message)
        return []


def request_id_of(message: Message) -> RequestId | None:
    """The id an answer will carry, if ``message`` is a request (responses have ids too, but want none)."""
    return message.get("id") if "method" in message else None


@asynccontextmanager
async def client_session(
    headers: Mapping[str, str] | None, connect_timeout: float
) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session that is closed even while its owner is being cancelled."""
    # Only the connect phase is bounded here: a request may legitimately take long (the caller's
    # request timeout covers that) and a GET stream lives as long as the link. No pool limit: each
    # in-flight request holds a connection while it streams, and the caller bounds how many.
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_connect=connect_timeout)
    http = aiohttp.ClientSession(
        headers=dict(headers or {}), timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
    )
    try:
        yield http
    finally:
        with anyio.CancelScope(shield=True):
            await http.close()


class EventReader:
    """SSE events from one aiohttp response, one at a time."""

    def __init__(self, response: aiohttp.ClientResponse, decoder: SSEDecoder | None = None) -> None:
        self._response = response
        self.decoder = decoder if decoder is not None else SSEDecoder()
        self._pending: deque[SSEEvent] = deque()
        self.count = 0  # events read so far

    async def next(self) -> SSEEvent | None:
        """The next event, or None at the end of the stream.

        Raises:
            aiohttp.ClientError, OSError: the connection broke.
            ValueError: an event grew past the decoder's limit.
        """
        while not self._pending:
            chunk = await self._response.content.readany()
            if not chunk:
                return None
            self._pending.extend(self.decoder.feed(chunk))
        self.count += 1
        return self._pending.popleft()


@asynccontextmanager
async def owned_task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group around a ``yield`` whose body's exception leaves as itself.

    anyio wraps an exception raised in a task group's body in an ExceptionGroup; a transport's
    caller must see its own exception (or our ServerUnavailable) unchanged. The children here never
    raise — they turn failures into messages — so the body's is the only exception there can be.
    The group is cancelled when the body ends: its tasks serve the link, which is then gone.
    """
    caught: BaseException | None = None
    async with anyio.create_task_group() as tg:
        try:
            yield tg
        except BaseException as exc:
            caught = exc
        tg.cancel_scope.cancel()
    if caught is not None:
        raise caught


# ------------------------------------------------------------------ the transport


class LegacySseTransport:
    """Opens links to one server that speaks the 2024-11-05 HTTP+SSE transport."""

    def __init__(
        self,
        server_id: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        connect_timeout: float = 30.0,
    ) -> None:
        self._server_id = server_id
        self._url = yarl.URL(url)
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout
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
            async with client_session(self._headers, self._connect_timeout) as http, owned_task_group() as tg:
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
        self, http: aiohttp.ClientSession, inbox: Inbox, *, task_status: anyio.abc.TaskStatus[yarl.URL]
    ) -> None:
        async with AsyncExitStack() as stack:
            try:
                with anyio.fail_after(self._connect_timeout):
                    response = await stack.enter_async_context(http.get(self._url, headers={"Accept": SSE}))
                    if response.status != 200 or response.content_type != SSE:
                        raise ServerUnavailable(
                            self._server_id,
                            f"GET {self._url} answered HTTP {response.status} {response.content_type}, "
                            "not an event stream",
                        )
                    reader = EventReader(response)
                    endpoint = await self._await_endpoint(reader, inbox)
            except TimeoutError:
                raise ServerUnavailable(
                    self._server_id, f"no endpoint event from {self._url} within {self._connect_timeout:g}s"
                ) from None
            except TRANSPORT_ERRORS as exc:
                raise ServerUnavailable(self._server_id, f"GET {self._url} failed: {describe(exc)}") from None
            task_status.started(endpoint)
            try:
                while (event := await reader.next()) is not None:
                    self._dispatch(event, inbox)
            except TRANSPORT_ERRORS as exc:
                self._log.info("server %r: SSE stream broke: %s", self._server_id, describe(exc))
            finally:
                inbox.end("SSE stream closed")

    async def _await_endpoint(self, reader: EventReader, inbox: Inbox) -> yarl.URL:
        while (event := await reader.next()) is not None:
            if event.event != "endpoint":
                self._dispatch(event, inbox)
                continue
            endpoint = self._url.join(yarl.URL(event.data.strip()))
            # The endpoint is the server's to choose, but a different origin would send our
            # messages (and the configured headers, credentials included) to someone else.
            if endpoint.origin() != self._url.origin():
                raise ServerUnavailable(
                    self._server_id, f"endpoint {endpoint} is not on the origin of {self._url}; refused"
                )
            return endpoint
        raise ServerUnavailable(
            self._server_id, f"SSE stream from {self._url} ended before the endpoint event"
        )

    def _dispatch(self, event: SSEEvent, inbox: Inbox) -> None:
        if event.event == "message" and event.data:
            for message in messages_in(event.data, self._log):
                inbox.put(message)


class _LegacySseLink:
    def __init__(
        self,
        server_id: str,
        http: aiohttp.ClientSession,
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

    async def send(self, message: Message) -> None:
        """POST one message; a request that cannot be delivered is answered with an error response.

        Raises:
            ServerUnavailable: the link is closed, or the SSE stream (and with it the session) ended.
        """
        if self.closed or self._inbox.ended:
            raise ServerUnavailable(
                self._server_id, self._inbox.reason if self._inbox.ended else "link closed"
            )
        request_id = request_id_of(message)
        try:
            async with self._http.post(
                self._endpoint, data=jsonrpc.encode(message), headers={"Content-Type": "application/json"}
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
