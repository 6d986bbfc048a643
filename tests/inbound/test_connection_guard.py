"""The guarded uvicorn protocol, in process, over real loopback sockets: what it refuses, and
what it must not (keep-alive, pipelining, long answers, large bodies)."""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pytest
import uvicorn

from proxy.config.model import LimitsConfig
from proxy.inbound.connection_guard import ConnectionGuard
from proxy.inbound.server import bind
from proxy.observe.boundary import Boundary
from proxy.observe.metrics import Where

pytestmark = pytest.mark.anyio

TIMEOUT = 0.5  # header_timeout and body_timeout
HELD = 0.3  # seconds /late waits between its response's head and body
SLACK = 1.5  # seconds a timer may be late by on a loaded 2-core box


@dataclass
class Counts:
    refused: Counter[str] = field(default_factory=Counter)

    def internal_error(self, where: Where) -> None:
        raise AssertionError(f"internal error at {where}")

    def limit_refused(self, limit: str) -> None:
        self.refused[limit] += 1


@dataclass
class Served:
    port: int
    counts: Counts
    disconnected: list[str]


async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """/echo answers the body's length once it is all read; /slow streams for 3 * TIMEOUT."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope["state"]["seen"].append(scope["path"])
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/slow":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(6):
            await anyio.sleep(TIMEOUT / 2)  # the slow answer under test
            await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    answer = str(len(body)).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]}
    )
    if scope["path"] == "/late":
        await anyio.sleep(HELD)  # between the head and the body: the head waits for it
    if scope["path"] == "/broken":
        raise RuntimeError("the app fails between the head and the body")
    await send({"type": "http.response.body", "body": answer})


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    limits = LimitsConfig(
        max_connections=16,
        connection_reserve=4,
        header_timeout=TIMEOUT,
        body_timeout=TIMEOUT,
        max_header_bytes=4096,
    )
    counts = Counts()
    guard = ConnectionGuard(limits, Boundary(counts), frozenset({"/healthz"}), servers=0)
    disconnected: list[str] = []

    async def with_state(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        scope["state"] = {"seen": disconnected}
        await app(scope, receive, send)

    config = uvicorn.Config(with_state, http=guard.protocol(), ws="none", lifespan="off", log_config=None)
    server = _Server(config)
    sock = bind("127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        # The socket listens already: connections wait in its backlog until uvicorn accepts them.
        tg.start_soon(server.serve, [sock])
        yield Served(sock.getsockname()[1], counts, disconnected)
        server.should_exit = True


def request(
    path: str, body: bytes = b"", length: int | None = None, pad: int = 0, method: str = "POST"
) -> bytes:
    head = [
        f"{method} {path} HTTP/1.1",
        "Host: x",
        f"Content-Length: {len(body) if length is None else length}",
    ]
    if pad:
        head.append(f"X-Pad: {'a' * pad}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def connect(served: Served) -> anyio.abc.SocketStream:
    return await anyio.connect_tcp("127.0.0.1", served.port)


async def read_until(stream: anyio.abc.SocketStream, pattern: bytes, within: float = 5) -> bytes:
    data = b""
    with anyio.fail_after(within):
        while not re.search(pattern, data, re.DOTALL):
            data += await stream.receive()
    return data


async def read_to_end(stream: anyio.abc.SocketStream, within: float = 5) -> bytes:
    chunks = []
    with anyio.fail_after(within):
        while True:
            try:
                chunks.append(await stream.receive())
            except anyio.EndOfStream:
                return b"".join(chunks)


ANSWER = rb"\r\n\r\n\d+$"


async def test_a_keep_alive_connection_serves_request_after_request(served: Served) -> None:
    async with await connect(served) as stream:
        for size in (0, 10, 100):
            await stream.send(request("/echo", b"x" * size))
            assert (await read_until(stream, ANSWER)).endswith(str(size).encode())
    assert not served.counts.refused


async def test_a_response_of_declared_length_leaves_in_one_write_with_its_body(served: Served) -> None:
    """The head waits for the body (one send(2), one segment): nothing arrives before the body."""
    async with await connect(served) as stream:
        await stream.send(request("/late", b"abc"))
        started = time.monotonic()
        first = await read_until(stream, rb".")
        waited = time.monotonic() - started
        answer = first + (b"" if re.search(ANSWER, first) else await read_until(stream, ANSWER))
    assert waited >= HELD * 0.9, f"{first!r} arrived before the body"
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"\r\n\r\n3")


@pytest.mark.slow
async def test_a_streamed_response_sends_its_head_at_once(served: Served) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/slow"))
        started = time.monotonic()
        head = await read_until(stream, rb"\r\n\r\n", within=TIMEOUT / 2 + SLACK)
        waited = time.monotonic() - started
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head
    assert waited < TIMEOUT / 2, "the head of a streamed answer waited for its first chunk"


async def test_a_head_request_gets_its_head_and_the_connection_serves_the_next(served: Served) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/echo", method="HEAD"))
        head = await read_until(stream, rb"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"content-length: 1" in head
        await stream.send(request("/echo", b"xy"))
        assert (await read_until(stream, ANSWER)).endswith(b"2")


async def test_an_app_failing_after_the_head_gets_the_head_then_a_close(served: Served) -> None:
    """As without the holding: what was sent is written, then the half response is cut off."""
    async with await connect(served) as stream:
        await stream.send(request("/broken"))
        answer = await read_to_end(stream)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"content-length: 1\r\n\r\n")


async def test_pipelined_requests_are_all_answered(served: Served) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/echo", b"ab") + request("/echo", b"abc") + request("/echo", b""))
        answers = await read_until(stream, rb"(HTTP/1.1 200.*){3}\r\n\r\n0$")
    assert re.findall(rb"\r\n\r\n(\d)", answers) == [b"2", b"3", b"0"]


@pytest.mark.slow
async def test_an_answer_longer_than_both_timeouts_is_not_cut(served: Served) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/slow"))
        answer = await read_until(stream, rb"0\r\n\r\n$", within=3 * TIMEOUT + SLACK)
    assert answer.count(b"tick") == 6
    assert not served.counts.refused


async def test_a_body_larger_than_the_header_limit_sent_with_its_headers_is_served(served: Served) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/echo", b"x" * 200_000))
        assert (await read_until(stream, ANSWER)).endswith(b"200000")


async def test_headers_just_under_the_limit_pass_and_just_over_get_431(served: Served) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/echo", pad=3900))
        assert (await read_until(stream, ANSWER)).startswith(b"HTTP/1.1 200")
    async with await connect(served) as stream:
        await stream.send(request("/echo", pad=4100))
        assert (await read_to_end(stream)).startswith(b"HTTP/1.1 431")
    assert served.counts.refused == {"max_header_bytes": 1}


@pytest.mark.slow
async def test_the_next_request_on_a_kept_alive_connection_gets_header_timeout_from_the_last_answer(
    served: Served,
) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/echo"))
        await read_until(stream, ANSWER)
        answered = time.monotonic()
        await stream.send(b"POST /echo HTTP/1.1\r\n")  # and no more
        refusal = await read_to_end(stream, within=TIMEOUT + SLACK)
    assert refusal.startswith(b"HTTP/1.1 408")
    assert b"limits.header_timeout" in refusal
    assert time.monotonic() - answered < TIMEOUT + SLACK
    assert served.counts.refused == {"header_timeout": 1}


@pytest.mark.slow
async def test_a_body_that_keeps_trickling_past_body_timeout_gets_408_and_the_app_sees_a_disconnect(
    served: Served,
) -> None:
    async with await connect(served) as stream:
        await stream.send(request("/echo", length=1000))
        started = time.monotonic()

        async def trickle() -> None:
            for _ in range(100):
                try:
                    await stream.send(b"x")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                await anyio.sleep(TIMEOUT / 10)  # the attack itself: a byte at a time

        async with anyio.create_task_group() as tg:
            tg.start_soon(trickle)
            refusal = await read_to_end(stream, within=TIMEOUT + SLACK)
            tg.cancel_scope.cancel()
    assert refusal.startswith(b"HTTP/1.1 408")
    assert b"limits.body_timeout" in refusal
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert served.disconnected == ["/echo"]
    assert served.counts.refused == {"body_timeout": 1}
