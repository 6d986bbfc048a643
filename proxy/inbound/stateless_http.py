"""Streamable HTTP, inbound, revision 2026-07-28: one self-contained POST per request.

``McpEndpoint`` hands a request here (after Origin, Host and authentication) when its
``MCP-Protocol-Version`` header names no handshake revision, or when it carries a stateless
``_meta`` envelope and neither that header nor a session id. No session is minted, required or
echoed: the caller is who its credentials say, with the capabilities its ``_meta`` declares,
for this one request. What happens, the first failure wins (the spec's "Server Validation"):

    not POST → 405 · Accept without JSON and SSE → 406 · not JSON content → 415 · too big → 413
    not JSON → -32700 · not one request or notification → -32600 · a notification → 202, dropped
    routing headers repeated, _meta, headers ↔ body, version → -32020 / -32602 / -32022
    Mcp-Param-* ↔ the served tool's inputSchema → -32020
    the gateway: an unknown or removed method -32601, an undeclared capability -32021, …

Errors go out as JSON with the status of ``protocol.stateless.HTTP_STATUS`` (and without an ``id``
when none could be read: the 2026-07-28 schema has no null ids). A response is JSON unless the
request has something to say first (progress, a log line it opted into): then it is an SSE
stream, status 200, kept alive while the request is silent. Closing the response stream is the
cancel: a disconnect cancels the request (the server behind gets ``notifications/cancelled``)
and nothing more is sent for it.

``subscriptions/listen`` is the exception: once classified like any request, it is answered
with an SSE stream only (406 unless ``Accept`` names it), and served by
``proxy.clients.listen_streams`` until the client closes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from cachetools import LRUCache

from proxy.clients.contract import Endpoint, Inbound
from proxy.clients.session import StatelessCaller
from proxy.core.errors import InvalidRequest, ProtocolError, request_id_of
from proxy.inbound.asgi import (
    JSON_HEADERS,
    ON_DISCONNECT,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    respond,
)
from proxy.inbound.exchange import Exchange, caller_of
from proxy.inbound.listen_sse import stream_sse
from proxy.inbound.reading import Reader
from proxy.inbound.refusals import Refused
from proxy.policy.model import Identity
from proxy.protocol import jsonrpc, stateless, versions
from proxy.protocol.headers import VERSION_HEADER, Headers, ParamHeader, check_param_headers, x_mcp_headers
from proxy.protocol.jsonrpc import Message, MessageKind, RequestId
from proxy.protocol.sse import encode_event
from proxy.protocol.subscriptions import LISTEN, Filter
from proxy.tracing import active as tracing
from proxy.tracing.w3c import from_headers

__all__ = ["StatelessEndpoint", "is_stateless_header"]

logger = logging.getLogger("proxy.inbound.stateless_http")

# Answer with JSON if the request is done within this long without a notification; past it,
# commit to SSE and keep the stream alive with a comment line every as long.
_DEFER: Final = 15.0
_KEEPALIVE: Final = 15.0
_SSE: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_PING: Final = b": ping\n\n"
_NOT_ONE_MESSAGE: Final = "Body must be a single JSON-RPC request or notification object"


def is_stateless_header(version: str | None) -> bool:
    """Whether an ``MCP-Protocol-Version`` header routes a request to the stateless path: present,
    and not a handshake revision (an unknown one too: the stateless path names what is served)."""
    return version is not None and version not in versions.HANDSHAKE


class StatelessEndpoint:
    def __init__(self, inbound: Inbound, read: Reader) -> None:
        self._endpoint: Endpoint = inbound.endpoint
        self._read = read
        # namespaced tool name -> (the definition served, its Mcp-Param-* annotations)
        self._specs: LRUCache[str, tuple[Mapping[str, Any], tuple[ParamHeader, ...]]] = LRUCache(4096)

    async def post(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one POST whose ``MCP-Protocol-Version`` header routed it here."""
        accept = header(scope, b"accept")
        if accept is not None and not _accepts_json_and_sse(accept):
            raise Refused(
                InvalidRequest("Not Acceptable: Accept must include application/json and text/event-stream"),
                406,
                stateless=True,
            )
        content_type = (header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            raise Refused(
                InvalidRequest("Unsupported Media Type: POST application/json"), 415, stateless=True
            )
        body = await read_body(receive, self._read.max_bytes)
        if body is None:
            raise Refused(self._read.too_large("Payload Too Large: the request body"), 413, stateless=True)
        try:
            decoded = self._read.decode(body)
        except ProtocolError as exc:
            raise Refused(exc, None, request_id_of(exc), stateless=True) from None
        try:
            if not isinstance(decoded, dict):
                raise InvalidRequest(_NOT_ONE_MESSAGE)
            message = jsonrpc.validate(decoded)
        except ProtocolError as exc:
            request_id = decoded.get("id") if isinstance(decoded, dict) else None
            readable = isinstance(request_id, str | int) and not isinstance(request_id, bool)
            raise Refused(
                InvalidRequest(exc.message), None, request_id if readable else None, stateless=True
            ) from None
        return await self.answer(scope, message, len(body), receive, send)

    async def answer(self, scope: Scope, message: Message, size: int, receive: Receive, send: Send) -> None:
        """Serve one validated JSON-RPC message (the body, of ``size`` bytes, was read already)."""
        if tracing.tracer is not None:  # the request's trace context headers, for the router
            tracing.HEADERS.set(from_headers(scope["headers"]))
        headers = Headers.of(
            (bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
            for k, v in scope["headers"]
            if bytes(k).startswith(b"mcp-")
        )
        kind = jsonrpc.kind_of(message)
        if kind is MessageKind.RESPONSE:  # clients send none: the server asks nothing at 2026-07-28
            raise Refused(InvalidRequest(_NOT_ONE_MESSAGE), None, None, stateless=True) from None
        if kind is MessageKind.NOTIFICATION:
            # None is defined for clients on HTTP (closing the stream is the cancel): dropped.
            version = headers.get(VERSION_HEADER)
            if not versions.is_stateless(version):
                raise Refused(stateless.unsupported(version or ""), None, None, stateless=True) from None
            return await respond(send, 202)
        request_id: RequestId = message["id"]
        identity: Identity = scope["manifold.identity"]
        try:
            self._read.check(message, size)
            version = headers.get(VERSION_HEADER)
            if (
                version is not None
                and not versions.is_stateless(version)
                and not stateless.has_envelope(message)
            ):
                # Not a stateless request at all, but a revision we do not know: say which we do.
                raise stateless.unsupported(version)
            envelope = stateless.classify(message, headers)
            self._check_param_headers(message, headers, identity)
        except ProtocolError as exc:
            raise Refused(exc, None, request_id, stateless=True) from None
        caller = caller_of(envelope, identity, "http")
        if message["method"] == LISTEN:
            return await self._listen(scope, caller, message, receive, send)
        return await self._exchange(caller, message, receive, send, scope.get(ON_DISCONNECT))

    async def _listen(
        self, scope: Scope, caller: StatelessCaller, message: Message, receive: Receive, send: Send
    ) -> None:
        """``subscriptions/listen``: the response is the stream of notifications, always SSE."""
        accept = header(scope, b"accept")
        if accept is None or not _accepts_sse(accept):
            raise Refused(
                InvalidRequest("Not Acceptable: subscriptions/listen answers with text/event-stream"),
                406,
                stateless=True,
            )
        async with AsyncExitStack() as stack:
            try:
                requested = Filter.parse(message["params"])
                listen = self._endpoint.listen(caller, message["id"], requested)
                subscription = await stack.enter_async_context(listen)
            except ProtocolError as exc:  # a bad filter; too many streams open (LimitExceeded)
                raise Refused(exc, None, message["id"], stateless=True) from None
            return await stream_sse(subscription, receive, send)

    def _check_param_headers(self, message: Message, headers: Headers, identity: Identity) -> None:
        """Rung 10: the ``Mcp-Param-*`` headers of a ``tools/call`` against the tool as served.

        Raises:
            HeaderMismatch: a header and its argument disagree.
        """
        if message["method"] != "tools/call":
            return
        params = message["params"]
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict | None):
            return  # the gateway refuses the call itself
        definition = self._endpoint.tool_definition(name, identity)
        if definition is None:
            return  # unknown or hidden: the router answers that, exactly as for a missing tool
        specs = self._param_specs(name, definition)
        if specs:
            check_param_headers(specs, arguments or {}, headers)

    def _param_specs(self, name: str, definition: Mapping[str, Any]) -> tuple[ParamHeader, ...]:
        cached = self._specs.get(name)
        if cached is not None and cached[0] is definition:
            return cached[1]
        specs = x_mcp_headers(definition.get("inputSchema"))
        self._specs[name] = (definition, specs)
        return specs

    async def _exchange(
        self,
        caller: StatelessCaller,
        message: Message,
        receive: Receive,
        send: Send,
        on_disconnect: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
    ) -> None:
        """Run the request in this task; answer JSON, or SSE once it has a notification first.

        The request runs here, in a cancel scope of its own: the client's going cancels it
        (and its shielded cleanup still runs). Its answer is JSON unless a notification comes
        first or it is silent for ``_DEFER`` seconds: then a writer task takes the response over
        as an SSE stream. So a JSON answer needs no task but this one; on the ASGI path one more
        watches ``receive`` for the client's going, where the server offers
        ``asgi.ON_DISCONNECT`` (a whole POST, :mod:`proxy.inbound.whole_post`) that is a
        callback. (Plain asyncio tasks, not an anyio task group, whose ``start_soon`` costs ~36
        to 41 µs a task here against ~4 to 10 for ``loop.create_task``.) Every task started
        here has ended when this returns; the request's own failure is raised here.
        """
        loop = asyncio.get_running_loop()
        request = anyio.CancelScope()
        writer: asyncio.Task[None] | None = None

        def stream() -> None:  # the first notification, or _DEFER seconds of silence
            nonlocal writer
            if writer is None and exchange.answer is None and not request.cancel_called:
                writer = loop.create_task(self._stream(exchange, send))

        def gone() -> None:
            request.cancel()
            if writer is not None:
                writer.cancel()

        exchange = Exchange(self._endpoint, caller, message, stream)
        watching = None if on_disconnect is not None else loop.create_task(_watch(receive, gone))
        forget = None if on_disconnect is None else on_disconnect(gone)
        timer = loop.call_later(_DEFER, stream)
        try:
            with request:
                await exchange.run()
            if writer is None:
                if (response := exchange.answer) is not None:  # (None: the client went)
                    status = stateless.http_status(response)
                    await respond(send, status, jsonrpc.encode(response), JSON_HEADERS)
            else:
                await asyncio.wait((writer,))
                if not writer.cancelled():
                    writer.result()  # its failure, if it failed
        finally:
            timer.cancel()
            exchange.notes.close()
            if forget is not None:
                forget()
            ending = [task for task in (writer, watching) if task is not None and not task.done()]
            for task in ending:
                task.cancel()
            if ending:
                with anyio.CancelScope(shield=True):
                    await asyncio.wait(ending)

    async def _stream(self, exchange: Exchange, send: Send) -> None:
        """The SSE answer: the notifications so far (a ping if none), what follows, a ping after
        every ``_KEEPALIVE`` seconds of silence, then the response (unless the request failed:
        the boundary ends the stream then)."""
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        notes = exchange.notes
        note: Message | None
        try:
            note = notes.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            note = None
        while True:
            body = encode_event(jsonrpc.encode(note)) if note is not None else _PING
            await send({"type": "http.response.body", "body": body, "more_body": True})
            try:
                note = await _next(notes, _KEEPALIVE, end=True)
            except anyio.EndOfStream:
                break
        if exchange.answer is not None:
            final = encode_event(jsonrpc.encode(exchange.answer))
            await send({"type": "http.response.body", "body": final, "more_body": False})


async def _watch(receive: Receive, gone: Callable[[], None]) -> None:
    """Call ``gone`` when the client closes the connection (the ASGI path's way to know)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    gone()


async def _next(
    notes: MemoryObjectReceiveStream[Message], wait: float, *, end: bool = False
) -> Message | None:
    """The next notification; None after ``wait`` seconds of silence, or (unless ``end``) when
    the request is answered.

    Raises:
        anyio.EndOfStream: the request is answered, and ``end`` asked to be told so.
    """
    with anyio.move_on_after(wait):
        try:
            return await notes.receive()
        except anyio.EndOfStream:
            if end:
                raise
    return None


def _accepts_json_and_sse(accept: str) -> bool:
    types = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    if "*/*" in types:
        return True
    return bool(types & {"application/json", "application/*"}) and bool(
        types & {"text/event-stream", "text/*"}
    )


def _accepts_sse(accept: str) -> bool:
    types = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return bool(types & {"text/event-stream", "text/*", "*/*"})
