"""A lean keep-alive HTTP/1.1 client for the HTTP transports: one pool of connections per link.

Why not aiohttp: on the call path every ``tools/call`` to a Streamable HTTP server is one POST,
and aiohttp's general-purpose machinery (request and response objects, middlewares, cookie jar,
timers, stream readers, two writes per request) cost about 80 µs of Manifold's ~410 µs per call in
the profile. Doing only what the transports need, on uvloop against uvicorn, one POST costs the
client about 29 µs of CPU here against aiohttp's 86-100 µs, and through Manifold (the quick
benchmark, back to back) 100-160 µs less per call. What it does:

- keeps HTTP/1.1 connections to one origin alive between requests (:class:`Client`, one per
  link): the most recently used idle one is handed out first; at most ``max_idle`` are kept idle,
  each closed after ``idle_timeout`` (below the 5 s keep-alive of uvicorn, Node.js and Hypercorn,
  so that we close first instead of racing the server's close); one the server closed, or spoke
  on unasked, is never handed out;
- writes each request in one write (head and body), and parses the response with ``httptools``
  (llhttp, the parser uvicorn uses) in an asyncio protocol: in the usual case the whole response
  arrives in one read and wakes the caller once;
- reads Content-Length, chunked and close-delimited bodies, piece by piece as they arrive
  (:meth:`Response.read_some`: an SSE stream can last as long as the link), with backpressure
  (reading pauses while too much is buffered); inflates gzip and deflate bodies in bounded steps
  (a server may send them unasked: no ``Accept-Encoding`` is sent) and refuses other codings;
- bounds what a server sends before the body (:data:`MAX_HEAD` bytes, :data:`MAX_HEADERS`
  headers); the body's bound is the caller's (``Response.read(limit)``, the SSE decoder's);
- https with the default SSL context (SNI and certificate checks), connect (and TLS handshake)
  bounded by ``connect_timeout``; like before, nothing else is timed here: a request may
  legitimately take long, and the caller's request timeout covers it;
- follows redirects within the configured origin only (:mod:`proxy.outbound.over_http.redirects` decides,
  at most :data:`MAX_REDIRECTS` requests), so the configured headers never leave it; the URL's own
  credentials become Basic authorization, as aiohttp made them;
- closes, never reuses, a connection whose response was not read to its end on the wire.

What it does not do: HTTP/2, proxies, cookies, pipelining, ``Expect: 100-continue``, streamed
request bodies, HEAD requests.

A reused connection found dead when its request is sent (the server closed it as we wrote, and
nothing of a response came back) is retried once on a new connection for GET and DELETE only.
A POST is not: the server may have read and acted on it before it went away (a tool call is not
idempotent, RFC 9112 §9.3.1), and the client cannot prove otherwise; that one request fails, as
any broken connection fails it, and the idle timeout above keeps the race rare.

Exceptions: connecting raises OSError (refused, DNS, TLS: ``ssl.SSLError`` is one) or
:class:`ConnectTimeout` (a TimeoutError); a request whose header would break the head raises
ValueError; everything else the server can do wrong is an :class:`HttpError`::

    HttpError                   the exchange broke: nothing usable came back, or not all of it
    ├── ProtocolViolation       not HTTP/1.1 as we accept it, or past a limit of this module
    ├── ServerDisconnected      the connection ended before the response did
    └── TooManyRedirects        :data:`MAX_REDIRECTS` redirects in a row

A refused redirect raises :class:`proxy.outbound.over_http.redirects.RedirectRefused`.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from contextlib import suppress
from types import TracebackType
from typing import Final, cast

import aiohappyeyeballs
import anyio
import httptools
import yarl

from proxy.outbound.over_http.redirects import REDIRECTS, follow

__all__ = [
    "IDLE_TIMEOUT",
    "MAX_HEAD",
    "MAX_HEADERS",
    "MAX_IDLE",
    "MAX_REDIRECTS",
    "Client",
    "ConnectTimeout",
    "HttpError",
    "ProtocolViolation",
    "Response",
    "ServerDisconnected",
    "TooManyRedirects",
]

MAX_HEAD: Final = 64 * 1024  # bytes of status line and headers (1xx heads included)
MAX_HEADERS: Final = 100  # header fields in one head
MAX_IDLE: Final = 32  # idle connections kept per client
IDLE_TIMEOUT: Final = 4.0  # seconds an idle connection is kept
MAX_REDIRECTS: Final = 10  # requests in a row answered with a redirect before giving up
_HIGH_WATER: Final = 256 * 1024  # body bytes buffered before reading pauses
_LOW_WATER: Final = 64 * 1024  # ... and resumes
_INFLATE_STEP: Final = 64 * 1024  # most decoded bytes from one step of inflating
_DRAIN_LIMIT: Final = 64 * 1024  # body bytes read and dropped to keep a connection (Response.drain)
_RETRIED: Final = frozenset({"GET", "DELETE"})  # idempotent: retried once on a dead reused connection
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_USER_AGENT: Final = "manifold"


class HttpError(Exception):
    """An HTTP exchange broke: the server broke HTTP/1.1 or went away before answering in full."""


class ProtocolViolation(HttpError):
    """What the server sent is not HTTP/1.1 as this client accepts it, or is past one of its limits."""


class ServerDisconnected(HttpError):
    """The connection ended before the response did."""


class TooManyRedirects(HttpError):
    """Too many redirects in a row, even within the origin."""


class ConnectTimeout(TimeoutError):
    """No connection (TCP, and TLS for https) within the connect timeout."""


_default_ssl: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    global _default_ssl  # built once: loading the system's CA certificates is not free
    if _default_ssl is None:
        _default_ssl = ssl.create_default_context()
    return _default_ssl


class Response:
    """One response: its head, and its body as it arrives.

    ``headers`` has lower-case names; a header sent more than once has its values joined with
    ``", "`` (RFC 9110's list syntax).
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_error",
        "_inflate",
        "_tail",
        "_waiter",
        "complete",
        "encoding",
        "headers",
        "reason",
        "status",
    )

    def __init__(self, conn: _Connection) -> None:
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.encoding: str | None = None  # gzip or deflate: the body is inflated as it is read
        self.complete = False  # the whole message arrived (not necessarily read yet)
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._error: HttpError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._inflate: zlib._Decompress | None = None
        self._tail = b""  # compressed input not inflated yet

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def content_type(self) -> str:
        """The media type, lower-case and without parameters (``application/octet-stream`` if none)."""
        value = self.headers.get("content-type")
        if not value:
            return "application/octet-stream"
        return value.partition(";")[0].strip().lower()

    @property
    def content_length(self) -> int | None:
        """What Content-Length says (of the body as sent: see :attr:`encoding`)."""
        value = self.headers.get("content-length")
        return int(value) if value is not None else None  # llhttp accepted it: digits only

    async def read(self, limit: int) -> bytes:
        """The whole body, or, once it grew past ``limit`` bytes, what was read by then (longer
        than ``limit``: the caller tells it apart by its length; the rest is left unread).

        Raises:
            HttpError: the connection broke before the end of the body, or the body is unreadable.
        """
        chunks = self._chunks
        if self.complete and self._inflate is None and self.encoding is None and len(chunks) <= 1:
            body = chunks.popleft() if chunks else b""  # the usual case: all here, in one piece
            self._buffered = 0
            return body
        parts: list[bytes] = []
        size = 0
        while chunk := await self.read_some():
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                break
        return b"".join(parts)

    async def read_some(self) -> bytes:
        """The next piece of the body, as it arrives (inflated if it was sent compressed);
        ``b""`` at its end.

        Raises:
            HttpError: the connection broke before the end of the body, or the body is unreadable.
        """
        if self.encoding is None:
            return await self._next()
        while True:
            data = self._tail or await self._next()
            if self._inflate is None:
                wbits = 16 + zlib.MAX_WBITS if self.encoding == "gzip" else zlib.MAX_WBITS
                self._inflate = zlib.decompressobj(wbits)
            if not data:
                if not self._inflate.eof:
                    raise ProtocolViolation(f"the {self.encoding} body ends before its compressed end")
                return b""
            if self._inflate.eof:
                self._tail = b""
                continue  # past the compressed end: nothing more to decode
            try:
                # Bounded: a small body can stand for any size once inflated (a bomb).
                out = self._inflate.decompress(data, _INFLATE_STEP)
            except zlib.error as exc:
                raise ProtocolViolation(f"an unreadable {self.encoding} body: {exc}") from None
            self._tail = self._inflate.unconsumed_tail
            if out:
                return out

    async def drain(self, seconds: float, limit: int = _DRAIN_LIMIT) -> None:
        """Read and drop what is left of the body, for at most ``seconds`` and about ``limit``
        bytes: a server about to end it (an SSE answer stream after its response) then leaves
        the connection reusable; one that does not loses it when the exchange ends. Never raises."""
        if self.complete:
            return  # nothing more to wait for (what is buffered does not matter to the connection)
        size = 0
        with anyio.move_on_after(seconds), suppress(HttpError):
            while size <= limit and (chunk := await self.read_some()):
                size += len(chunk)

    async def _next(self) -> bytes:
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.complete:
                return b""
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._buffered <= _LOW_WATER:
            self._conn.resume()
        return chunk

    # ---- fed by the connection

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER:
            self._conn.pause()
        self._wake()

    def _end(self, error: HttpError | None = None) -> None:
        if error is None:
            self.complete = True
        elif not self.complete and self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _Stop(Exception):
    """Raised from a parser callback to stop parsing; the connection says why."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, feeds what comes back to the parser."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._client = client
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._head: asyncio.Future[Response] | None = None
        self.response: Response | None = None  # the one being received, until released
        self.closed = False
        self.received = False  # any byte of the current response arrived
        self.idle_since = 0.0
        self._paused = False
        self._violation = ""
        self._head_bytes = 0  # bytes received while the head was incomplete
        self._head_size = 0  # bytes in the header fields parsed
        self._head_done = False
        self._header_count = 0
        self._until_close = False  # the body ends when the connection does
        self._keep_alive = False  # the server lets the connection live on after this response

    # ---- driven by the client

    def send(self, data: bytes) -> asyncio.Future[Response]:
        """Write one request; the future resolves with the response once its head arrived."""
        assert self._transport is not None
        self.response = Response(self)
        self._head = self.loop.create_future()
        self.received = self._head_done = self._until_close = self._keep_alive = False
        self._head_bytes = self._head_size = self._header_count = 0
        self._transport.write(data)
        return self._head

    @property
    def reusable(self) -> bool:
        response = self.response
        return (
            not self.closed
            and response is not None
            and response.complete
            and response._error is None
            and not self._until_close
            and self._keep_alive
        )

    def pause(self) -> None:
        if not self._paused and self._transport is not None and not self.closed:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self.closed:
            self._paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._transport is not None:
                self._transport.close()

    def _fail(self, error: HttpError) -> None:
        if self.response is not None:
            self.response._end(error)
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        self.close()

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None or response.complete:
            # Unasked: a server that speaks on an idle connection is not trusted with the next request.
            self.close()
            return
        self.received = True
        if not self._head_done:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolViolation("the server switched protocols unasked"))
        except httptools.HttpParserError as exc:
            self._unreadable(exc)
        else:
            if not self._head_done and self._head_bytes > MAX_HEAD:
                self._fail(ProtocolViolation(f"a response head longer than {MAX_HEAD} bytes"))

    def _unreadable(self, exc: httptools.HttpParserError) -> None:
        if self.response is not None and self.response.complete:
            self.close()  # bytes after the response: it stands, the connection does not
        else:
            self._fail(ProtocolViolation(self._violation or f"not a readable HTTP/1.1 response: {exc}"))

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost settles the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._client._forget(self)
        response = self.response
        if response is None or response.complete:
            return
        if self._head_done and self._until_close and exc is None:
            response._end()  # a body delimited by the close
            return
        if not self.received:
            reason = "the server closed the connection without answering"
        elif not self._head_done:
            reason = "the server closed the connection in the middle of the response head"
        else:
            reason = "the server closed the connection before the end of the body"
        self._fail(ServerDisconnected(reason + (f" ({exc})" if exc is not None else "")))

    def pause_writing(self) -> None:
        pass  # a request is written whole, from memory the caller already holds; nothing to slow

    def resume_writing(self) -> None:
        pass

    # ---- httptools callbacks

    def on_message_begin(self) -> None:
        if self.response is None or self.response.complete:
            self._violation = "the server sent more than one response"
            raise _Stop

    def on_status(self, status: bytes) -> None:
        assert self.response is not None
        self.response.reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > MAX_HEADERS:
            self._violation = f"a response with more than {MAX_HEADERS} header fields"
            raise _Stop
        # What data_received counts misses a head that arrives whole with its body in one read.
        self._head_size += len(name) + len(value)
        if self._head_size > MAX_HEAD:
            self._violation = f"a response head longer than {MAX_HEAD} bytes"
            raise _Stop
        assert self.response is not None
        headers = self.response.headers
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        response = self.response
        assert response is not None
        assert self._head is not None
        status = self._parser.get_status_code()
        if status < 200:  # informational (103 Early Hints, say): the real response follows
            response.headers, response.reason, self._header_count = {}, "", 0
            return
        response.status = status
        self._head_done = True
        headers = response.headers
        coding = headers.get("content-encoding", "identity").strip().lower()
        if coding in ("gzip", "deflate", "x-gzip"):
            response.encoding = "deflate" if coding == "deflate" else "gzip"
        elif coding not in ("identity", ""):
            self._violation = f"a body in Content-Encoding {coding!r} (gzip and deflate only)"
            raise _Stop
        framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
        self._until_close = not framed and status not in (204, 304)
        if not self._head.done():
            self._head.set_result(response)

    def on_body(self, body: bytes) -> None:
        assert self.response is not None
        self.response._feed(body)

    def on_message_complete(self) -> None:
        if self._head_done:
            assert self.response is not None
            self._keep_alive = self._parser.should_keep_alive()  # llhttp forgets it after this call
            self.response._end()


class _Target:
    """A URL requests go to: its request-target and, for redirects, its parsed form."""

    __slots__ = ("path", "url")

    def __init__(self, url: yarl.URL) -> None:
        self.url = url
        self.path = url.raw_path_qs


class Client:
    """A pool of keep-alive connections to one origin (the configured URL's), and the requests
    made on it. Not safe to share between event loops; closed with :meth:`close`."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        server_id: str,
        connect_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = MAX_IDLE,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        """``headers`` go on every request (a request's own headers of the same name win);
        ``ssl_context`` replaces the default one for https (tests).

        Nothing is checked here that could fail: a URL or header this client cannot use fails
        each request (ValueError), as it did under aiohttp.
        """
        self._server_id = server_id
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._idle_timeout = idle_timeout
        self._idle: list[_Connection] = []  # the most recently used last
        self._all: set[_Connection] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._targets: dict[str, _Target] = {}
        self._closed = False
        self._unusable: ValueError | None = None
        self._host, self._port, self._ssl = "", 0, ssl_context
        self._base: dict[str, str] = {}  # lower-case name -> "Name: value\r\n"
        try:
            origin = yarl.URL(url)
            if origin.scheme not in ("http", "https") or not origin.raw_host or origin.port is None:
                raise ValueError(f"not an http(s) URL with a host: {origin.scheme}://…")
            self._host, self._port = origin.raw_host, origin.port
            if origin.scheme == "https" and self._ssl is None:
                self._ssl = _ssl_context()
            elif origin.scheme == "http":
                self._ssl = None
            self._base = {"host": f"Host: {origin.host_port_subcomponent}\r\n"}
            self._base["user-agent"] = f"User-Agent: {_USER_AGENT}\r\n"
            for name, value in (headers or {}).items():
                self._base[name.lower()] = _header_line(name, value)
            if origin.raw_user or origin.raw_password:
                # As aiohttp did: the URL's credentials win over a configured Authorization.
                basic = f"{origin.user or ''}:{origin.password or ''}".encode("latin-1")
                self._base["authorization"] = f"Authorization: Basic {base64.b64encode(basic).decode()}\r\n"
        except ValueError as exc:
            self._unusable = exc
        self._base_block = "".join(self._base.values())

    @property
    def idle(self) -> int:
        """How many idle connections are kept."""
        return len(self._idle)

    def request(
        self, method: str, url: str, *, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> _Exchange:
        """``async with client.request(...) as response:`` one request; leaving the block releases
        its connection (reused only if the response was complete on the wire).

        Raises (on entering the block):
            OSError, ConnectTimeout: no connection.
            HttpError: the server broke the exchange; ``RedirectRefused``: it redirected elsewhere.
            ValueError: the URL or a header cannot be sent.
        """
        return _Exchange(self, method, url, body, headers)

    def close(self) -> None:
        """Close every connection, idle or in use; later requests fail."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for conn in list(self._all):
            conn.close()
        self._idle.clear()

    # ---- one request, redirects followed

    async def _send(
        self, method: str, url: str, body: bytes, headers: Mapping[str, str] | None
    ) -> tuple[_Connection, Response]:
        if self._closed:
            raise HttpError("the HTTP client is closed")
        if self._unusable is not None:
            raise self._unusable
        target = self._target(url)
        head = self._head(method, body, headers)
        for _ in range(MAX_REDIRECTS):
            conn, response = await self._exchange(method, target, head, body)
            if response.status not in REDIRECTS:
                return conn, response
            location = response.header("location") or response.header("uri")
            if location is None:
                return conn, response  # nowhere to go: the answer as it is
            self.release(conn)
            # Raises RedirectRefused unless it stays within the origin, keeping method and body.
            target = self._target(str(follow(self._server_id, method, response.status, target.url, location)))
        raise TooManyRedirects(f"{MAX_REDIRECTS} redirects in a row from {self._host}:{self._port}")

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            parsed = yarl.URL(url)
            if (parsed.scheme, parsed.raw_host, parsed.port) != (
                "https" if self._ssl is not None else "http",
                self._host,
                self._port,
            ):
                raise ValueError("a URL on another origin than the client's")
            target = _Target(parsed)
            if len(self._targets) < 16:  # the configured URL, an endpoint, a redirect or two
                self._targets[url] = target
        return target

    def _head(self, method: str, body: bytes, headers: Mapping[str, str] | None) -> str:
        """The request head after the request line (the header block, with its blank line)."""
        base = self._base_block
        extra = ""
        if headers:
            extra = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
            if extra.count("\n") != len(headers) or extra.count("\r") != len(headers):
                raise ValueError("a header name or value holds a line break")
            lowered = [name.lower() for name in headers]
            if not self._base.keys().isdisjoint(lowered):  # a request's own header wins
                base = "".join(v for k, v in self._base.items() if k not in lowered)
            for name in headers:
                _check_name(name)
        length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
        return f"{base}{extra}{length}\r\n"

    async def _exchange(
        self, method: str, target: _Target, head: str, body: bytes
    ) -> tuple[_Connection, Response]:
        data = f"{method} {target.path} HTTP/1.1\r\n{head}".encode() + body
        conn = self._take_idle()
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        try:
            return conn, await conn.send(data)
        except ServerDisconnected:
            conn.close()
            if not (reused and not conn.received and method in _RETRIED):
                raise
        except BaseException:
            conn.close()
            raise
        conn = await self._connect()  # once: see the module's docstring
        try:
            return conn, await conn.send(data)
        except BaseException:
            conn.close()
            raise

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            with anyio.fail_after(self._connect_timeout):
                infos = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
                # Happy eyeballs, as aiohttp did: a host whose first address (IPv6, say) is
                # unreachable is tried on the next after 250 ms, not after the whole timeout.
                sock = await aiohappyeyeballs.start_connection(infos, happy_eyeballs_delay=0.25, interleave=1)
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, loop),
                    sock=sock,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise ConnectTimeout(
                f"no connection to {self._host}:{self._port} within {self._connect_timeout:g}s"
            ) from None
        if self._closed:  # closed while we connected
            conn.close()
            raise HttpError("the HTTP client is closed")
        self._all.add(conn)
        return conn

    # ---- the pool

    def _take_idle(self) -> _Connection | None:
        now = asyncio.get_running_loop().time()
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._idle_timeout:
                return conn
            conn.close()
        return None

    def release(self, conn: _Connection) -> None:
        """Keep ``conn`` for the next request if its response is complete and it may be reused."""
        if self._closed or not conn.reusable or len(self._idle) >= self._max_idle:
            conn.close()
            return
        conn.resume()  # reading on, so that a close by the server is seen while idle
        conn.response = None
        conn.idle_since = conn.loop.time()
        self._idle.append(conn)
        if self._timer is None:
            self._timer = conn.loop.call_later(self._idle_timeout, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        if not self._idle:
            return
        now = self._idle[0].loop.time()
        expired = [c for c in self._idle if now - c.idle_since >= self._idle_timeout]
        for conn in expired:
            conn.close()  # connection_lost removes it from the pool (later): do it now
        self._idle = [c for c in self._idle if not c.closed]
        if self._idle:
            oldest = self._idle[0]
            self._timer = oldest.loop.call_later(
                max(oldest.idle_since + self._idle_timeout - now, 0.01), self._sweep
            )

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)


class _Exchange:
    """The ``async with`` of :meth:`Client.request`."""

    __slots__ = ("_body", "_client", "_conn", "_headers", "_method", "_url")

    def __init__(
        self, client: Client, method: str, url: str, body: bytes, headers: Mapping[str, str] | None
    ) -> None:
        self._client = client
        self._method = method
        self._url = url
        self._body = body
        self._headers = headers
        self._conn: _Connection | None = None

    async def __aenter__(self) -> Response:
        self._conn, response = await self._client._send(self._method, self._url, self._body, self._headers)
        return response

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._conn is not None:
            self._client.release(self._conn)
            self._conn = None


_names_seen: set[str] = set()


def _check_name(name: str) -> None:
    if name not in _names_seen:
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"not a valid HTTP header name: {name!r}")
        if len(_names_seen) < 1024:
            _names_seen.add(name)


def _header_line(name: str, value: str) -> str:
    _check_name(name)
    if "\r" in value or "\n" in value:
        raise ValueError(f"the value of header {name!r} holds a line break")
    return f"{name}: {value}\r\n"
