"""The HTTP connection layer's own limits: open connections, header size, header and body time.

The ASGI app sees requests; these limits are about connections and the bytes before a request
exists, so they live in uvicorn's protocol (one instance per connection), as a subclass of its
httptools protocol that adds bookkeeping around the parser's callbacks:

- ``limits.max_connections`` / ``connection_reserve``: each connection is admitted when it
  opens (:mod:`proxy.inbound.admission`). Past the cap it is answered 503 at once; in the
  reserve, any request but a probe is.
- ``limits.max_header_bytes``: a request line and headers larger than this are answered 431.
  httptools keeps no limit of its own: bytes are counted as they arrive, until the headers end.
- ``limits.header_timeout``: the request line and headers must be complete this long after the
  connection opened or its previous response ended; else 408, or a plain close when nothing
  was sent at all. One timer per request, never re-armed by a trickle of bytes (slowloris).
- ``limits.body_timeout``: the body must be complete this long after the headers; else 408.

Every refusal is counted under its limit's name (``manifold_limit_refusals_total{limit}``), and
written with ``Connection: close`` followed by a *lingering* close: our side is shut for writing
and what the client still sends is read and dropped for a moment, because closing a socket with
unread bytes in it sends a reset that can destroy the response before the client reads it. Past
a few such drains (``admission.DRAINING``), a flood of refused connections is closed at once.

Cost on the hot path: a phase (an enum), a byte counter and one timer handle per connection;
per request one ``call_at`` and one ``cancel``, no allocation of ours.

One write per response: uvicorn writes a response's head and its body separately, two
``send(2)`` calls and two TCP segments for every answer. A response whose length is declared
(every JSON answer Manifold gives) has its head held by :class:`_OneWrite` and written together
with the body; a streamed one (SSE, chunked) has its head written at once, as before.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import resource
from http import HTTPStatus
from typing import Any, Final

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from proxy.config.model import LimitsConfig
from proxy.core.errors import LimitExceeded
from proxy.inbound.admission import RETRY_AFTER, Admission, ConnectionBudget, connection_cap, refusal
from proxy.inbound.whole_post import Posts, WholePost
from proxy.observe.boundary import Boundary

__all__ = ["ConnectionGuard", "GuardedHttpProtocol"]

logger = logging.getLogger("proxy.inbound.connections")

# Seconds a refused connection is drained before it is closed (see the module docstring).
LINGER: Final = 1.0


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that has just been refused."""


class _Phase(enum.Enum):
    IDLE = "idle"  # no byte of the next request yet
    HEADERS = "headers"  # inside a request line and headers
    BODY = "body"  # headers complete, body not yet
    REFUSED = "refused"  # answered by a limit; draining until closed


class ConnectionGuard:
    """What every guarded connection shares: the budget, the limits and the refusals, built once."""

    def __init__(
        self, limits: LimitsConfig, boundary: Boundary, probes: frozenset[str], *, servers: int
    ) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        open_files = None if soft == resource.RLIM_INFINITY else soft
        cap = connection_cap(limits.max_connections, open_files, servers)
        if cap < limits.max_connections:
            logger.warning(
                "limits.max_connections lowered from %d to %d: the open-files limit is %s "
                "(raise it with ulimit -n)",
                limits.max_connections,
                cap,
                open_files,
            )
        self.budget = ConnectionBudget(cap, limits.connection_reserve)
        self.boundary = boundary
        self.probes = frozenset(probe.encode() for probe in probes)
        self.max_header_bytes = limits.max_header_bytes
        self.max_body = limits.max_request_bytes
        self.header_timeout = limits.header_timeout
        self.body_timeout = limits.body_timeout
        self.full = LimitExceeded("too many open connections", limit="max_connections", maximum=cap)
        self.headers_large = LimitExceeded(
            "request line and headers too large", limit="max_header_bytes", maximum=limits.max_header_bytes
        )
        self.headers_late = LimitExceeded(
            "request line and headers not received in time",
            limit="header_timeout",
            maximum=limits.header_timeout,
        )
        self.body_late = LimitExceeded(
            "request body not received in time", limit="body_timeout", maximum=limits.body_timeout
        )
        self.responses = {
            self.full: refusal(HTTPStatus.SERVICE_UNAVAILABLE, self.full, retry_after=RETRY_AFTER),
            self.headers_large: refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, self.headers_large),
            self.headers_late: refusal(HTTPStatus.REQUEST_TIMEOUT, self.headers_late),
            self.body_late: refusal(HTTPStatus.REQUEST_TIMEOUT, self.body_late),
        }

    def protocol(self) -> type[GuardedHttpProtocol]:
        """The protocol class to give uvicorn (``http=``): it builds one per connection."""
        return type("GuardedHttp", (GuardedHttpProtocol,), {"guard": self})


class _OneWrite(asyncio.Transport):
    """What a request's cycle writes through: the connection's transport, except that the head
    of a response with a declared length waits for the body and both go out in one write.

    The head is recognised as the cycle's first write once its response has started (a
    ``100 Continue`` comes before that); uvicorn has then set ``chunked_encoding`` from the
    headers: False means a Content-Length, so a body write follows in the same ``send`` sequence.
    A HEAD response never writes its body, so its head is never held. A close writes a held
    head first: the client sees what it would have seen without the holding.
    """

    def __init__(self, protocol: GuardedHttpProtocol, transport: asyncio.Transport) -> None:
        super().__init__()
        self._protocol = protocol
        self._transport = transport
        self._held = b""
        self._started: RequestResponseCycle | None = None  # the last cycle whose head was written

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held:
            head, self._held = self._held, b""
            self._transport.writelines((head, data))
            return
        cycle = self._protocol.cycle
        if cycle is not self._started and cycle.response_started:
            self._started = cycle
            if cycle.chunked_encoding is False and cycle.scope["method"] != "HEAD":
                self._held = bytes(data)
                return
        self._transport.write(data)

    def close(self) -> None:
        if self._held:
            head, self._held = self._held, b""
            self._transport.write(head)
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`ConnectionGuard` (see the module
    docstring). Use :meth:`ConnectionGuard.protocol` for a class bound to a guard."""

    guard: ConnectionGuard
    posts: Posts | None = None  # set by the server for a listener of MCP endpoints (whole POSTs)

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._admission = Admission.SERVE
        self._phase = _Phase.IDLE
        self._header_bytes = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._ready_at = 0.0  # when the connection opened or its last response ended
        self._writer: _OneWrite | None = None
        self._post: WholePost | None = None  # the last whole POST started on this connection

    # ---- the connection ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._writer = _OneWrite(self, transport)
        self._admission = self.guard.budget.opened()
        if self._admission is Admission.REFUSE or self._admission is Admission.SHED:
            self._refuse(self.guard.full)
            return
        self._ready_at = self.loop.time()
        self._deadline = self.loop.call_at(self._ready_at + self.guard.header_timeout, self._late)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.budget.closed()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        post = self._post
        if post is not None and not post.response_complete:
            post.went()  # (uvicorn tells only its current cycle: a request pipelined behind may be)
        cycle: RequestResponseCycle | None = self.cycle
        if isinstance(cycle, WholePost) and cycle is not post and not cycle.response_complete:
            cycle.abandoned()  # its body never completed: the app never saw it
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # uvicorn's own, but for the counting and for _Refused, which is no bad request.
        phase = self._phase
        if phase is _Phase.REFUSED:
            return  # draining before the close
        if phase is not _Phase.BODY:
            self._header_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._phase is not _Phase.REFUSED:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        phase = self._phase
        if phase is _Phase.HEADERS and self._header_bytes > self.guard.max_header_bytes:
            self._refuse(self.guard.headers_large)
        elif phase is _Phase.BODY and self._deadline is None:
            self._deadline = self.loop.call_later(self.guard.body_timeout, self._late)

    # ---- the parser's callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _Phase.HEADERS
        if self._deadline is None:
            self._deadline = self.loop.call_at(self._ready_at + self.guard.header_timeout, self._late)

    def on_headers_complete(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = _Phase.BODY
        # The count may include the start of the body, read in the same chunk: measure exactly.
        guard = self.guard
        if self._header_bytes > guard.max_header_bytes and self._head_size() > guard.max_header_bytes:
            self._refuse(guard.headers_large)
            raise _Refused
        probes_only = self._admission is Admission.PROBES_ONLY
        if probes_only and httptools.parse_url(self.url).path not in guard.probes:
            self._refuse(guard.full)
            raise _Refused
        posts = self.posts
        if posts is not None and self._whole_post(posts):
            return
        super().on_headers_complete()
        if self._writer is not None:
            self.cycle.transport = self._writer

    def _whole_post(self, posts: Posts) -> bool:
        """Make the request a :class:`WholePost` if it is one (see :mod:`proxy.inbound.whole_post`)."""
        parser = self.parser
        if parser.get_method() != b"POST" or self.expect_100_continue or parser.should_upgrade():
            return False
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is not None and not cycle.response_complete:
            return False  # pipelined behind an answer under way: uvicorn queues it
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                if length is not None:
                    return False
                length = value
            elif name == b"transfer-encoding":
                return False
        if length is None or not length.isdigit() or int(length) > posts.max_body:
            return False
        url = httptools.parse_url(self.url)
        raw_path = url.path
        if b"%" in raw_path:
            return False
        path = raw_path.decode("ascii")
        app = posts.routes.endpoint(path)
        if app is None:
            return False
        scope = self.scope
        scope["method"] = "POST"
        http_version = parser.get_http_version()
        if http_version != "1.1":
            scope["http_version"] = http_version
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = url.query or b""
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        self.cycle = WholePost(
            posts,
            app,
            scope,  # type: ignore[arg-type]
            self.transport,
            self.flow,
            self.server_state.default_headers,
            keep_alive,
            self.on_response_complete,
        )
        return True

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is WholePost:
            cycle.chunks.append(body)  # at most max_body: its Content-Length said so; httptools holds to it
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is WholePost and not cycle.disconnected:
            cycle.more_body = False
            self._post = cycle
            cycle.start(self.tasks)
        else:
            super().on_message_complete()
        self._phase = _Phase.IDLE
        self._header_bytes = 0
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._ready_at = self.loop.time()

    # ---- refusals ------------------------------------------------------------------------

    def _head_size(self) -> int:
        """The request line and headers as received, give or take the spaces around values."""
        return len(self.url) + 16 + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _current(self) -> RequestResponseCycle | None:
        """The last request's cycle; None before the first (uvicorn's annotation omits that)."""
        cycle: RequestResponseCycle | None = self.cycle
        return cycle

    def _late(self) -> None:
        """The header or body deadline passed."""
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._phase is _Phase.BODY:
            self._refuse(self.guard.body_late)
        elif self._phase is _Phase.HEADERS:
            self._refuse(self.guard.headers_late)
        elif self._current() is None:  # opened and never sent a byte
            self.guard.boundary.refused(self.guard.headers_late)
            self.transport.close()

    def _refuse(self, refused: LimitExceeded) -> None:
        """Answer with ``refused``'s response, unless one is under way, and close lingering."""
        self._phase = _Phase.REFUSED
        self.guard.boundary.refused(refused)
        if self._deadline is not None:
            self._deadline.cancel()
        cycle = self._current()
        if cycle is not None and not cycle.response_complete:
            # The app is not to read or write any more: it sees the client gone.
            if isinstance(cycle, WholePost):
                cycle.went()  # and a 2026-07-28 request's own callback ends it at once
            else:
                cycle.disconnected = True
                cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()  # a response is half written: nothing else may follow it
                return
        self.transport.write(self.guard.responses[refused])
        if self._admission is Admission.SHED:
            self.transport.close()  # after the write; a flood is not drained (admission.DRAINING)
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self._deadline = self.loop.call_later(LINGER, self.transport.close)
