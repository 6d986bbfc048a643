"""End to end, issue #14: what a client can do with connections alone, before any request exists.

Raw TCP connections against a real ``manifold serve``: held idle up to and past
``limits.max_connections``, headers sent one byte at a time (slowloris), a body that stops,
headers past ``limits.max_header_bytes``, and a process whose open-files limit is lower than the
cap. Each refusal is an HTTP answer naming its limit and counted under it; none is a dropped
socket or a reset; and afterwards a new client is served.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from tests.interaction.harness import (
    RunningManifold,
    another_client_is_served,
    fixture_server,
    names_the_limit,
    refusals,
    rss_mib,
    running_manifold,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOOL = ("notes.echo", {"text": "after"})
SLACK = 2.0  # seconds a timeout may be late by on a loaded 2-core box
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


def config(**limits: Any) -> dict[str, Any]:
    return {"servers": {"notes": fixture_server("notes", tools=2)}, "limits": limits}


def port_of(manifold: RunningManifold) -> int:
    return int(manifold.url.rsplit(":", 1)[1].split("/")[0])


def request(method: str, path: str, body: bytes = b"", **headers: str) -> bytes:
    length = headers.pop("content_length", str(len(body)))
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if method == "POST":
        lines += ["Content-Type: application/json", "Accept: application/json, text/event-stream"]
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_to_end(stream: anyio.abc.SocketStream, within: float) -> bytes:
    """Everything the server sends until it closes; a reset fails the test (BrokenResourceError)."""
    chunks = []
    with anyio.fail_after(within):
        while True:
            try:
                chunks.append(await stream.receive())
            except anyio.EndOfStream:
                return b"".join(chunks)


async def read_response(stream: anyio.abc.SocketStream, within: float = 10) -> bytes:
    """One response with a Content-Length, on a connection that stays open."""
    data = b""
    with anyio.fail_after(within):
        while b"\r\n\r\n" not in data:
            data += await stream.receive()
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE)[1])  # type: ignore[index]
        while len(body) < length:
            body += await stream.receive()
    return head + b"\r\n\r\n" + body


def status_of(response: bytes) -> int:
    assert response, "closed without an answer"
    return int(response.split(b" ", 2)[1])


async def mcp_is_open_again(port: int) -> None:
    """Wait (bounded) until ``/mcp`` is no longer refused: the server sees closes a moment later."""
    with anyio.fail_after(10):
        while True:
            async with await anyio.connect_tcp("127.0.0.1", port) as probe:
                await probe.send(request("GET", "/mcp"))
                if status_of(await read_response(probe)) != 503:
                    return
            await anyio.sleep(0.05)  # closes travel through the kernel: there is no event to wait on


@pytest.fixture
async def manifold(tmp_path: Path) -> AsyncIterator[RunningManifold]:
    limits = {"max_connections": 40, "connection_reserve": 8, "header_timeout": 1, "body_timeout": 1}
    async with running_manifold(tmp_path, config(**limits, max_header_bytes=4096)) as running:
        yield running


async def test_idle_connections_fill_the_cap_then_mcp_gets_503_the_probes_answer_and_past_it_503_and_close(
    tmp_path: Path,
) -> None:
    # header_timeout long enough to hold the idle connections through the whole test.
    limits = {"max_connections": 40, "connection_reserve": 8, "header_timeout": 20}
    async with running_manifold(tmp_path, config(**limits)) as manifold, AsyncExitStack() as held:
        port = port_of(manifold)
        rss_before = rss_mib(manifold.process)
        idle = [await held.enter_async_context(await anyio.connect_tcp("127.0.0.1", port)) for _ in range(40)]

        # Past the cap: answered at once, without a request, then closed (not reset).
        async with await anyio.connect_tcp("127.0.0.1", port) as past:
            answer = await read_to_end(past, within=5)
        assert status_of(answer) == 503, answer
        assert b"retry-after: " in answer.lower()
        assert names_the_limit(answer.decode(), "limits.max_connections")

        # In the reserve (connections 33 to 40): /mcp is refused, the probes answer.
        await idle[32].send(request("POST", "/mcp", PING))
        answer = await read_to_end(idle[32], within=5)
        assert status_of(answer) == 503, answer
        assert b"retry-after: " in answer.lower()
        assert names_the_limit(answer.decode(), "limits.max_connections")
        for connection, path in zip(idle[33:36], ["/healthz", "/readyz", "/metrics"], strict=True):
            await connection.send(request("GET", path))
            answer = await read_response(connection)
            assert status_of(answer) == 200, (path, answer[:300])
        metrics = answer.decode()
        assert 'manifold_limit_refusals_total{limit="max_connections"} 2.0' in metrics

        # Within the cap, an idle connection held open is still served.
        await idle[0].send(request("POST", "/mcp", PING))
        assert status_of(await read_response(idle[0])) != 503

        await held.aclose()
        await mcp_is_open_again(port)
        await another_client_is_served(manifold, *TOOL)
        assert rss_mib(manifold.process) - rss_before < 50


async def test_a_connection_that_never_sends_is_closed_after_header_timeout(
    manifold: RunningManifold,
) -> None:
    started = time.monotonic()
    async with await anyio.connect_tcp("127.0.0.1", port_of(manifold)) as silent:
        assert await read_to_end(silent, within=1 + SLACK) == b""
    assert time.monotonic() - started >= 0.9
    assert await refusals(manifold, "header_timeout") == 1
    await another_client_is_served(manifold, *TOOL)


async def test_headers_sent_a_byte_at_a_time_get_408_within_header_timeout(manifold: RunningManifold) -> None:
    rss_before = rss_mib(manifold.process)
    started = time.monotonic()
    async with await anyio.connect_tcp("127.0.0.1", port_of(manifold)) as slow:

        async def trickle() -> None:
            for byte in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
                try:
                    await slow.send(bytes([byte]))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                await anyio.sleep(0.1)  # the attack itself: ten bytes a second

        async with anyio.create_task_group() as tg:
            tg.start_soon(trickle)
            answer = await read_to_end(slow, within=1 + SLACK)
            tg.cancel_scope.cancel()
    assert time.monotonic() - started < 1 + SLACK
    assert status_of(answer) == 408, answer
    assert names_the_limit(answer.decode(), "limits.header_timeout")
    assert await refusals(manifold, "header_timeout") == 1
    await another_client_is_served(manifold, *TOOL)
    assert rss_mib(manifold.process) - rss_before < 50


async def test_a_body_that_stops_gets_408_within_body_timeout(manifold: RunningManifold) -> None:
    async with await anyio.connect_tcp("127.0.0.1", port_of(manifold)) as stalled:
        await stalled.send(request("POST", "/mcp", PING[:10], content_length=str(len(PING))))
        started = time.monotonic()
        answer = await read_to_end(stalled, within=1 + SLACK)
    assert time.monotonic() - started < 1 + SLACK
    assert status_of(answer) == 408, answer
    assert names_the_limit(answer.decode(), "limits.body_timeout")
    assert await refusals(manifold, "body_timeout") == 1
    await another_client_is_served(manifold, *TOOL)


async def test_headers_past_max_header_bytes_get_431(manifold: RunningManifold) -> None:
    # Complete headers past the limit, and headers that never end: both refused.
    oversized = request("POST", "/mcp", PING, x_big="a" * 5000)
    endless = b"GET /healthz HTTP/1.1\r\n" + b"X-More: aaaaaaaaaaaaaaaa\r\n" * 400
    for attack in (oversized, endless):
        async with await anyio.connect_tcp("127.0.0.1", port_of(manifold)) as big:
            await big.send(attack)
            answer = await read_to_end(big, within=5)
        assert status_of(answer) == 431, answer
        assert names_the_limit(answer.decode(), "limits.max_header_bytes")
    assert await refusals(manifold, "max_header_bytes") == 2

    # A body far larger than the header limit, sent with the headers in one write, is no header.
    async with await anyio.connect_tcp("127.0.0.1", port_of(manifold)) as large_body:
        padded = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_pad":"' + b"a" * 100_000 + b'"}}'
        await large_body.send(request("POST", "/mcp", padded))
        assert status_of(await read_response(large_body)) != 431
    await another_client_is_served(manifold, *TOOL)


async def test_a_low_open_files_limit_lowers_the_cap_so_extra_clients_get_503_not_a_dropped_socket(
    tmp_path: Path,
) -> None:
    # 256 descriptors: the cap becomes 256 - 64 - 8 (one server) = 184, well below the default 2000.
    async with (
        running_manifold(tmp_path, config(header_timeout=30), open_files=256) as manifold,
        AsyncExitStack() as held,
    ):
        assert "limits.max_connections lowered from 2000 to 184" in manifold.log()
        port = port_of(manifold)
        for _ in range(184):
            await held.enter_async_context(await anyio.connect_tcp("127.0.0.1", port))
        for _ in range(100):  # far past what the descriptor table holds, one after another
            async with await anyio.connect_tcp("127.0.0.1", port) as extra:
                answer = await read_to_end(extra, within=5)
            assert status_of(answer) == 503, answer
        # A flood that never reads its refusals: past a few being drained, they are shed at once,
        # so they never take the last descriptors and the next client still gets its 503.
        for _ in range(60):
            await held.enter_async_context(await anyio.connect_tcp("127.0.0.1", port))
        async with await anyio.connect_tcp("127.0.0.1", port) as extra:
            answer = await read_to_end(extra, within=5)
        assert status_of(answer) == 503, answer
        await held.aclose()
        await mcp_is_open_again(port)
        await another_client_is_served(manifold, *TOOL)
