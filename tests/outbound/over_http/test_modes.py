"""The Streamable HTTP transport and ``auto`` mode, against fixture servers and scripted peers on loopback."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anyio
import anyio.abc
import orjson
import pytest

from proxy.core.errors import MessageTooLarge, ServerProtocolError, ServerUnavailable, Unencodable
from proxy.outbound.over_http.modes import AutoHttpTransport, StreamableHttpTransport, http_transport
from proxy.outbound.over_http.sse_legacy import LegacySseTransport
from proxy.outbound.transport import Failed
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from proxy.protocol.stateless import PROTOCOL_VERSION_KEY
from tests.fixtures.spawn import (
    FIXED_TOOLS,
    INIT,
    LIST_CHANGED,
    VERSION,
    HttpRequest,
    answered,
    call,
    collect,
    exercise,
    failure_of,
    free_port,
    handshake,
    http_response,
    list_tools,
    running_http_fixture,
    scripted_http_server,
    text_of,
)

pytestmark = pytest.mark.anyio


@pytest.mark.slow
@pytest.mark.parametrize("json_response", [False, True], ids=["sse-answers", "json-answers"])
async def test_a_session_lists_every_page_and_answers_each_concurrent_call_with_its_own_result(
    json_response: bool,
) -> None:
    async with (
        running_http_fixture("alpha", transport="streamable-http", json_response=json_response) as url,
        StreamableHttpTransport("alpha", url).connect() as link,
    ):
        with anyio.fail_after(20):
            await exercise(link, "alpha")


@pytest.mark.slow
async def test_a_notification_the_server_sends_on_its_own_arrives_through_the_get_stream() -> None:
    async with (
        running_http_fixture("alpha", transport="streamable-http", json_response=True) as url,
        StreamableHttpTransport("alpha", url).connect() as link,
    ):
        with anyio.fail_after(20):
            await handshake(link)
            # The fixture holds its notification until our GET stream is open; the answer
            # comes on the POST, so both must arrive, in either order.
            await link.send(call(7, "add_tool", {"name": "late_tool"}))
            answers, others = await collect(link, 1)
            while not others:
                others.append(await link.receive())
            assert text_of(answers[7]) == "added late_tool"
            assert others == [(LIST_CHANGED, None)]  # not related to any request of ours
            assert "late_tool" in await list_tools(link)


@pytest.mark.slow
async def test_what_a_request_s_stream_carries_comes_with_that_request_s_id() -> None:
    async with (
        running_http_fixture("alpha", transport="streamable-http") as url,
        StreamableHttpTransport("alpha", url).connect() as link,
    ):
        with anyio.fail_after(20):
            await handshake(link)
            await link.send(call(7, "add_tool", {"name": "t", "scope": "request"}))
            notice, answer = await link.receive(), await link.receive()
    assert notice == (LIST_CHANGED, 7)
    assert (text_of(answer[0]), answer[1]) == ("added t", 7)


@pytest.mark.slow
async def test_an_sse_answer_cut_off_midway_is_resumed_with_last_event_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="proxy.outbound.over_http.modes")
    async with (
        running_http_fixture("alpha", transport="streamable-http", resumable=True) as url,
        StreamableHttpTransport("alpha", url).connect() as link,
    ):
        with anyio.fail_after(20):
            await handshake(link)
            await link.send(call(7, "drop_stream", {}))
            answers, _ = await collect(link, 1)
            assert text_of(answers[7]) == "answered after the stream was dropped"
    assert any("resuming the answer to 7" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
async def test_an_expired_session_is_replaced_transparently_and_the_caller_told_to_list_again() -> None:
    port = free_port()
    transport = StreamableHttpTransport("alpha", f"http://127.0.0.1:{port}/mcp")
    async with transport.connect() as link:
        async with running_http_fixture("alpha", transport="streamable-http", port=port):
            with anyio.fail_after(20):
                await handshake(link)
                await link.send(call(7, "echo", {"first": True}))
                await collect(link, 1)
        # A restarted server knows nothing of our session: it answers 404.
        async with running_http_fixture("alpha", transport="streamable-http", port=port):
            with anyio.fail_after(20):
                await link.send(call(8, "echo", {"second": True}))
                answers, others = await collect(link, 1)
                assert orjson.loads(text_of(answers[8]))["arguments"] == {"second": True}
                if not others:  # the GET stream may have renewed the session first
                    others.append(await link.receive())
                assert others == [(LIST_CHANGED, None)]
                assert len(await list_tools(link)) == 25 + len(FIXED_TOOLS)


async def test_a_server_that_answers_404_to_every_session_is_not_re_initialized_in_a_loop() -> None:
    sessions = iter(range(1, 100))

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        if request.method != "POST":
            await stream.send(http_response(405, reason="Method Not Allowed"))
            return
        message = jsonrpc.parse(request.body)
        if message.get("method") == "initialize":
            body = orjson.dumps(jsonrpc.result_response(message["id"], {"protocolVersion": VERSION}))
            headers = {"Mcp-Session-Id": f"s-{next(sessions)}"}
            await stream.send(http_response(200, body, content_type="application/json", headers=headers))
        elif "id" not in message:
            await stream.send(http_response(202, reason="Accepted"))
        else:
            await stream.send(http_response(404, b"gone", reason="Not Found", content_type="text/plain"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("search", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await handshake(link)
            await link.send(jsonrpc.request(2, "tools/list"))
            answers, others = await collect(link, 1)
            assert failure_of(answers[2], 2).reason == "HTTP 404 Not Found"
            assert others == [(LIST_CHANGED, None)]  # one renewal was worth a try
            await link.send(jsonrpc.request(3, "tools/list"))
            answers, others = await collect(link, 1)
            assert "starting a new one failed" in failure_of(answers[3], 3).reason
            assert others == []
    initializes = [r for r in server.requests if b'"initialize"' in r.body]
    assert [r.headers.get("mcp-session-id") for r in initializes] == [None, None]


async def test_a_refused_port_fails_the_request_at_once_naming_the_server() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    async with StreamableHttpTransport("search", url).connect() as link:
        with anyio.fail_after(5):
            await link.send(INIT)
            answer, related = await link.receive()
    assert related == 1
    error = failure_of(answer, 1)
    assert type(error) is ServerUnavailable
    assert str(error).startswith("server 'search' is unavailable: POST ")


async def one_answer(url: str, server_id: str = "search") -> Message | Failed:
    async with StreamableHttpTransport(server_id, url).connect() as link:
        with anyio.fail_after(5):
            await link.send(INIT)
            answer, related = await link.receive()
            assert related == 1
            return answer


async def test_http_500_fails_the_request_naming_the_status() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(
            http_response(500, b"oops", reason="Internal Server Error", content_type="text/plain")
        )

    async with scripted_http_server(handler) as server:
        answer = await one_answer(server.url + "/mcp")
    error = failure_of(answer, 1)
    assert (type(error), error.reason) == (ServerUnavailable, "HTTP 500 Internal Server Error")


async def test_a_4xx_with_a_json_rpc_error_body_is_passed_on_as_the_answer_to_the_request() -> None:
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Bad Request: no"}}
    )

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(400, body, reason="Bad Request", content_type="application/json"))

    async with scripted_http_server(handler) as server:
        answer = await one_answer(server.url + "/mcp")
    assert answer == jsonrpc.error_response(1, -32600, "Bad Request: no")


async def test_a_body_that_is_not_json_fails_the_request_as_the_server_s_fault() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(200, b"{nope", reason="OK", content_type="application/json"))

    async with scripted_http_server(handler) as server:
        answer = await one_answer(server.url + "/mcp")
    error = failure_of(answer, 1)
    assert type(error) is ServerProtocolError
    assert "no response" in error.reason
    assert "invalid JSON" in error.reason


async def test_a_malformed_sse_event_is_logged_and_dropped_and_the_rest_still_arrives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = orjson.dumps(jsonrpc.result_response(1, {"ok": True}))
    events = b"event: message\ndata: {broken\n\nevent: message\ndata: " + good + b"\n\n"

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(200, events, reason="OK", content_type="text/event-stream"))

    caplog.set_level(logging.WARNING, logger="proxy.outbound.over_http.modes")
    async with scripted_http_server(handler) as server:
        answer = await one_answer(server.url + "/mcp")
    assert answer == jsonrpc.result_response(1, {"ok": True})
    [record] = [r for r in caplog.records if r.name == "proxy.outbound.over_http.modes"]
    assert "malformed" in record.getMessage()
    assert getattr(record, "server_id", None) == "search"


async def test_headers_carry_the_session_and_version_and_the_session_is_deleted_on_exit() -> None:
    get_seen = anyio.Event()

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        if request.method == "GET":
            get_seen.set()
            await stream.send(http_response(405, reason="Method Not Allowed"))
            return
        if request.method == "DELETE":
            await stream.send(http_response(200, reason="OK"))
            return
        message = jsonrpc.parse(request.body)
        if "id" not in message:
            await stream.send(http_response(202, reason="Accepted"))
            return
        result: dict[str, Any] = (
            {"protocolVersion": VERSION} if message["method"] == "initialize" else {"tools": []}
        )
        body = orjson.dumps(jsonrpc.result_response(message["id"], result))
        headers = {"Mcp-Session-Id": "s-1"}
        await stream.send(
            http_response(200, body, reason="OK", content_type="application/json", headers=headers)
        )

    async with scripted_http_server(handler) as server:
        transport = StreamableHttpTransport("search", server.url + "/mcp", {"X-Api-Key": "k"})
        async with transport.connect() as link:
            with anyio.fail_after(5):
                await handshake(link)
                await link.send(jsonrpc.request(2, "tools/list"))
                await collect(link, 1)
                await get_seen.wait()
    init, initialized, *rest = server.requests
    assert (init.method, init.headers["accept"]) == ("POST", "application/json, text/event-stream")
    assert init.headers["content-type"] == "application/json"
    assert init.headers["x-api-key"] == "k"
    assert "mcp-session-id" not in init.headers
    assert "mcp-protocol-version" not in init.headers
    for later in [initialized, *rest]:
        assert later.headers["mcp-session-id"] == "s-1"
        assert later.headers["mcp-protocol-version"] == VERSION
        assert later.headers["x-api-key"] == "k"
    assert sorted(r.method for r in rest) == ["DELETE", "GET", "POST"]
    assert server.requests[-1].method == "DELETE"
    assert [r.headers["accept"] for r in rest if r.method == "GET"] == ["text/event-stream"]


@pytest.mark.parametrize("kind", [StreamableHttpTransport, AutoHttpTransport])
async def test_a_closed_link_refuses_to_send_and_to_receive(kind: type[StreamableHttpTransport]) -> None:
    async with kind("search", f"http://127.0.0.1:{free_port()}/mcp").connect() as link:
        pass
    with pytest.raises(ServerUnavailable):
        await link.send(INIT)
    discover = jsonrpc.request(2, "server/discover", {"_meta": {PROTOCOL_VERSION_KEY: "2026-07-28"}})
    with pytest.raises(ServerUnavailable):
        await link.send(discover)
    with pytest.raises(ServerUnavailable):
        await link.receive()


@pytest.mark.slow
async def test_closing_with_a_request_in_flight_is_prompt_and_ends_the_session() -> None:
    async with running_http_fixture("alpha", transport="streamable-http") as url:
        with anyio.fail_after(20):
            async with StreamableHttpTransport("alpha", url).connect() as link:
                await handshake(link)
                await link.send(call(7, "hang", {}))
                await link.send(call(8, "echo", {}))
                answers, _ = await collect(link, 1)
                assert 8 in answers
                session_id = link.session_id
            # The server forgot the session: using it again is a 404.
            async with aiohttp.ClientSession() as http:
                headers = {"Mcp-Session-Id": str(session_id), "Accept": "application/json, text/event-stream"}
                async with http.post(url, data=jsonrpc.encode(call(9, "echo", {})), headers=headers) as reply:
                    assert reply.status == 404


@pytest.mark.parametrize("kind", [StreamableHttpTransport, AutoHttpTransport])
async def test_an_exception_in_the_caller_s_block_leaves_the_link_unchanged(
    kind: type[StreamableHttpTransport],
) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with kind("search", f"http://127.0.0.1:{free_port()}/mcp").connect():
            raise KeyError("mine")


@pytest.mark.slow
async def test_auto_chooses_streamable_http_when_the_server_speaks_it() -> None:
    async with running_http_fixture("alpha", transport="streamable-http") as url:
        transport = AutoHttpTransport("alpha", url)
        async with transport.connect() as link:
            with anyio.fail_after(20):
                await exercise(link, "alpha")
        assert transport.chosen == "streamable-http"


@pytest.mark.slow
async def test_auto_falls_back_to_legacy_sse_and_remembers_it_for_the_next_link() -> None:
    async with running_http_fixture("beta", transport="sse") as url:
        transport = AutoHttpTransport("beta", url)
        async with transport.connect() as link:
            with anyio.fail_after(20):
                await exercise(link, "beta")
        assert transport.chosen == "sse"
        async with transport.connect() as link:
            with anyio.fail_after(10):
                await handshake(link)
                await link.send(call(5, "add", {"a": 2, "b": 3}))
                answers, _ = await collect(link, 1)
                assert text_of(answers[5]) == "5"


async def test_auto_fails_the_request_with_the_streamable_error_when_the_fallback_fails_too() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(404, b"no", reason="Not Found", content_type="text/plain"))

    async with (
        scripted_http_server(handler) as server,
        AutoHttpTransport("search", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await link.send(INIT)
            answer, _ = await link.receive()
    assert failure_of(answer, 1).reason == "HTTP 404 Not Found"
    assert [r.method for r in server.requests] == ["POST", "GET"]


def test_the_transport_factory_builds_the_configured_kind() -> None:
    assert isinstance(http_transport("a", "http://x/mcp", None, "auto"), AutoHttpTransport)
    assert isinstance(http_transport("a", "http://x/mcp", None, "streamable-http"), StreamableHttpTransport)
    assert isinstance(http_transport("a", "http://x/sse", None, "sse"), LegacySseTransport)


@pytest.mark.parametrize("stateless", [False, True], ids=["session", "2026-07-28"])
async def test_a_message_that_cannot_be_encoded_is_refused_by_send_and_the_link_lives_on(
    stateless: bool,
) -> None:
    params: dict[str, Any] = {"name": "x", "arguments": {"n": 2**70}}  # past what JSON numbers carry here
    if stateless:
        params["_meta"] = {PROTOCOL_VERSION_KEY: "2026-07-28"}
    async with StreamableHttpTransport("search", f"http://127.0.0.1:{free_port()}/mcp").connect() as link:
        with anyio.fail_after(5):
            with pytest.raises(Unencodable):
                await link.send(jsonrpc.request(9, "tools/call", params))
            await link.send(INIT)
            answer, _ = await link.receive()
    assert failure_of(answer, 1).reason.startswith("POST ")  # nothing was ever sent for 9


DEEP_ANSWER = b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * 300 + b"]" * 300 + b"}"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", DEEP_ANSWER),
        ("text/event-stream", b"event: message\ndata: " + DEEP_ANSWER + b"\n\n"),
    ],
    ids=["json-body", "sse-event"],
)
async def test_an_answer_nested_too_deep_fails_its_request_naming_the_limit(
    content_type: str, body: bytes
) -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(200, body, reason="OK", content_type=content_type))

    async with scripted_http_server(handler) as server:
        answer = await one_answer(server.url + "/mcp")
    error = failure_of(answer, 1)
    assert type(error) is ServerProtocolError
    assert (
        str(error)
        == "server 'search' broke the protocol: its answer was a message nested deeper than 64 levels"
        " (limits.max_depth)"
    )


async def test_a_json_body_declared_past_the_size_limit_fails_its_request_unread() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20000000\r\n\r\n"
        await stream.send(head.encode() + b'{"jsonrpc":')

    async with scripted_http_server(handler) as server:
        answer = await one_answer(server.url + "/mcp")
    error = failure_of(answer, 1)
    assert type(error) is ServerProtocolError
    assert error.reason == "a JSON body exceeded 16777216 bytes (limits.max_server_message_bytes)"


async def _answer_with_limit(url: str, limit: int) -> Message | Failed:
    async with StreamableHttpTransport("search", url, max_message_bytes=limit).connect() as link:
        with anyio.fail_after(5):
            await link.send(INIT)
            answer, _ = await link.receive()
            return answer


async def test_a_compressed_body_that_inflates_past_the_limit_fails_its_request_naming_the_limit() -> None:
    # 1 MiB of JSON in ~1 KiB of gzip: the Content-Length says nothing of the decoded size.
    inflated = b'{"jsonrpc":"2.0","id":1,"result":{"pad":"' + b"x" * (1024 * 1024) + b'"}}'
    compressed = gzip.compress(inflated)

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        response = http_response(
            200,
            compressed,
            reason="OK",
            content_type="application/json",
            headers={"Content-Encoding": "gzip"},
        )
        await stream.send(response)

    async with scripted_http_server(handler) as server:
        answer = await _answer_with_limit(server.url + "/mcp", 64 * 1024)
    error = failure_of(answer, 1)
    assert type(error) is ServerProtocolError
    assert error.reason == "a JSON body exceeded 65536 bytes (limits.max_server_message_bytes)"
    assert isinstance(error.__cause__, MessageTooLarge)  # so that the refusal can be counted


async def test_a_body_of_unknown_length_past_the_configured_limit_fails_its_request() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        # No Content-Length: the body runs until the connection closes (and would not end).
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        await stream.send(head + b'{"jsonrpc":"2.0","id":1,"result":{"pad":"')
        for _ in range(1000):  # bounded: far past the limit, then give up
            await stream.send(b"x" * 65536)

    async with scripted_http_server(handler) as server:
        answer = await _answer_with_limit(server.url + "/mcp", 100_000)
    assert (
        failure_of(answer, 1).reason == "a JSON body exceeded 100000 bytes (limits.max_server_message_bytes)"
    )


async def test_an_sse_event_past_the_configured_limit_fails_its_request_naming_the_limit() -> None:
    event = b"event: message\ndata: " + b"x" * 200_000 + b"\n\n"

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(200, event, reason="OK", content_type="text/event-stream"))

    async with scripted_http_server(handler) as server:
        answer = await _answer_with_limit(server.url + "/mcp", 100_000)
    assert (
        failure_of(answer, 1).reason == "an SSE event exceeded 100000 bytes (limits.max_server_message_bytes)"
    )


def _session_server(
    refusal: bytes, status: int = 400
) -> tuple[Callable[[HttpRequest, anyio.abc.ByteStream], Awaitable[None]], list[str]]:
    """A server that forgets session ``s-1`` after its first call, refusing it with ``refusal``."""
    sessions, known, calls = iter(range(1, 100)), set[str](), []

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        if request.method != "POST":
            await stream.send(http_response(405, reason="Method Not Allowed"))
            return
        message = jsonrpc.parse(request.body)
        session = request.headers.get("mcp-session-id", "")
        if message.get("method") == "initialize":
            body = orjson.dumps(jsonrpc.result_response(message["id"], {"protocolVersion": VERSION}))
            known.add(new := f"s-{next(sessions)}")
            headers = {"Mcp-Session-Id": new}
            await stream.send(http_response(200, body, content_type="application/json", headers=headers))
        elif "id" not in message:
            await stream.send(http_response(202, reason="Accepted"))
        elif session not in known or (message["params"] or {}).get("name") == "bad":
            await stream.send(
                http_response(status, refusal, reason="Bad Request", content_type="application/json")
            )
        else:
            calls.append(session)
            known.discard("s-1")  # "restarted": the first session is forgotten after its first call
            body = orjson.dumps(jsonrpc.result_response(message["id"], {"session": session}))
            await stream.send(http_response(200, body, content_type="application/json"))

    return handler, calls


# What server-everything (the TypeScript SDK's example) answers once restarted, and a plain 400.
_GONE = "Bad Request: No valid session ID provided"
NO_SESSION = orjson.dumps({"jsonrpc": "2.0", "error": {"code": -32000, "message": _GONE}, "id": None})
BAD_PARAMS = orjson.dumps(
    {"jsonrpc": "2.0", "error": {"code": -32602, "message": "Bad Request: unknown tool"}, "id": None}
)


async def test_a_400_that_says_the_session_is_gone_starts_a_new_session_and_retries_the_call_once() -> None:
    handler, calls = _session_server(NO_SESSION)
    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("everything", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await handshake(link)
            await link.send(call(2, "echo", {}))
            await link.send(call(3, "echo", {}))
            answers, others = await collect(link, 2)
    assert {answered(answers[2])["result"]["session"], answered(answers[3])["result"]["session"]} <= {
        "s-1",
        "s-2",
    }
    assert calls.count("s-2") >= 1
    assert others == [(LIST_CHANGED, None)]
    initializes = [r for r in server.requests if b'"initialize"' in r.body]
    assert len(initializes) == 2


async def test_a_400_for_a_bad_request_fails_that_request_alone_and_keeps_the_session() -> None:
    handler, _ = _session_server(BAD_PARAMS)
    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("everything", server.url + "/mcp").connect() as link,
    ):
        with anyio.fail_after(5):
            await handshake(link)
            await link.send(call(2, "bad", {}))
            answers, others = await collect(link, 1)
    assert answers[2] == jsonrpc.error_response(2, -32602, "Bad Request: unknown tool")
    assert others == []
    assert len([r for r in server.requests if b'"initialize"' in r.body]) == 1
