"""The wire half of :mod:`proxy.outbound.over_http.h1`: one HTTP/1.1 connection as an asyncio
protocol, its response parsed by ``httptools`` and read piece by piece, and what can go wrong.

The pool that hands connections out, and the module's story, are in :mod:`proxy.outbound.over_http.h1`.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from typing import Final, cast

import anyio
import httptools

__all__ = [
    "MAX_HEAD",
    "MAX_HEADERS",
    "ConnectTimeout",
    "Connection",
    "HttpError",
    "ProtocolViolation",
    "Response",
    "ServerDisconnected",
    "TooManyRedirects",
]

MAX_HEAD: Final = 64 * 1024  # bytes of status line and headers (1xx heads included)
MAX_HEADERS: Final = 100  # header fields in one head
_HIGH_WATER: Final = 256 * 1024  # body bytes buffered before reading pauses
_LOW_WATER: Final = 64 * 1024  # ... and resumes
_INFLATE_STEP: Final = 64 * 1024  # most decoded bytes from one step of inflating
_DRAIN_LIMIT: Final = 64 * 1024  # body bytes read and dropped to keep a connection (Response.drain)


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

    def __init__(self, conn: Connection) -> None:
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


class Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, feeds what comes back to the parser."""

    def __init__(self, forget: Callable[[Connection], None], loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._forget = forget  # the pool's: this connection may not be handed out again
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
        self._forget(self)
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
