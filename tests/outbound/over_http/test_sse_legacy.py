"""The legacy HTTP+SSE transport against the SDK's SSE server and scripted peers on loopback."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import anyio
import anyio.abc
import orjson
import pytest

from proxy.core.errors import ServerUnavailable
from proxy.outbound.over_http.sse_legacy import LegacySseTransport
from proxy.protocol import jsonrpc
from proxy.protocol.stateless import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY
from tests.fixtures.spawn import (
    INIT,
    LIST_CHANGED,
    HttpRequest,
    ScriptedServer,
    call,
    collect,
    exercise,
    failure_of,
    free_port,
    handshake,
    http_response,
    running_http_fixture,
    scripted_http_server,
    text_of,
)

pytestmark = pytest.mark.anyio

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def sse_server(
    *events: bytes, stay_open: bool = True, post_status: int = 202
) -> AbstractAsyncContextManager[ScriptedServer]:
    """A scripted legacy server: GET streams ``events`` and stays open (or not); POSTs get ``post_status``."""

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        if request.method == "POST":
            await stream.send(http_response(post_status, reason="Whatever", content_type="text/plain"))
            return
        await stream.send(SSE_HEAD + b"".join(events))
        if stay_open:
            await anyio.sleep_forever()

    return scripted_http_server(handler)


@pytest.mark.slow
async def test_a_session_lists_every_page_and_answers_each_concurrent_call_with_its_own_result() -> None:
    async with (
        running_http_fixture("gamma", transport="sse") as url,
        LegacySseTransport("gamma", url).connect() as link,
    ):
        with anyio.fail_after(20):
            await exercise(link, "gamma")


@pytest.mark.slow
async def test_a_notification_from_the_server_arrives_on_the_event_stream() -> None:
    async with (
        running_http_fixture("gamma", transport="sse") as url,
        LegacySseTransport("gamma", url).connect() as link,
    ):
        with anyio.fail_after(20):
            await handshake(link)
            await link.send(call(7, "add_tool", {"name": "late_tool"}))
            answers, others = await collect(link, 1)
            assert others == [(LIST_CHANGED, None)]
            assert text_of(answers[7]) == "added late_tool"


async def test_a_refused_port_fails_connect_promptly() -> None:
    transport = LegacySseTransport("gamma", f"http://127.0.0.1:{free_port()}/sse")
    with anyio.fail_after(5), pytest.raises(ServerUnavailable, match=r"GET .* failed"):
        async with transport.connect():
            pass


async def test_an_endpoint_on_another_origin_is_refused() -> None:
    async with sse_server(b"event: endpoint\ndata: http://evil.example/messages?s=1\n\n") as server:
        transport = LegacySseTransport("gamma", server.url + "/sse")
        with anyio.fail_after(5), pytest.raises(ServerUnavailable, match="not on the origin"):
            async with transport.connect():
                pass


@pytest.mark.slow
async def test_no_endpoint_event_within_the_connect_timeout_fails_connect() -> None:
    async with sse_server(b": just a comment\n\n") as server:
        transport = LegacySseTransport("gamma", server.url + "/sse", connect_timeout=0.3)
        with anyio.fail_after(5), pytest.raises(ServerUnavailable, match="no endpoint event"):
            async with transport.connect():
                pass


async def test_messages_go_to_the_endpoint_resolved_against_the_sse_url() -> None:
    answer = orjson.dumps(jsonrpc.result_response(1, {"ok": True}))
    # The stream opens with a byte order mark, which the event-stream format allows.
    events = (
        b"\xef\xbb\xbfevent: endpoint\ndata: /messages/?session_id=abc\n\nevent: message\ndata: "
        + answer
        + b"\n\n"
    )
    async with (
        sse_server(events) as server,
        LegacySseTransport("gamma", server.url + "/sse", {"X-Api-Key": "k"}).connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(INIT)
            assert await link.receive() == (jsonrpc.result_response(1, {"ok": True}), None)
    get, post = server.requests
    assert (get.method, get.path, get.headers["accept"]) == ("GET", "/sse", "text/event-stream")
    assert (post.method, post.path) == ("POST", "/messages/?session_id=abc")
    assert jsonrpc.parse(post.body) == INIT
    assert get.headers["x-api-key"] == post.headers["x-api-key"] == "k"


async def test_a_post_the_server_rejects_fails_the_request_naming_the_status() -> None:
    async with (
        sse_server(b"event: endpoint\ndata: /messages/\n\n", post_status=500) as server,
        LegacySseTransport("gamma", server.url + "/sse").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(INIT)
            answer, _ = await link.receive()
    error = failure_of(answer, 1)
    assert (type(error), str(error)) == (
        ServerUnavailable,
        "server 'gamma' is unavailable: HTTP 500 Whatever",
    )


async def test_when_the_event_stream_ends_receive_and_send_raise_server_unavailable() -> None:
    async with (
        sse_server(b"event: endpoint\ndata: /messages/\n\n", stay_open=False) as server,
        LegacySseTransport("gamma", server.url + "/sse").connect() as link,
    ):
        with anyio.fail_after(5), pytest.raises(ServerUnavailable, match="SSE stream closed"):
            await link.receive()
        with pytest.raises(ServerUnavailable, match="SSE stream closed"):
            await link.send(INIT)


async def test_an_exception_in_the_caller_s_block_leaves_the_link_unchanged() -> None:
    async with sse_server(b"event: endpoint\ndata: /messages/\n\n") as server:
        with anyio.fail_after(5), pytest.raises(KeyError, match="mine"):
            async with LegacySseTransport("gamma", server.url + "/sse").connect():
                raise KeyError("mine")


async def test_a_2026_request_is_refused_at_once_without_a_post_and_headers_are_ignored() -> None:
    meta = {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}}
    discover = jsonrpc.request(9, "server/discover", {"_meta": meta})
    async with (
        sse_server(b"event: endpoint\ndata: /messages/\n\n") as server,
        LegacySseTransport("gamma", server.url + "/sse").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(discover, headers={"Mcp-Param-X": "1"})
            answer, related = await link.receive()
            await link.send(INIT, headers={"Mcp-Param-X": "1"})  # this transport has no use for them
    assert related is None
    assert "HTTP+SSE transport carries revision 2024-11-05 only" in failure_of(answer, 9).reason
    get, post = server.requests
    assert (get.method, post.method, jsonrpc.parse(post.body)) == ("GET", "POST", INIT)
    assert "mcp-param-x" not in post.headers


async def test_an_event_past_its_size_limit_ends_the_link_naming_the_limit() -> None:
    deep = b'{"jsonrpc":"2.0","id":3,"result":' + b"[" * 300 + b"]" * 300 + b"}"
    events = (
        b"event: endpoint\ndata: /messages/\n\n"
        + b"event: message\ndata: "
        + deep  # an answer too deep fails its request; the stream goes on
        + b"\n\nevent: message\ndata: "
        + b"x" * (16 * 1024 * 1024 + 1)
    )
    async with (
        sse_server(events) as server,
        LegacySseTransport("gamma", server.url + "/sse").connect() as link,
    ):
        with anyio.fail_after(10):
            failed, _ = await link.receive()
            assert "nested deeper than 64 levels (limits.max_depth)" in failure_of(failed, 3).reason
            with pytest.raises(
                ServerUnavailable,
                match=r"an SSE event exceeded 16777216 bytes \(limits.max_server_message_bytes\)",
            ):
                await link.receive()
