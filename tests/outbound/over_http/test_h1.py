"""The keep-alive HTTP/1.1 client against real loopback servers: the SDK fixture server (behind a
relay that counts connections), and small raw-socket servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.tls import TLSListener
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from proxy.core.errors import MessageTooLarge
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.common import EventReader, read_body
from proxy.outbound.over_http.streamable import StreamableHttpTransport
from tests.fixtures.spawn import answered, call, collect, handshake, running_http_fixture

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[pytest.param({}, id="asyncio"), pytest.param({"use_uvloop": True}, id="uvloop")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    """Every test on asyncio's own loop and on uvloop, the loop Manifold runs on."""
    options: dict[str, bool] = request.param
    return "asyncio", options


JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIMIT = 1024 * 1024


# ---------------------------------------------------------------------------- raw servers


@dataclass
class Request:
    line: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class Raw:
    """A loopback server; ``accepted`` counts the connections it accepted."""

    port: int
    accepted: int = 0
    requests: list[Request] = field(default_factory=list)
    closed: anyio.Event = field(default_factory=anyio.Event)  # a connection ended (either side)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


class Peer:
    """One accepted connection, as the handler sees it."""

    def __init__(self, stream: anyio.abc.SocketStream, server: Raw, number: int) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)
        self.server = server
        self.number = number  # 1 for the first connection accepted

    async def request(self) -> Request:
        """The next request on this connection (raises EndOfStream once the client hung up)."""
        head = await self.reader.receive_until(b"\r\n\r\n", 1 << 20)
        line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for text in lines:
            name, _, value = text.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await self.reader.receive_exactly(length) if length else b""
        request = Request(line, headers, body)
        self.server.requests.append(request)
        return request

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def hung_up(self) -> bool:
        """Read (and drop) until the client closes this connection; bounded by the caller."""
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            while True:
                await self.reader.receive()
        return True


Handler = Callable[[Peer], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[Raw]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = Raw(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def serve(stream: anyio.abc.SocketStream) -> None:
        server.accepted += 1
        async with stream:
            with suppress(
                anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError
            ):
                await handler(Peer(stream, server, server.accepted))
        server.closed.set()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


def response(body: bytes = b"{}", *, status: str = "200 OK", headers: str = "") -> bytes:
    """A keep-alive response with a Content-Length."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def chunked(*pieces: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n" + trailer + b"\r\n"


async def keep_alive(peer: Peer) -> None:
    """Answers every request on the connection with its request line, keeping it open."""
    while True:
        request = await peer.request()
        await peer.send(response(request.line.encode()))


def client(url: str, **options: float) -> h1.Client:
    return h1.Client(url, server_id="test", connect_timeout=5, **options)  # type: ignore[arg-type]


async def post(http: h1.Client, url: str, method: str = "POST", body: bytes = b"{}") -> tuple[int, bytes]:
    async with http.request(method, url, body=body, headers=JSON) as answer:
        return answer.status, await answer.read(LIMIT)


# ---------------------------------------------------------------------------- keep-alive


async def test_sequential_requests_reuse_one_keep_alive_connection() -> None:
    async with raw_server(keep_alive) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                answers = [await post(http, server.url, body=b'{"n":%d}' % n) for n in range(5)]
        finally:
            http.close()
    assert answers == [(200, b"POST /mcp HTTP/1.1")] * 5
    assert server.accepted == 1
    assert [r.body for r in server.requests] == [b'{"n":%d}' % n for n in range(5)]


async def test_each_request_is_written_whole_with_host_length_and_the_configured_headers() -> None:
    async with raw_server(keep_alive) as server:
        http = h1.Client(
            server.url, {"X-Api-Key": "k1", "Accept": "text/plain"}, server_id="t", connect_timeout=5
        )
        try:
            with anyio.fail_after(10):
                await post(http, server.url)  # its own Accept wins over the configured one
                async with http.request("GET", server.url + "?x=1", headers={"Accept": "text/event-stream"}):
                    pass
        finally:
            http.close()
    first, second = server.requests
    assert first.headers["host"] == f"127.0.0.1:{server.port}"
    assert first.headers["x-api-key"] == second.headers["x-api-key"] == "k1"
    assert first.headers["accept"] == "application/json, text/event-stream"
    assert first.headers["content-length"] == "2"
    assert second.line == "GET /mcp?x=1 HTTP/1.1"
    assert "content-length" not in second.headers


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with raw_server(keep_alive) as server:
        http = client(server.url)
        try:
            with pytest.raises(ValueError, match="line break"):
                async with http.request("POST", server.url, body=b"{}", headers={"X-A": "a\r\nX-B: b"}):
                    pass
        finally:
            http.close()
    assert server.accepted == 0


@pytest.mark.slow
async def test_the_sdk_server_is_reached_over_few_kept_alive_connections() -> None:
    """Ten calls through the Streamable HTTP transport: the GET stream holds one connection, the
    POSTs share one more (a JSON and an SSE-answering server alike)."""
    for json_response in (True, False):
        async with (
            running_http_fixture("alpha", transport="streamable-http", json_response=json_response) as url,
            counting_relay(url) as relay,
        ):
            with anyio.fail_after(30):
                async with StreamableHttpTransport("alpha", relay.url).connect() as link:
                    await handshake(link)
                    for n in range(10):
                        await link.send(call(10 + n, "echo", {"text": str(n)}))
                        answers, _ = await collect(link, 1)
                        assert "result" in answered(answers[10 + n])
            assert relay.accepted <= 3, (json_response, relay.accepted)


@dataclass
class Relay:
    url: str
    accepted: int = 0


@asynccontextmanager
async def counting_relay(url: str) -> AsyncIterator[Relay]:
    """A TCP relay in front of ``url``'s server that counts the connections it accepts."""
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    relay = Relay(url.replace(f":{port}/", f":{listener.extra(anyio.abc.SocketAttribute.local_port)}/"))

    async def pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for data in source:
                await sink.send(data)
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await sink.send_eof()

    async def serve(client_side: anyio.abc.SocketStream) -> None:
        relay.accepted += 1
        async with (
            client_side,
            await anyio.connect_tcp("127.0.0.1", port) as server_side,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(pipe, client_side, server_side)
            await pipe(server_side, client_side)
            tg.cancel_scope.cancel()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield relay
        finally:
            tg.cancel_scope.cancel()


async def test_a_connection_the_server_closed_while_idle_is_never_handed_out() -> None:
    async def once_then_close(peer: Peer) -> None:
        await peer.request()
        await peer.send(response(b"first"))  # keep-alive by the headers, closed all the same

    async with raw_server(once_then_close) as server:
        http = client(server.url, idle_timeout=60)  # only the server's close ends it
        try:
            with anyio.fail_after(10):
                assert await post(http, server.url) == (200, b"first")
                await server.closed.wait()
                while http.idle:  # the close reaches the client's loop after the server's
                    await anyio.lowlevel.checkpoint()
                assert await post(http, server.url) == (200, b"first")
        finally:
            http.close()
    assert server.accepted == 2


async def test_a_reused_connection_found_dead_fails_a_post_but_retries_a_get_once() -> None:
    async def answer_then_drop(peer: Peer) -> None:
        await peer.request()
        await peer.send(response(b"ok"))
        await peer.request()  # the second request: read, never answered, connection closed

    for method, ok in (("POST", False), ("GET", True), ("DELETE", True)):
        async with raw_server(answer_then_drop) as server:
            http = client(server.url)
            try:
                with anyio.fail_after(10):
                    await post(http, server.url, method)
                    if ok:
                        assert await post(http, server.url, method) == (200, b"ok")
                    else:
                        with pytest.raises(h1.ServerDisconnected, match="without answering"):
                            await post(http, server.url, method)
            finally:
                http.close()
        # The retry went out once, on a new connection; the POST was not sent again.
        assert server.accepted == (2 if ok else 1), method
        assert len(server.requests) == (3 if ok else 2)


@pytest.mark.slow
async def test_idle_connections_are_capped_and_closed_after_the_idle_time() -> None:
    hung_up: list[float] = []

    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(response())
        started = anyio.current_time()
        if await peer.hung_up():
            hung_up.append(anyio.current_time() - started)

    async with raw_server(serve) as server:
        http = client(server.url, max_idle=2, idle_timeout=0.3)
        try:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for _ in range(5):
                        tg.start_soon(post, http, server.url)
                assert http.idle == 2
                while len(hung_up) < 5:
                    await server.closed.wait()
                    server.closed = anyio.Event()
        finally:
            http.close()
    assert server.accepted == 5
    assert http.idle == 0
    assert sorted(hung_up)[:3] < [0.2] * 3  # the three past the cap at once
    assert sorted(hung_up)[3:] > [0.25] * 2  # the kept two after the idle time


async def test_a_connection_whose_response_was_not_read_to_its_end_is_closed_not_reused() -> None:
    async def slow_body(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await peer.hung_up()

    async with raw_server(slow_body) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                async with http.request("POST", server.url, body=b"{}", headers=JSON) as answer:
                    assert await answer.read_some() == b"abc"
                await server.closed.wait()  # the client hung up
        finally:
            http.close()
    assert http.idle == 0


# ---------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    ("wire", "body"),
    [
        (chunked(b"ab", b"cde", b"f" * 5000), b"abcde" + b"f" * 5000),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n", b"abc"),
        (chunked(b"xyz", trailer=b"X-Trailer: 1\r\n"), b"xyz"),
        (response(b"hello"), b"hello"),
        (response(b"", status="204 No Content"), b""),
        (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + response(b"final"), b"final"),
    ],
)
async def test_a_framed_body_is_read_whole_and_the_connection_reused(wire: bytes, body: bytes) -> None:
    async def serve(peer: Peer) -> None:
        while True:
            await peer.request()
            for n in range(0, len(wire), 7):  # in small pieces: the parser must not care
                await peer.send(wire[n : n + 7])

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                assert (await post(http, server.url))[1] == body
                assert (await post(http, server.url))[1] == body
        finally:
            http.close()
    assert server.accepted == 1


async def test_a_close_delimited_body_ends_with_the_connection_which_is_not_reused() -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"a":')
        await peer.send(b"1}")

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                assert await post(http, server.url) == (200, b'{"a":1}')
                assert await post(http, server.url) == (200, b'{"a":1}')
        finally:
            http.close()
    assert server.accepted == 2


@pytest.mark.parametrize(
    "bad",
    [
        b"zz\r\nab\r\n0\r\n\r\n",
        b"-1\r\nab\r\n0\r\n\r\n",
        b"0x2\r\nab\r\n0\r\n\r\n",
        b"fffffffffffffffffffff\r\nab\r\n0\r\n\r\n",
        b"2\r\nabcd\r\n0\r\n\r\n",  # longer than its size says
    ],
)
async def test_a_bad_chunk_size_is_a_protocol_violation_and_the_connection_is_dropped(bad: bytes) -> None:
    async def serve(peer: Peer) -> None:
        while True:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + bad)

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                for _ in range(2):
                    with pytest.raises(h1.ProtocolViolation):
                        await post(http, server.url)
        finally:
            http.close()
    assert server.accepted == 2


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",  # a chunk cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",  # no last chunk
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10,  # closed mid-body
    ],
)
async def test_a_body_cut_off_by_the_server_closing_fails_after_what_came(wire: bytes) -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(wire)

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                async with http.request("POST", server.url, body=b"{}", headers=JSON) as answer:
                    assert answer.status == 200
                    with pytest.raises(h1.ServerDisconnected, match="before the end of the body"):
                        await answer.read(LIMIT)
        finally:
            http.close()


async def test_a_server_closing_mid_head_fails_the_request() -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Le")

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10), pytest.raises(h1.ServerDisconnected, match="response head"):
                await post(http, server.url)
        finally:
            http.close()


async def test_more_bytes_than_content_length_leave_the_response_but_not_the_connection() -> None:
    async def serve(peer: Peer) -> None:
        while True:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n\r\n")

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                assert await post(http, server.url) == (200, b"hello")
                await server.closed.wait()  # the client dropped the connection that said too much
                assert await post(http, server.url) == (200, b"hello")
        finally:
            http.close()
    assert server.accepted == 2


@pytest.mark.parametrize("when", ["with the response", "once the connection is idle"])
async def test_a_server_speaking_unasked_loses_the_connection(when: str) -> None:
    idle = anyio.Event()

    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(response(b"one"))
        if when == "once the connection is idle":
            await idle.wait()
        await peer.send(response(b"unasked"))
        await keep_alive(peer)

    async with raw_server(serve) as server:
        http = client(server.url, idle_timeout=60)  # only the unasked bytes end it
        try:
            with anyio.fail_after(10):
                assert await post(http, server.url) == (200, b"one")
                if when == "once the connection is idle":
                    assert http.idle == 1
                idle.set()
                await server.closed.wait()
                assert (await post(http, server.url))[1] != b"unasked"
        finally:
            http.close()
    assert server.accepted == 2


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (h1.MAX_HEAD + 1) + b"\r\n\r\n", "head longer than"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * (h1.MAX_HEADERS + 1) + b"\r\n", "header fields"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "readable"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "readable"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", "readable"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "readable"),
        (b"HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n", "readable"),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", "switched"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 0\r\n\r\n", "Content-Encoding 'br'"),
    ],
)
async def test_a_head_past_the_limits_or_not_http_fails_the_request(head: bytes, why: str) -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(head)
        await peer.hung_up()

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10), pytest.raises(h1.ProtocolViolation, match=why):
                await post(http, server.url)
        finally:
            http.close()


async def test_endless_headers_are_cut_off_at_the_limit() -> None:
    sent = 0

    async def serve(peer: Peer) -> None:
        nonlocal sent
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\n")
        while True:  # never ends, unless the client hangs up
            await peer.send(b"X-Endless: " + b"e" * 1000 + b"\r\n")
            sent += 1012

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10), pytest.raises(h1.ProtocolViolation):
                await post(http, server.url)
        finally:
            http.close()
    assert sent < 64 * h1.MAX_HEAD  # stopped soon after the limit (the kernel buffers some)


async def test_a_header_value_that_never_ends_is_cut_off_at_the_limit() -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        while True:  # no line end, ever: the parser would buffer all of it
            await peer.send(b"e" * 4096)

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10), pytest.raises(h1.ProtocolViolation, match="head longer than"):
                await post(http, server.url)
        finally:
            http.close()


async def test_a_body_past_the_limit_is_refused_whether_announced_or_not() -> None:
    async def serve(peer: Peer) -> None:
        while True:
            request = await peer.request()
            if request.body == b"announced":
                await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n")
            else:  # endless chunks, no length to refuse up front
                await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    await peer.send(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                for body in (b"announced", b"endless"):
                    async with http.request("POST", server.url, body=body, headers=JSON) as answer:
                        with pytest.raises(MessageTooLarge):
                            await read_body(answer, LIMIT)
        finally:
            http.close()
    assert server.accepted == 2  # neither connection was reused


async def test_a_gzip_body_is_inflated_in_bounded_steps_and_a_bomb_stops_at_the_limit() -> None:
    small = gzip.compress(b'{"ok":true}')
    bomb = gzip.compress(b"\0" * (64 * LIMIT))  # 64 MiB of zeros in about 64 KiB

    async def serve(peer: Peer) -> None:
        while True:
            request = await peer.request()
            body = small if request.body == b"small" else bomb
            await peer.send(response(body, headers="Content-Encoding: gzip\r\n"))

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                async with http.request("POST", server.url, body=b"small", headers=JSON) as answer:
                    assert await read_body(answer, LIMIT) == b'{"ok":true}'
                async with http.request("POST", server.url, body=b"bomb", headers=JSON) as answer:
                    pieces = [await answer.read_some() for _ in range(3)]
                    assert all(0 < len(piece) <= 64 * 1024 for piece in pieces)
                async with http.request("POST", server.url, body=b"bomb", headers=JSON) as answer:
                    with pytest.raises(MessageTooLarge):
                        await read_body(answer, LIMIT)
        finally:
            http.close()


async def test_a_deflate_body_is_inflated_and_a_corrupt_one_is_a_protocol_violation() -> None:
    async def serve(peer: Peer) -> None:
        while True:
            request = await peer.request()
            body = zlib.compress(b"deflated") if request.body == b"good" else b"\x78\x9cnot deflate"
            await peer.send(response(body, headers="Content-Encoding: deflate\r\n"))

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                assert await post(http, server.url, body=b"good") == (200, b"deflated")
                with pytest.raises(h1.ProtocolViolation, match="unreadable deflate"):
                    await post(http, server.url, body=b"bad")
        finally:
            http.close()


async def test_an_sse_body_is_read_event_by_event_as_it_arrives() -> None:
    read_first = anyio.Event()

    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        event = b"event: message\ndata: one\n\n"
        await peer.send(b"%x\r\n%s\r\n" % (len(event), event))
        await read_first.wait()  # the second event only once the client has the first
        event = b"event: message\ndata: two\n\n"
        await peer.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                async with http.request("GET", server.url, headers={"Accept": "text/event-stream"}) as answer:
                    assert answer.content_type == "text/event-stream"
                    events = EventReader(answer)
                    first = await events.next()
                    read_first.set()
                    second = await events.next()
                    assert await events.next() is None
        finally:
            http.close()
    assert first is not None
    assert second is not None
    assert (first.data, second.data) == ("one", "two")


# ---------------------------------------------------------------------------- time and TLS


async def test_a_server_that_never_answers_holds_the_request_until_it_is_cancelled() -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.hung_up()

    async with raw_server(serve) as server:
        http = client(server.url)
        try:
            with anyio.fail_after(10):
                with anyio.move_on_after(0.2) as waited:
                    await post(http, server.url)
                assert waited.cancelled_caught
                await server.closed.wait()  # the cancelled request's connection was closed
        finally:
            http.close()
    assert http.idle == 0


@pytest.mark.slow
async def test_a_tls_handshake_that_never_completes_is_bounded_by_the_connect_timeout() -> None:
    async def serve(peer: Peer) -> None:
        await peer.hung_up()  # a TCP listener that never speaks TLS

    async with raw_server(serve) as server:
        http = h1.Client(f"https://127.0.0.1:{server.port}/mcp", server_id="t", connect_timeout=0.3)
        try:
            with anyio.fail_after(10), pytest.raises(h1.ConnectTimeout, match=r"within 0\.3s"):
                await post(http, f"https://127.0.0.1:{server.port}/mcp")
        finally:
            http.close()


def certificate() -> tuple[bytes, bytes]:
    """A self-signed certificate for localhost, and its key, in PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


async def test_https_sends_sni_checks_the_certificate_and_keeps_the_connection_alive(
    tmp_path: Path,
) -> None:
    cert, key = certificate()
    (cert_file, key_file) = (tmp_path / "cert.pem", tmp_path / "key.pem")
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(str(cert_file), str(key_file))
    names: list[str | None] = []
    server_side.sni_callback = lambda _socket, name, _context: names.append(name)
    accepted = 0

    async def serve(stream: anyio.abc.ByteStream) -> None:
        nonlocal accepted
        accepted += 1
        async with stream:
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead):
                reader = BufferedByteReceiveStream(stream)
                while True:
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    await reader.receive_exactly(length)
                    await stream.send(response(b"secure"))

    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    url = f"https://localhost:{port}/mcp"
    trusting = ssl.create_default_context(cadata=cert.decode())
    async with (
        TLSListener(tcp, server_side, standard_compatible=False) as listener,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(listener.serve, serve)
        http = h1.Client(url, server_id="t", connect_timeout=5, ssl_context=trusting)
        untrusting = h1.Client(url, server_id="t", connect_timeout=5)  # the default context
        try:
            with anyio.fail_after(10):
                assert await post(http, url) == (200, b"secure")
                assert await post(http, url) == (200, b"secure")
                with pytest.raises(ssl.SSLCertVerificationError):
                    await post(untrusting, url)
        finally:
            http.close()
            untrusting.close()
            tg.cancel_scope.cancel()
    assert names == ["localhost", "localhost"]
    assert accepted == 1  # kept alive; the handshake the client refused never reached the handler


async def test_a_closed_client_refuses_requests_and_its_connections_are_gone() -> None:
    async with raw_server(keep_alive) as server:
        http = client(server.url)
        with anyio.fail_after(10):
            await post(http, server.url)
            http.close()
            await server.closed.wait()
            with pytest.raises(h1.HttpError, match="closed"):
                await post(http, server.url)
    assert server.accepted == 1


async def test_an_address_that_never_answers_is_passed_over_for_the_next_one(
    monkeypatch: pytest.MonkeyPatch, anyio_backend: tuple[str, dict[str, bool]]
) -> None:
    """Happy eyeballs: the name resolves to a black hole first (a listener whose accept queue is
    full drops every SYN), then to the server; the server is reached long before the timeout."""
    if anyio_backend[1]:
        pytest.skip("uvloop's loop takes no patched resolver; the connect path is the same")
    hole = socket.create_server(("127.0.0.1", 0), backlog=0)
    fillers = []
    for _ in range(8):  # fill the accept queue: later SYNs are dropped, connects hang
        filler = socket.socket()
        filler.setblocking(False)
        with suppress(BlockingIOError):
            filler.connect(hole.getsockname())
        fillers.append(filler)
    async with raw_server(keep_alive) as server:
        loop = asyncio.get_running_loop()
        addresses = [hole.getsockname(), ("127.0.0.1", server.port)]

        async def resolve(host: str, port: int, **_: object) -> list[tuple[Any, ...]]:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", address) for address in addresses]

        monkeypatch.setattr(loop, "getaddrinfo", resolve)
        http = h1.Client(f"http://server.test:{server.port}/mcp", server_id="t", connect_timeout=5)
        try:
            with anyio.fail_after(10):
                started = anyio.current_time()
                assert (await post(http, f"http://server.test:{server.port}/mcp"))[0] == 200
                assert anyio.current_time() - started < 2
        finally:
            http.close()
            hole.close()
            for filler in fillers:
                filler.close()
