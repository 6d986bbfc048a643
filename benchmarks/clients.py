"""Keep-alive HTTP/1.1 clients that POST one JSON body and read one answer.

The load generator shares two cores with the process it measures, so the client must cost as
little CPU per request as possible. :class:`RawPoster` (asyncio streams, hand-parsed status line,
``Content-Length`` or chunked body) is the one the load generator uses; the others exist to be
measured against it (``benchmarks/README.md`` records the comparison):

* ``h11``: the same asyncio streams, with h11 doing the HTTP/1.1 parsing;
* ``aiohttp``: ``aiohttp.ClientSession`` (Manifold's outbound HTTP client today);
* ``httpx`` and ``httpx2``: ``AsyncClient`` (httpx2 is the fork the MCP SDK uses), when installed.

Every poster holds exactly one keep-alive connection: one poster per concurrent worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import orjson

__all__ = [
    "CANDIDATES",
    "HttpPoster",
    "PosterFactory",
    "Reply",
    "available_candidates",
    "open_raw",
    "open_stateless",
]

_ACCEPT: Final = "application/json, text/event-stream"
_HEAD_END: Final = b"\r\n\r\n"


class HttpError(Exception):
    """The server's answer could not be read as HTTP/1.1 the way these clients expect."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    content_type: str  # without parameters, lower-case
    session_id: str | None  # the Mcp-Session-Id response header
    body: bytes


class HttpPoster(Protocol):
    """One keep-alive connection that POSTs JSON bodies to one URL, one at a time."""

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        """Raises: HttpError, OSError: the connection broke or the answer is not HTTP/1.1."""
        ...

    async def aclose(self) -> None: ...


PosterFactory = Callable[[str], Awaitable[HttpPoster]]


def _split(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname or "127.0.0.1", parts.port or 80, target


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


# ----------------------------------------------------------------------------- the lean one


class RawPoster:
    """HTTP/1.1 by hand over asyncio streams: the request head is prebuilt per session id."""

    def __init__(
        self,
        url: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        host, port, path = _split(url)
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
        self._prefix = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nAccept: {_ACCEPT}\r\n{extra}"
        ).encode("latin-1")
        self._heads: dict[str | None, bytes] = {None: self._prefix + b"Content-Length: "}
        self._reader = reader
        self._writer = writer

    def _head(self, session_id: str | None) -> bytes:
        head = self._heads.get(session_id)
        if head is None:
            head = self._prefix + f"Mcp-Session-Id: {session_id}\r\nContent-Length: ".encode("latin-1")
            if len(self._heads) < 64:  # the load keeps one session per poster; bound the rest
                self._heads[session_id] = head
        return head

    def stateless_head(self, method: str, name: str | None) -> bytes:
        """The head (up to ``Content-Length: ``) of a 2026-07-28 request: :class:`StatelessPoster`."""
        key = f"{method}\n{name}"
        head = self._heads.get(key)
        if head is None:
            mirrored = f"MCP-Protocol-Version: {STATELESS_VERSION}\r\nMcp-Method: {method}\r\n"
            if name is not None:
                mirrored += f"Mcp-Name: {name}\r\n"
            head = self._prefix + (mirrored + "Content-Length: ").encode("latin-1")
            if len(self._heads) < 64:
                self._heads[key] = head
        return head

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        return await self.send(self._head(session_id), body)

    async def send(self, head: bytes, body: bytes) -> Reply:
        """POST ``body`` after ``head`` (everything up to ``Content-Length: ``); the reply."""
        self._writer.write(b"".join((head, str(len(body)).encode(), _HEAD_END, body)))
        block = await self._reader.readuntil(_HEAD_END)
        if block[:5] != b"HTTP/":
            raise HttpError(f"not an HTTP response: {block[:40]!r}")
        status = int(block[9:12])
        length, chunked, content_type, sid = -1, False, "", None
        for line in block[:-4].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-type":
                content_type = _media_type(value.decode("latin-1"))
            elif name == b"mcp-session-id":
                sid = value.strip().decode("latin-1")
        if chunked:
            data = await self._chunked()
        elif length >= 0:
            data = await self._reader.readexactly(length)
        else:
            raise HttpError("a response without Content-Length or chunked encoding")
        return Reply(status, content_type, sid, data)

    async def _chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await self._reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return b"".join(chunks)
            chunks.append((await self._reader.readexactly(size + 2))[:-2])

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def open_raw(url: str, headers: Sequence[tuple[str, str]] = ()) -> HttpPoster:
    """A :class:`RawPoster` sending ``headers`` on every request too. Raises: OSError: cannot connect."""
    host, port, _ = _split(url)
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    return RawPoster(url, reader, writer, headers)


# The 2026-07-28 envelope a stateless request carries in ``params._meta`` (no session, no initialize).
STATELESS_VERSION: Final = "2026-07-28"
_ENVELOPE: Final = {
    "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "manifold-bench", "version": "0"},
}


class StatelessPoster:
    """``tools/call`` at 2026-07-28, the way Manifold reaches an HTTP server: each POST self-contained
    (the envelope in ``params._meta``, its method and tool name mirrored in headers), no session.

    The load's bodies are handshake-era requests; this adds the envelope and the headers, and
    ignores the session id it is given.
    """

    def __init__(self, raw: RawPoster) -> None:
        self._raw = raw

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        message = orjson.loads(body)
        params = message.setdefault("params", {})
        params["_meta"] = _ENVELOPE
        raw = self._raw
        name = params.get("name")
        head = raw.stateless_head(message["method"], name if isinstance(name, str) else None)
        return await raw.send(head, orjson.dumps(message))

    async def aclose(self) -> None:
        await self._raw.aclose()


async def open_stateless(url: str) -> HttpPoster:
    """Raises: OSError: cannot connect."""
    host, port, _ = _split(url)
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    return StatelessPoster(RawPoster(url, reader, writer))


# ----------------------------------------------------------------------------- candidates


class H11Poster:
    """h11's parser over the same asyncio streams."""

    def __init__(self, url: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11

        self._h11 = h11
        host, port, self._path = _split(url)
        self._host = f"{host}:{port}"
        self._reader = reader
        self._writer = writer
        self._conn = h11.Connection(our_role=h11.CLIENT)

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        h11 = self._h11
        headers = [
            ("Host", self._host),
            ("Content-Type", "application/json"),
            ("Accept", _ACCEPT),
            ("Content-Length", str(len(body))),
        ]
        if session_id is not None:
            headers.append(("Mcp-Session-Id", session_id))
        conn = self._conn
        self._writer.write(
            conn.send(h11.Request(method="POST", target=self._path, headers=headers))
            + conn.send(h11.Data(data=body))
            + conn.send(h11.EndOfMessage())
        )
        status, content_type, sid, chunks = 0, "", None, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await self._reader.read(65536)
                if not data:
                    raise HttpError("the connection closed mid-response")
                conn.receive_data(data)
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    if name == b"content-type":
                        content_type = _media_type(value.decode("latin-1"))
                    elif name == b"mcp-session-id":
                        sid = value.decode("latin-1")
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                conn.start_next_cycle()
                return Reply(status, content_type, sid, b"".join(chunks))
            else:
                raise HttpError(f"unexpected h11 event {event!r}")

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def open_h11(url: str) -> HttpPoster:
    host, port, _ = _split(url)
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    return H11Poster(url, reader, writer)


class AiohttpPoster:
    def __init__(self, url: str) -> None:
        import aiohttp

        self._url = url
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        self._headers = {"Content-Type": "application/json", "Accept": _ACCEPT}

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        headers = self._headers if session_id is None else {**self._headers, "Mcp-Session-Id": session_id}
        async with self._http.post(self._url, data=body, headers=headers) as response:
            data = await response.read()
            return Reply(response.status, response.content_type, response.headers.get("mcp-session-id"), data)

    async def aclose(self) -> None:
        await self._http.close()


async def open_aiohttp(url: str) -> HttpPoster:
    return AiohttpPoster(url)


class HttpxPoster:
    """httpx's or httpx2's ``AsyncClient`` (the two share one API)."""

    def __init__(self, url: str, module: str) -> None:
        lib: Any = importlib.import_module(module)
        self._url = url
        self._http = lib.AsyncClient(limits=lib.Limits(max_connections=1), timeout=30.0, trust_env=False)
        self._headers = {"Content-Type": "application/json", "Accept": _ACCEPT}

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        headers = self._headers if session_id is None else {**self._headers, "Mcp-Session-Id": session_id}
        response = await self._http.post(self._url, content=body, headers=headers)
        content_type = _media_type(response.headers.get("content-type", ""))
        return Reply(
            response.status_code, content_type, response.headers.get("mcp-session-id"), response.content
        )

    async def aclose(self) -> None:
        await self._http.aclose()


def _httpx_factory(module: str) -> PosterFactory:
    async def open_httpx(url: str) -> HttpPoster:
        return HttpxPoster(url, module)

    return open_httpx


# name -> (factory, the module it needs)
CANDIDATES: Final[dict[str, tuple[PosterFactory, str]]] = {
    "raw": (open_raw, "asyncio"),
    "h11": (open_h11, "h11"),
    "aiohttp": (open_aiohttp, "aiohttp"),
    "httpx": (_httpx_factory("httpx"), "httpx"),
    "httpx2": (_httpx_factory("httpx2"), "httpx2"),
}


def available_candidates() -> tuple[dict[str, PosterFactory], dict[str, str]]:
    """The candidates whose library is installed, and a note for each one that is not."""
    found: dict[str, PosterFactory] = {}
    missing: dict[str, str] = {}
    for name, (factory, module) in CANDIDATES.items():
        if importlib.util.find_spec(module) is None:
            missing[name] = f"{module} is not installed"
        else:
            found[name] = factory
    return found, missing
