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
from collections.abc import Mapping
from types import TracebackType
from typing import Final

import aiohappyeyeballs
import anyio
import yarl

from proxy.outbound.over_http.h1_wire import (
    MAX_HEAD,
    MAX_HEADERS,
    Connection,
    ConnectTimeout,
    HttpError,
    ProtocolViolation,
    Response,
    ServerDisconnected,
    TooManyRedirects,
)
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

MAX_IDLE: Final = 32  # idle connections kept per client
IDLE_TIMEOUT: Final = 4.0  # seconds an idle connection is kept
MAX_REDIRECTS: Final = 10  # requests in a row answered with a redirect before giving up
_RETRIED: Final = frozenset({"GET", "DELETE"})  # idempotent: retried once on a dead reused connection
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_USER_AGENT: Final = "manifold"


_default_ssl: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    global _default_ssl  # built once: loading the system's CA certificates is not free
    if _default_ssl is None:
        _default_ssl = ssl.create_default_context()
    return _default_ssl


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
        self._idle: list[Connection] = []  # the most recently used last
        self._all: set[Connection] = set()
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
    ) -> tuple[Connection, Response]:
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
    ) -> tuple[Connection, Response]:
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

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            with anyio.fail_after(self._connect_timeout):
                infos = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
                # Happy eyeballs, as aiohttp did: a host whose first address (IPv6, say) is
                # unreachable is tried on the next after 250 ms, not after the whole timeout.
                sock = await aiohappyeyeballs.start_connection(infos, happy_eyeballs_delay=0.25, interleave=1)
                _, conn = await loop.create_connection(
                    lambda: Connection(self._forget, loop),
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

    def _take_idle(self) -> Connection | None:
        now = asyncio.get_running_loop().time()
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._idle_timeout:
                return conn
            conn.close()
        return None

    def release(self, conn: Connection) -> None:
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

    def _forget(self, conn: Connection) -> None:
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
        self._conn: Connection | None = None

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
