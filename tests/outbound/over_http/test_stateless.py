"""Revision 2026-07-28 (stateless) on the HTTP transports, per message, beside the handshake era.

The servers are real: the official SDK's dual-era ``Server`` (the conformance fixture) served by
uvicorn in this process behind a recording ASGI wrapper, its handshake-only variant, the fixture's
legacy HTTP+SSE server as a process, and scripted peers for what an SDK server never does.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
import orjson
import pytest
import uvicorn

from proxy.core.errors import ServerProtocolError, ServerUnavailable
from proxy.outbound.over_http.modes import AutoHttpTransport, StreamableHttpTransport
from proxy.outbound.over_http.stateless import request_headers
from proxy.outbound.transport import Failed, Link
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.stateless import CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, PROTOCOL_VERSION_KEY
from tests.conformance_modern.fixture_server import build_server
from tests.conformance_modern.fixture_server import legacy_only as handshake_only
from tests.fixtures.spawn import (
    VERSION,
    HttpRequest,
    answered,
    collect,
    exercise,
    failure_of,
    handshake,
    http_response,
    running_http_fixture,
    scripted_http_server,
)

pytestmark = pytest.mark.anyio

STATELESS = "2026-07-28"
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def stateless(request_id: RequestId, method: str, params: dict[str, Any] | None = None) -> Message:
    """A request with the 2026-07-28 envelope, as ServerConnection sends it to a stateless server."""
    meta = {
        PROTOCOL_VERSION_KEY: STATELESS,
        CLIENT_CAPABILITIES_KEY: {},
        CLIENT_INFO_KEY: {"name": "test", "version": "0"},
    }
    return jsonrpc.request(request_id, method, {**(params or {}), "_meta": meta})


def cancel(request_id: RequestId) -> Message:
    return jsonrpc.notification("notifications/cancelled", {"requestId": request_id, "reason": "test"})


async def outcome_to(link: Link, request_id: RequestId) -> Message | Failed:
    """Receive until the response to ``request_id`` (or its failure); it must come on that
    request's own exchange."""
    while True:
        message, related = await link.receive()
        if isinstance(message, Failed):
            mine = message.request_id == request_id
        else:
            mine = "method" not in message and message.get("id") == request_id
        if mine:
            assert related == request_id
            return message


async def answer_to(link: Link, request_id: RequestId) -> Message:
    """The server's response to ``request_id`` (it must not fail)."""
    return answered(await outcome_to(link, request_id))


# ---------------------------------------------------------------------------- the SDK, in process


@dataclass
class Seen:
    """One HTTP request as the server got it, and whether it then saw the client hang up."""

    method: str
    headers: dict[str, str]  # names lower-cased
    body: bytearray = field(default_factory=bytearray)
    hung_up: anyio.Event = field(default_factory=anyio.Event)

    @property
    def message(self) -> Message:
        return jsonrpc.parse(bytes(self.body))


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # pytest owns the signals


@asynccontextmanager
async def sdk_server(era: Literal["dual", "handshake"]) -> AsyncIterator[tuple[str, list[Seen]]]:
    """The conformance fixture (official SDK) on loopback; yields its URL and every request it got."""
    app: Any = build_server().streamable_http_app()
    if era == "handshake":
        app = handshake_only(app)
    seen: list[Seen] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = Seen(scope["method"], {k.decode().lower(): v.decode() for k, v in scope["headers"]})
        seen.append(request)
        more = True
        while more:  # read the body here: a server that refuses a request may never read it
            event = await receive()
            request.body += event.get("body", b"")
            more = event["type"] == "http.request" and event.get("more_body", False)
        replayed = False

        async def watched() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(request.body), "more_body": False}
            event = await receive()
            if event["type"] == "http.disconnect":
                request.hung_up.set()
            return event

        await app(scope, watched, send)

    # Bound before uvicorn starts: a client that connects early waits in the backlog, no polling.
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        recording, lifespan="on", log_config=None, log_level=None, ws="none", timeout_graceful_shutdown=1
    )
    server = _Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        try:
            yield f"http://127.0.0.1:{port}/mcp", seen
        finally:
            server.should_exit = True
    sock.close()


def posted(seen: list[Seen]) -> list[str]:
    return [r.message["method"] for r in seen if r.method == "POST" and r.message.get("method")]


# ---------------------------------------------------------------------------- Streamable HTTP


async def test_a_modern_request_goes_out_stateless_with_its_body_mirrored_in_headers_and_the_caller_s() -> (
    None
):
    async with sdk_server("dual") as (url, seen):
        async with StreamableHttpTransport("conf", url, {"X-Api-Key": "k"}).connect() as link:
            with anyio.fail_after(20):
                await link.send(stateless(1, "server/discover"))
                discovered = await answer_to(link, 1)
                # The server validates Mcp-Param-Region against the tool's x-mcp-header: without
                # the caller's header it would refuse the call with -32020.
                arguments = {"region": "us-west1"}
                call = stateless(2, "tools/call", {"name": "test_custom_headers", "arguments": arguments})
                await link.send(call, headers={"Mcp-Param-Region": "us-west1"})
                called = await answer_to(link, 2)
        assert link.session_id is None
    assert STATELESS in discovered["result"]["supportedVersions"]
    assert called["result"]["content"][0]["text"] == "region=us-west1"
    # Stateless: POSTs only (no GET stream opened, no DELETE at close), no session id anywhere.
    assert [r.method for r in seen] == ["POST", "POST"]
    discover, tool = seen
    for request in seen:
        assert "mcp-session-id" not in request.headers
        assert request.headers["mcp-protocol-version"] == STATELESS
        assert request.headers["accept"] == "application/json, text/event-stream"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-api-key"] == "k"
    assert (discover.headers["mcp-method"], "mcp-name" in discover.headers) == ("server/discover", False)
    assert (tool.headers["mcp-method"], tool.headers["mcp-name"]) == ("tools/call", "test_custom_headers")
    assert tool.headers["mcp-param-region"] == "us-west1"


async def test_a_name_that_is_not_plain_ascii_travels_base64_in_mcp_name() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        body = orjson.dumps(jsonrpc.result_response(jsonrpc.parse(request.body)["id"], {"contents": []}))
        await stream.send(http_response(200, body, content_type="application/json"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(stateless(1, "resources/read", {"uri": "file:///tmp/ä b"}))
            await answer_to(link, 1)
    [request] = server.requests
    assert request.headers["mcp-name"] == "=?base64?ZmlsZTovLy90bXAvw6QgYg==?="
    assert request.headers["mcp-method"] == "resources/read"


async def test_a_legacy_only_server_refuses_the_modern_request_with_an_error_and_initialize_then_works() -> (
    None
):
    async with sdk_server("handshake") as (url, seen), StreamableHttpTransport("conf", url).connect() as link:
        with anyio.fail_after(20):
            await link.send(stateless(900, "server/discover"))
            refused = await answer_to(link, 900)
            # The link is alive: the handshake era, as before, on the same link.
            init = await handshake(link)
            await link.send(jsonrpc.request(2, "tools/list"))
            listed = await answer_to(link, 2)
            await link.send(cancel(2))  # a handshake request's cancel is still POSTed
            session_id = link.session_id
    assert refused["id"] == 900
    assert refused["error"] == {
        "code": -32600,
        "message": f"Bad Request: Unsupported protocol version: {STATELESS}",
    }
    assert init["result"]["protocolVersion"] == VERSION
    assert any(tool["name"] == "test_custom_headers" for tool in listed["result"]["tools"])
    assert session_id is not None
    assert posted(seen)[:4] == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert "notifications/cancelled" in posted(seen)
    assert [r.headers.get("mcp-session-id") for r in seen[:2]] == [None, None]
    assert all(r.headers.get("mcp-session-id") == session_id for r in seen[2:])


async def test_a_modern_request_never_uses_the_session_even_where_one_exists() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        if request.method != "POST":
            await stream.send(http_response(405, reason="Method Not Allowed"))
            return
        message = jsonrpc.parse(request.body)
        if "id" not in message:
            await stream.send(http_response(202, reason="Accepted"))
        elif message["method"] == "initialize":
            body = orjson.dumps(jsonrpc.result_response(message["id"], {"protocolVersion": VERSION}))
            headers = {"Mcp-Session-Id": "s-1"}
            await stream.send(http_response(200, body, content_type="application/json", headers=headers))
        else:  # what an expired session gets: for a handshake request it would start a new one
            await stream.send(http_response(404, b"gone", reason="Not Found", content_type="text/plain"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await handshake(link)
            await link.send(stateless(2, "tools/list"))
            answer = await outcome_to(link, 2)
    error = failure_of(answer, 2)
    assert (type(error), str(error)) == (
        ServerUnavailable,
        "server 's' is unavailable: HTTP 404 Not Found: gone",
    )
    [request] = [r for r in server.requests if b'"tools/list"' in r.body]
    assert "mcp-session-id" not in request.headers
    assert request.headers["mcp-protocol-version"] == STATELESS  # not the session's 2025-11-25
    assert "last-event-id" not in request.headers
    # No renewal: initialize was sent once.
    assert sum(b'"initialize"' in r.body for r in server.requests) == 1


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(
            400,
            b'{"jsonrpc":"2.0","error":{"code":-32022,"message":"Unsupported","data":{"supported":["x"]}}}',
            jsonrpc.error_response(7, -32022, "Unsupported", {"supported": ["x"]}),
            id="json-rpc-error-without-id",
        ),
        pytest.param(
            500,
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error"}}',
            jsonrpc.error_response(7, -32603, "Internal error"),
            id="json-rpc-error-in-a-5xx",
        ),
        # No JSON-RPC error in the body: nothing to pass on, so the request fails (no made-up answer).
        pytest.param(405, b"", "HTTP 405 Method Not Allowed", id="bare-405"),
        pytest.param(
            502, b"<html>bad gateway</html>", "HTTP 502 Bad Gateway: <html>bad gateway</html>", id="html-502"
        ),
    ],
)
async def test_an_http_error_answers_or_fails_the_modern_request_and_leaves_the_link_working(
    status: int, body: bytes, expected: Message | str
) -> None:
    reasons = {
        400: "Bad Request",
        405: "Method Not Allowed",
        500: "Internal Server Error",
        502: "Bad Gateway",
    }

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        message = jsonrpc.parse(request.body)
        if message["id"] == 7:
            await stream.send(http_response(status, body, reason=reasons[status], content_type="text/plain"))
        else:
            ok = orjson.dumps(jsonrpc.result_response(message["id"], {"tools": []}))
            await stream.send(http_response(200, ok, content_type="application/json"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(stateless(7, "server/discover"))
            outcome = await outcome_to(link, 7)
            if isinstance(expected, str):
                assert failure_of(outcome, 7).reason == expected
            else:
                assert outcome == expected
            await link.send(stateless(8, "tools/list"))
            assert await answer_to(link, 8) == jsonrpc.result_response(8, {"tools": []})


async def test_a_202_to_a_modern_request_fails_it_at_once_as_the_server_s_fault() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(202, reason="Accepted"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(stateless(1, "tools/list"))
            answer = await outcome_to(link, 1)
    error = failure_of(answer, 1)
    assert type(error) is ServerProtocolError
    assert "HTTP 202" in error.reason
    assert [r.method for r in server.requests] == ["POST"]  # and no GET stream to wait on


async def test_cancelling_a_modern_request_closes_its_post_instead_of_sending_the_notification() -> None:
    hung_up = anyio.Event()
    progress = jsonrpc.notification("notifications/progress", {"progressToken": 1, "progress": 1})

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        message = jsonrpc.parse(request.body)
        if message["id"] == 2:
            ok = orjson.dumps(jsonrpc.result_response(2, {"tools": []}))
            await stream.send(http_response(200, ok, content_type="application/json"))
            return
        await stream.send(SSE_HEAD + b"event: message\ndata: " + orjson.dumps(progress) + b"\n\n")
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            await stream.receive()  # nothing more is sent: this returns when the client hangs up
        hung_up.set()

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(stateless(1, "tools/call", {"name": "slow", "arguments": {}}))
            assert await link.receive() == (progress, 1)
            await link.send(cancel(1))
            await hung_up.wait()
            # Nothing is delivered for the cancelled request: the next message is 2's answer.
            await link.send(stateless(2, "tools/list"))
            assert await link.receive() == (jsonrpc.result_response(2, {"tools": []}), 2)
    assert [jsonrpc.parse(r.body)["method"] for r in server.requests] == ["tools/call", "tools/list"]


async def test_a_listen_stream_delivers_its_notifications_with_its_id_until_it_is_cancelled() -> None:
    async with sdk_server("dual") as (url, seen), StreamableHttpTransport("conf", url).connect() as link:
        with anyio.fail_after(20):
            await link.send(
                stateless(50, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
            )
            acknowledged, related = await link.receive()
            assert (answered(acknowledged)["method"], related) == (
                "notifications/subscriptions/acknowledged",
                50,
            )
            await link.send(
                stateless(51, "tools/call", {"name": "test_trigger_tool_change", "arguments": {}})
            )
            answers, others = await collect(link, 1)
            while not others:
                others.append(await link.receive())
            assert answered(answers[51])["result"]["content"][0]["text"] == "tools list changed"
            [(changed, related)] = others
            assert (answered(changed)["method"], related) == ("notifications/tools/list_changed", 50)
            await link.send(cancel(50))
            [listen] = [r for r in seen if r.message["method"] == "subscriptions/listen"]
            await listen.hung_up.wait()  # the server saw the cancel: the stream was closed
    assert posted(seen) == ["subscriptions/listen", "tools/call"]


async def test_a_late_cancel_for_a_modern_request_that_ended_is_not_sent() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        ok = orjson.dumps(jsonrpc.result_response(jsonrpc.parse(request.body)["id"], {"tools": []}))
        await stream.send(http_response(200, ok, content_type="application/json"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(stateless(1, "tools/list"))
            await answer_to(link, 1)
            await link.send(cancel(1))
            await link.send(stateless(2, "tools/list"))
            await answer_to(link, 2)
    assert len(server.requests) == 2


# ---------------------------------------------------------------------------- auto


def chosen(transport: AutoHttpTransport) -> str | None:
    return transport.chosen  # read through a call: it changes while the test holds a narrowed copy


async def test_auto_chooses_streamable_http_when_a_modern_request_is_answered() -> None:
    async with sdk_server("dual") as (url, seen):
        transport = AutoHttpTransport("conf", url)
        async with transport.connect() as link:
            with anyio.fail_after(20):
                await link.send(stateless(1, "server/discover"))
                await answer_to(link, 1)
                assert transport.chosen == "streamable-http"
                await link.send(stateless(2, "tools/list"))
                listed = await answer_to(link, 2)
    assert any(tool["name"] == "test_custom_headers" for tool in listed["result"]["tools"])
    assert [r.method for r in seen] == ["POST", "POST"]


@pytest.mark.parametrize(
    ("code", "chosen"),
    [(-32022, "streamable-http"), (-32020, "streamable-http"), (-32600, None), (-32601, None)],
)
async def test_auto_takes_only_a_2026_error_in_a_4xx_as_proof_of_streamable_http(
    code: int, chosen: str | None
) -> None:
    body = orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": "no"}})

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(400, body, reason="Bad Request", content_type="application/json"))

    async with scripted_http_server(handler) as server:
        transport = AutoHttpTransport("s", server.url + "/mcp")
        async with transport.connect() as link:
            with anyio.fail_after(5):
                await link.send(stateless(1, "server/discover"))
                assert await answer_to(link, 1) == jsonrpc.error_response(1, code, "no")
        assert transport.chosen == chosen
    assert [r.method for r in server.requests] == ["POST"]


async def test_auto_leaves_a_legacy_only_streamable_server_to_initialize_which_then_picks_it() -> None:
    async with sdk_server("handshake") as (url, _):
        transport = AutoHttpTransport("conf", url)
        async with transport.connect() as link:
            with anyio.fail_after(20):
                await link.send(stateless(900, "server/discover"))
                refused = await answer_to(link, 900)
                assert transport.chosen is None
                init = await handshake(link)
        assert chosen(transport) == "streamable-http"
    assert refused["error"]["code"] == -32600
    assert init["result"]["protocolVersion"] == VERSION


@pytest.mark.slow
async def test_auto_refuses_a_modern_request_to_a_legacy_sse_server_and_initialize_then_picks_sse() -> None:
    async with running_http_fixture("beta", transport="sse") as url:
        transport = AutoHttpTransport("beta", url)
        async with transport.connect() as link:
            with anyio.fail_after(20):
                await link.send(stateless(900, "server/discover"))
                refused = await outcome_to(link, 900)
                assert transport.chosen is None
                await exercise(link, "beta")
        assert chosen(transport) == "sse"
        # A later link goes straight to HTTP+SSE, where a stateless request is refused without a POST.
        async with transport.connect() as link:
            with anyio.fail_after(20):
                await link.send(stateless(901, "server/discover"))
                again, related = await link.receive()
                await handshake(link)
    assert failure_of(refused, 900).reason.startswith("HTTP 405")
    assert "2024-11-05 only" in failure_of(again, 901).reason
    assert related is None


async def test_auto_passes_headers_on_once_the_transport_is_chosen() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        ok = orjson.dumps(jsonrpc.result_response(jsonrpc.parse(request.body)["id"], {"tools": []}))
        await stream.send(http_response(200, ok, content_type="application/json"))

    async with (
        scripted_http_server(handler) as server,
        AutoHttpTransport("s", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(stateless(1, "tools/list"), headers={"Mcp-Param-A": "1"})
            await answer_to(link, 1)
            await link.send(stateless(2, "tools/list"), headers={"Mcp-Param-B": "2"})
            await answer_to(link, 2)
    assert [r.headers.get("mcp-param-a") for r in server.requests] == ["1", None]
    assert [r.headers.get("mcp-param-b") for r in server.requests] == [None, "2"]


def test_the_callers_headers_never_replace_the_mirrored_ones() -> None:
    message = stateless(1, "tools/call", {"name": "t"})
    headers = request_headers(message, {"mcp-method": "evil", "MCP-NAME": "evil", "Mcp-Param-X": "1"})
    assert {k.lower(): v for k, v in headers.items()} == {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": STATELESS,
        "mcp-method": "tools/call",
        "mcp-name": "t",
        "mcp-param-x": "1",
    }
    assert len(headers) == 6
