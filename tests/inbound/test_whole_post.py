"""Whole POSTs to ``/mcp`` served without uvicorn's per-request cycle, over real loopback sockets
into the real HTTP server in front of a real ``Gateway`` (its one server in memory).

What the fast path does (both eras, JSON and SSE answers, byte counts and the access-log line),
what it leaves to the ASGI path (chunked bodies, ``Expect: 100-continue``, bodies over the
limit), and the hostile cases: malformed JSON, pipelined requests, a client closing mid-body
and mid-request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import anyio
import anyio.abc
import orjson
import pytest

from proxy.app.gateway import Gateway
from proxy.inbound import whole_post
from proxy.inbound.server import bind, serve
from proxy.observe import logs
from proxy.protocol.headers import encode_header_value
from proxy.protocol.sse import SSEDecoder
from tests.inbound.memory_server import INITIALIZE, META, Server, V, request, running

pytestmark = pytest.mark.anyio

MAX_BODY = 64 * 1024  # limits.max_request_bytes in these tests (its least allowed value)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    def events(self) -> list[Any]:
        return [orjson.loads(event.data) for event in SSEDecoder().feed(self.body)]


class Connection:
    """One client connection: raw requests out, HTTP/1.1 responses read back one by one."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def _more(self) -> None:
        self.buffer += await self.stream.receive()

    async def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._more()
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    async def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            await self._more()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    async def reply(self) -> Reply:
        with anyio.fail_after(10):
            while b"\r\n\r\n" not in self.buffer:
                await self._more()
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            first, *lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
            status = int(first.split()[1])
            if "content-length" in headers:
                return Reply(status, headers, await self._take(int(headers["content-length"])))
            body = b""
            if headers.get("transfer-encoding") == "chunked":
                while size := int(await self._line(), 16):
                    body += await self._take(size + 2)
                    body = body[:-2]
                await self._line()
            return Reply(status, headers, body)


def post(
    body: Any, headers: dict[str, str] | None = None, *, chunked: bool = False, expect: bool = False
) -> bytes:
    """A POST /mcp with a JSON body (bytes as they are), as a client writes it."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    head = {
        "Host": "127.0.0.1",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **(headers or {}),
    }
    if chunked:
        head["Transfer-Encoding"] = "chunked"
        half = len(data) // 2
        parts = (data[:half], data[half:])
        data = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"
    else:
        head["Content-Length"] = str(len(data))
    if expect:
        head["Expect"] = "100-continue"
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"POST /mcp HTTP/1.1\r\n{lines}\r\n".encode() + data


def routed(method: str, name: str) -> dict[str, str]:
    """The headers of a 2026-07-28 request."""
    return {"MCP-Protocol-Version": V, "Mcp-Method": method, "Mcp-Name": encode_header_value(name)}


@dataclass
class Served:
    port: int
    gateway: Gateway
    server: Server
    whole: list[str]  # the path of every request the fast path served, in order

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Connection]:
        async with await anyio.connect_tcp("127.0.0.1", self.port) as stream:
            yield Connection(stream)

    def received_bytes(self) -> float:
        text = self.gateway.inbound.metrics.render()[0].decode()
        found = re.search(r'manifold_received_bytes_total\{transport="http"\} (\S+)', text)
        return float(found.group(1)) if found else 0.0


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each request the fast path starts."""
    started: list[str] = []
    start = whole_post.WholePost.start

    def recorded(self: whole_post.WholePost, tasks: set[Any]) -> None:
        started.append(self.scope["path"])
        start(self, tasks)

    monkeypatch.setattr(whole_post.WholePost, "start", recorded)
    return started


@pytest.fixture
async def served(whole: list[str], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    # Access-log lines through logging (caplog), not a writer an earlier test may have set up.
    monkeypatch.setattr(logs, "_writer", None)
    server = Server()
    async with running(server, limits={"max_request_bytes": MAX_BODY}) as gateway:
        with bind("127.0.0.1", 0) as sock:
            async with anyio.create_task_group() as tg:
                await tg.start(functools.partial(serve, gateway.inbound, sock))
                yield Served(sock.getsockname()[1], gateway, server, whole)
                tg.cancel_scope.cancel()


async def initialized(connection: Connection) -> dict[str, str]:
    """Open a handshake-era session on ``connection``: the headers its requests then carry."""
    await connection.send(post(INITIALIZE))
    opened = await connection.reply()
    headers = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    await connection.send(post({"jsonrpc": "2.0", "method": "notifications/initialized"}, headers))
    assert (await connection.reply()).status == 202
    return headers


async def test_a_session_is_opened_and_called_on_one_connection_by_the_fast_path_with_its_bytes_and_lines(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "manifold.access")
    before = served.received_bytes()
    params = {"name": "mem.echo", "arguments": {}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    async with served.connect() as connection:
        headers = await initialized(connection)
        await connection.send(post(call, headers))
        answer = await connection.reply()
    assert answer.status == 200
    assert answer.json()["result"]["content"][0]["text"] == '{"tool":"echo","arguments":{}}'
    assert served.whole == ["/mcp"] * 3
    sizes = len(orjson.dumps(INITIALIZE)) + len(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert served.received_bytes() - before == sizes + len(orjson.dumps(call))
    lines = [r.getMessage() for r in caplog.records if r.name == "manifold.access"]
    assert [line.split()[2] for line in lines] == ["200", "202", "200"]
    assert f" {len(answer.body)}B " in lines[-1]


async def test_a_2026_call_is_answered_as_json_and_one_with_progress_as_a_stream(served: Served) -> None:
    echo = request("tools/call", name="mem.echo", arguments={"a": 1})
    progress = request("tools/call", 2, meta={**META, "progressToken": "p"}, name="mem.progress")
    async with served.connect() as connection:
        await connection.send(post(echo, routed("tools/call", "mem.echo")))
        answered = await connection.reply()
        await connection.send(post(progress, routed("tools/call", "mem.progress")))
        streamed = await connection.reply()
    assert (answered.status, answered.json()["id"]) == (200, 1)
    assert answered.json()["result"]["resultType"] == "complete"
    assert (streamed.status, streamed.headers["content-type"]) == (200, "text/event-stream")
    note, final = streamed.events()
    assert (note["method"], final["id"]) == ("notifications/progress", 2)
    assert served.whole == ["/mcp", "/mcp"]


async def test_malformed_json_is_a_parse_error_and_the_connection_serves_the_next_request(
    served: Served,
) -> None:
    async with served.connect() as connection:
        await connection.send(post(b'{"jsonrpc": "2.0", "id": 1, "method": '))
        refused = await connection.reply()
        await connection.send(post(request("tools/call", name="mem.echo"), routed("tools/call", "mem.echo")))
        answered = await connection.reply()
    assert (refused.status, refused.json()["error"]["code"]) == (400, -32700)
    assert answered.json()["result"]["resultType"] == "complete"
    assert served.whole == ["/mcp", "/mcp"]


async def test_a_body_over_the_limit_is_413_by_the_asgi_path_and_one_at_the_limit_is_served(
    served: Served,
) -> None:
    call = request("tools/call", name="mem.echo", arguments={"pad": ""})
    empty = len(orjson.dumps(call))
    async with served.connect() as connection:
        call["params"]["arguments"]["pad"] = "x" * (MAX_BODY - empty + 1)
        await connection.send(post(call, routed("tools/call", "mem.echo")))
        refused = await connection.reply()
    async with served.connect() as connection:
        call["params"]["arguments"]["pad"] = "x" * (MAX_BODY - empty)
        await connection.send(post(call, routed("tools/call", "mem.echo")))
        at_limit = await connection.reply()
    assert refused.status == 413
    assert at_limit.status == 200  # (the argument limit answers inside: a JSON-RPC error or a result)
    assert served.whole == ["/mcp"]


async def test_pipelined_requests_on_one_connection_are_answered_in_their_order(served: Served) -> None:
    calls = [request("tools/call", n, name="mem.echo", arguments={"n": n}) for n in range(1, 5)]
    async with served.connect() as connection:
        await connection.send(b"".join(post(call, routed("tools/call", "mem.echo")) for call in calls))
        answers = [await connection.reply() for _ in calls]
    assert [answer.json()["id"] for answer in answers] == [1, 2, 3, 4]
    texts = [answer.json()["result"]["content"][0]["text"] for answer in answers]
    assert texts == [f'{{"tool":"echo","arguments":{{"n":{n}}}}}' for n in range(1, 5)]
    assert served.whole[0] == "/mcp"  # the first at least; those behind it may be queued by uvicorn


async def test_a_client_closing_mid_body_reaches_no_server_and_the_next_connection_is_served(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "manifold.access")
    data = post(request("tools/call", name="mem.echo"), routed("tools/call", "mem.echo"))
    async with served.connect() as connection:
        await connection.send(data[:-5])
    async with served.connect() as connection:
        await connection.send(data)
        assert (await connection.reply()).status == 200
    assert len(served.server.calls()) == 1
    assert served.whole == ["/mcp"]
    statuses = [r.getMessage().split()[2] for r in caplog.records if r.name == "manifold.access"]
    assert statuses == ["0", "200"]  # the abandoned request has its line, as on the ASGI path


async def test_a_client_closing_while_a_2026_call_runs_cancels_it_at_the_server(served: Served) -> None:
    async with served.connect() as connection:
        await connection.send(post(request("tools/call", name="mem.slow"), routed("tools/call", "mem.slow")))
        with anyio.fail_after(5):
            await served.server.started.wait()
    with anyio.fail_after(5):
        await served.server.cancelled.wait()
    cancel = next(m for m in served.server.received if m.get("method") == "notifications/cancelled")
    assert cancel["params"]["requestId"] == served.server.calls()[-1]["id"]
    assert served.whole == ["/mcp"]


async def test_a_chunked_post_is_served_by_the_asgi_path(served: Served) -> None:
    async with served.connect() as connection:
        call = request("tools/call", name="mem.echo", arguments={"c": 1})
        await connection.send(post(call, routed("tools/call", "mem.echo"), chunked=True))
        answered = await connection.reply()
        await connection.send(post(call, routed("tools/call", "mem.echo")))
        after = await connection.reply()
    assert answered.json()["result"]["content"][0]["text"] == '{"tool":"echo","arguments":{"c":1}}'
    assert after.status == 200
    assert served.whole == ["/mcp"]  # the second only


async def test_expect_100_continue_gets_its_interim_answer_from_the_asgi_path(served: Served) -> None:
    data = post(request("tools/call", name="mem.echo"), routed("tools/call", "mem.echo"), expect=True)
    head, body = data.split(b"\r\n\r\n", 1)
    async with served.connect() as connection:
        await connection.send(head + b"\r\n\r\n")
        interim = await connection.reply()
        await connection.send(body)
        answered = await connection.reply()
    assert (interim.status, answered.status) == (100, 200)
    assert answered.json()["result"]["resultType"] == "complete"
    assert served.whole == []


class _Transport:
    """What a whole POST writes, and whether it closed its connection."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: Any) -> None:
        self.written += b"".join(parts)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class _Routes:
    def __init__(self) -> None:
        self.accounted: list[int] = []

    def account(self, scope: Any, status: int, received: int, sent: int, started: float) -> None:
        self.accounted.append(status)


def _whole_post(app: Any) -> tuple[whole_post.WholePost, _Transport, _Routes]:
    from uvicorn.config import Config
    from uvicorn.protocols.http.flow_control import FlowControl

    transport, routes = _Transport(), _Routes()
    posts = whole_post.Posts(routes, Config(app=app, proxy_headers=False, log_config=None), MAX_BODY)  # type: ignore[arg-type]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    fake = cast(asyncio.Transport, transport)
    cycle = whole_post.WholePost(posts, app, scope, fake, FlowControl(fake), [], True, lambda: None)
    cycle.chunks = [b"{}"]
    return cycle, transport, routes


async def test_an_app_failing_before_its_answer_gets_a_500_and_the_connection_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing(scope: Any, receive: Any, send: Any) -> None:
        raise ValueError("a bug")

    cycle, transport, routes = _whole_post(failing)
    tasks: set[Any] = set()
    with caplog.at_level(logging.ERROR, "uvicorn.error"):
        cycle.start(tasks)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            while tasks:  # noqa: ASYNC110 (the task is the protocol's: no event to wait on)
                await anyio.sleep(0.01)
    assert transport.written.startswith(b"HTTP/1.1 500 ")
    assert transport.closed
    assert routes.accounted == [0]
    assert "Exception in ASGI application" in caplog.text


async def test_an_app_failing_between_head_and_body_closes_the_connection_mid_answer() -> None:
    async def half(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
        raise ValueError("a bug")

    cycle, transport, routes = _whole_post(half)
    tasks: set[Any] = set()
    cycle.start(tasks)
    with anyio.fail_after(5):
        while tasks:  # noqa: ASYNC110
            await anyio.sleep(0.01)
    assert transport.closed  # a client is never left waiting for ten bytes that never come
    assert routes.accounted == [200]


async def test_a_whole_post_cancelled_at_shutdown_ends_cancelled() -> None:
    started = anyio.Event()

    async def hanging(scope: Any, receive: Any, send: Any) -> None:
        started.set()
        await anyio.sleep_forever()

    cycle, _, _ = _whole_post(hanging)
    tasks: set[Any] = set()
    cycle.start(tasks)
    await started.wait()
    (task,) = tasks
    task.cancel()
    with anyio.fail_after(5):
        while not task.done():  # noqa: ASYNC110
            await anyio.sleep(0.01)
    assert task.cancelled() or task.exception() is None
