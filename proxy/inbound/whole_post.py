"""A POST to an MCP endpoint whose body is all here, served without uvicorn's per-request cycle.

Every call arrives as such a POST. uvicorn serves each request through a ``RequestResponseCycle``
started as soon as the headers are in: the app's task waits on an event for the body, and its
``send`` and ``receive`` go through the access-log layer's counting wrappers
(:class:`proxy.inbound.server._Observed`) and the one-write transport
(:mod:`proxy.inbound.connection_guard`). For a POST to ``/mcp`` or ``/mcp/NAME`` with a declared
``Content-Length`` of at most ``limits.max_request_bytes``, the connection's protocol makes a
:class:`WholePost` instead and starts it once the body is complete: ``receive`` hands the whole
body over at once, ``send`` writes a response of declared length in one write (its head with its
body), and the byte counts and access-log line are taken here, in one place, not in wrappers.

Everything around the request is as on the ASGI path: the same app (the endpoint of the path,
after ``X-Forwarded-*`` from a trusted peer), a task per request that uvicorn's shutdown waits for
and then cancels, the connection's limits (header and body time, header bytes; the body size is
the condition), keep-alive and its timer, ``Connection: close`` at shutdown, a pipelined request
behind it, and the client's going away seen by ``receive`` (``http.disconnect``).

The protocol keeps the ASGI path for the rest: other methods and paths, ``Expect:
100-continue``, ``Transfer-Encoding`` (chunked), no or a repeated ``Content-Length``, a body
larger than the limit (answered 413 there, never held whole), a percent-encoded path, an upgrade,
and a request that arrives pipelined while another is being answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, Protocol

from uvicorn.config import Config
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)

from proxy.inbound.asgi import ON_DISCONNECT

__all__ = ["Posts", "Routes", "WholePost"]

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]


class Routes(Protocol):
    """What the HTTP app offers the fast path (implemented by ``proxy.inbound.server``)."""

    def endpoint(self, path: str) -> App | None:
        """The MCP endpoint that serves ``path``, if it is one's."""

    def account(self, scope: Scope, status: int, received: int, sent: int, started: float) -> None:
        """Count the request's bytes and write its access-log line."""


class Posts:
    """What every connection of one listener shares for its whole POSTs."""

    def __init__(self, routes: Routes, config: Config, max_body: int) -> None:
        self.routes = routes
        self.app: App = _chosen
        if config.proxy_headers:  # the same X-Forwarded-* handling uvicorn puts around the ASGI path
            proxied = ProxyHeadersMiddleware(_chosen, trusted_hosts=config.forwarded_allow_ips)  # type: ignore[arg-type]
            self.app = proxied  # type: ignore[assignment]
        self.max_body = max_body


async def _chosen(scope: Scope, receive: Any, send: Any) -> None:
    await scope[_APP](scope, receive, send)


_APP: Final = "manifold.app"  # the scope's endpoint, chosen by its path with the headers


class WholePost(RequestResponseCycle):
    """One POST: the body is gathered by the protocol (``chunks``), then :meth:`start` runs the app.

    A ``RequestResponseCycle`` by type, because the connection's protocol holds its current
    request as one (and reads ``disconnected``, ``response_complete``, ``message_event``,
    ``keep_alive`` from it), but none of that class's per-request set-up is run.
    """

    def __init__(
        self,
        posts: Posts,
        app: App,
        scope: Scope,
        transport: asyncio.Transport,
        flow: FlowControl,
        default_headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        on_response: Callable[[], None],
    ) -> None:
        scope[_APP] = app
        scope[ON_DISCONNECT] = self._on_disconnect
        self.scope = scope  # type: ignore[assignment]
        self._scope = scope
        self.transport = transport
        self.flow = flow
        self.default_headers = default_headers
        self.keep_alive = keep_alive
        self.on_response = on_response
        self.message_event = asyncio.Event()  # set when the client goes, a limit ends it, or it is answered
        self.disconnected = False
        self.body = bytearray()  # (uvicorn's; unused: the body is gathered in ``chunks``)
        self.chunks: list[bytes] = []
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0
        self.waiting_for_100_continue = False
        self._posts = posts
        self._started = time.perf_counter()
        self._unread = True
        self._head = b""  # a declared-length response's head, held for its body
        self.status = 0
        self.received = 0
        self.sent = 0
        self._gone: Callable[[], None] | None = None  # what runs when the client goes
        # What uvicorn's run_asgi uses when the app fails, returns early or is cancelled: it logs
        # there, answers 500 if nothing was sent, and closes the connection. (The access log is
        # Manifold's own: uvicorn's stays off.)
        self.logger = logging.getLogger("uvicorn.error")
        self.access_logger = logging.getLogger("uvicorn.access")
        self.access_log = False

    def _on_disconnect(self, gone: Callable[[], None]) -> Callable[[], None]:
        """``asgi.ON_DISCONNECT``: run ``gone`` once when the client goes (at once if it has)."""
        if self.disconnected:
            gone()
        else:
            self._gone = gone
        return self._forget

    def _forget(self) -> None:
        self._gone = None

    def went(self) -> None:
        """The connection is lost (called by the protocol)."""
        self.disconnected = True
        self.message_event.set()
        gone, self._gone = self._gone, None
        if gone is not None:
            gone()

    def start(self, tasks: set[asyncio.Task[None]]) -> None:
        """Run the app in a task of its own, which ``tasks`` (uvicorn's, for its shutdown) holds."""
        task = asyncio.get_running_loop().create_task(self.run_asgi(self._served))  # type: ignore[arg-type]
        task.add_done_callback(tasks.discard)
        tasks.add(task)

    def abandoned(self) -> None:
        """The client went before the body was complete: its access-log line, with no status."""
        self._posts.routes.account(self._scope, 0, 0, 0, self._started)

    async def _served(self, scope: Scope, receive: Any, send: Any) -> None:
        try:
            await self._posts.app(scope, receive, send)
        finally:
            self._gone = None
            self._posts.routes.account(scope, self.status, self.received, self.sent, self._started)
            if self._head:  # the app ended between a head and its body: write it, uvicorn closes next
                head, self._head = self._head, b""
                self.transport.write(head)

    async def receive(self) -> Any:
        if self._unread:
            self._unread = False
            chunks, self.chunks = self.chunks, []
            if not self.disconnected:
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self.received = len(body)
                return {"type": "http.request", "body": body, "more_body": False}
        while not (self.disconnected or self.response_complete):
            await self.message_event.wait()
            self.message_event.clear()
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        if not self.response_started and message["type"] == "http.response.start":
            self.status = message["status"]  # recorded as the access-log layer would, gone or not
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"Expected 'http.response.start', got '{message['type']}'.")
            self.response_started = True
            head = self._head_of(self.status, message.get("headers", ()))
            if self.chunked_encoding:
                self.transport.write(head)  # a stream: its head goes at once
            else:
                self._head = head  # waits for the body: one write for both
            return
        if self.response_complete or message["type"] != "http.response.body":
            raise RuntimeError(f"Unexpected ASGI message '{message['type']}' sent.")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        self.sent += len(body)
        if self.chunked_encoding:
            chunk = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            self.transport.write(chunk if more else chunk + b"0\r\n\r\n")
        else:
            self.expected_content_length -= len(body)
            if self.expected_content_length < 0:
                raise RuntimeError("Response content longer than Content-Length")
            if self._head:
                head, self._head = self._head, b""
                self.transport.writelines((head, body))
            elif body:
                self.transport.write(body)
        if more:
            return
        if self.expected_content_length != 0:
            raise RuntimeError("Response content shorter than Content-Length")
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def _head_of(self, status: int, headers: Any) -> bytes:
        """The response's status line and headers, checked and framed as uvicorn frames them."""
        content = [STATUS_LINE[status]]
        close = False
        for name, value in (*self.default_headers, *headers):
            if HEADER_RE.search(name) or HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header.")
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in [t.strip() for t in value.lower().split(b",")]:
                self.keep_alive = False
                close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and status not in (204, 304):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        return b"".join(content)
