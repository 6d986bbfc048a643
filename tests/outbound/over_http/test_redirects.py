"""Redirects from a server, as an attack: a server (or whoever answers in its name) redirects
Manifold's requests elsewhere to collect the configured secret headers. Real loopback servers;
the "other origin" is another port, which records everything it receives."""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager

import anyio
import anyio.abc
import orjson
import pytest
import yarl

from proxy.core.errors import ServerUnavailable
from proxy.outbound.over_http.redirects import refusal, same_origin
from proxy.outbound.over_http.sse_legacy import LegacySseTransport
from proxy.outbound.over_http.streamable import StreamableHttpTransport
from proxy.outbound.transport import Link
from proxy.protocol import jsonrpc
from tests.fixtures.spawn import (
    INIT,
    HttpRequest,
    ScriptedServer,
    answered,
    failure_of,
    http_response,
    scripted_http_server,
)

pytestmark = pytest.mark.anyio

SECRET = "sk-live-0123456789abcdef"
HEADERS = {"X-API-Key": SECRET, "Authorization": f"Bearer {SECRET}"}
SOURCE = yarl.URL("https://mcp.example.com/mcp")


# ---- the decision ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "status", "location"),
    [
        ("POST", 307, "/v2/mcp"),
        ("POST", 308, "https://mcp.example.com/v2/mcp"),
        ("GET", 302, "/v2/sse"),
        ("GET", 301, "https://mcp.example.com:443/v2"),  # the default port is the same origin
        ("DELETE", 307, "/v2/mcp"),
        ("POST", 200, "https://elsewhere.example/"),  # not a redirect: nothing to decide
    ],
)
def test_a_redirect_within_the_configured_origin_that_keeps_the_message_is_followed(
    method: str, status: int, location: str
) -> None:
    assert refusal(method, status, SOURCE, location) is None


@pytest.mark.parametrize(
    ("method", "status", "location", "why"),
    [
        ("POST", 307, "https://collector.example/mcp", "another origin"),
        ("POST", 308, "https://mcp.example.com:8443/mcp", "another origin"),
        ("GET", 302, "//collector.example/sse", "another origin"),
        ("POST", 307, "http://mcp.example.com/mcp", "downgrade to plain http"),
        ("GET", 301, "http://mcp.example.com/sse", "downgrade to plain http"),
        ("POST", 302, "/v2/mcp", "only 307 and 308 keep it"),
        ("POST", 303, "/v2/mcp", "only 307 and 308 keep it"),
        ("DELETE", 301, "/v2/mcp", "only 307 and 308 keep it"),
        ("POST", 307, "https://someone:pw@mcp.example.com/mcp", "carrying credentials"),
        ("GET", 302, "file:///etc/passwd", "not an http(s) URL"),
        ("GET", 302, "http://[::1", "unreadable Location"),
    ],
)
def test_a_redirect_elsewhere_down_to_http_or_dropping_the_body_is_refused_saying_why(
    method: str, status: int, location: str, why: str
) -> None:
    reason = refusal(method, status, SOURCE, location)
    assert reason is not None
    assert why in reason


@pytest.mark.parametrize(
    ("other", "same"),
    [
        ("https://MCP.example.com:443/messages?session=1", True),
        ("https://u:p@mcp.example.com/x", True),
        ("http://mcp.example.com/messages", False),  # a legacy endpoint event downgrading to http
        ("https://mcp.example.com:8443/messages", False),
        ("https://collector.example/messages", False),
    ],
)
def test_an_origin_is_scheme_host_and_port(other: str, same: bool) -> None:
    assert same_origin(yarl.URL(other), SOURCE) is same


def test_a_refusal_quotes_the_location_redacted() -> None:
    reason = refusal("POST", 307, SOURCE, "https://u:pw1234@collector.example/x?access_token=tok999")
    assert reason is not None
    assert "collector.example" in reason
    assert "pw1234" not in reason
    assert "tok999" not in reason


# ---- over loopback --------------------------------------------------------------------------


def recorder() -> AbstractAsyncContextManager[ScriptedServer]:
    """The other origin: answers 200 with an initialize result to anything, records everything."""

    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        result = jsonrpc.result_response(
            1,
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "serverInfo": {"name": "x", "version": "0"},
            },
        )
        await stream.send(http_response(200, orjson.dumps(result), content_type="application/json"))

    return scripted_http_server(handler)


def redirecting_to(
    target: str, status: int = 307, header: str = "Location"
) -> AbstractAsyncContextManager[ScriptedServer]:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(status, headers={header: target + request.path}))

    return scripted_http_server(handler)


def secrets_seen(requests: list[HttpRequest]) -> list[str]:
    return [value for request in requests for value in request.headers.values() if SECRET in value]


async def initialize(link: Link) -> ServerUnavailable:
    with anyio.fail_after(10):
        await link.send(INIT)
        answer, _ = await link.receive()
    return failure_of(answer, 1)


@pytest.mark.parametrize("header", ["Location", "URI"])
async def test_a_post_redirected_to_another_origin_never_reaches_it_and_fails_naming_the_server(
    caplog: pytest.LogCaptureFixture, header: str
) -> None:
    async with recorder() as other, redirecting_to(other.url, header=header) as server:
        transport = StreamableHttpTransport("search", server.url + "/mcp", HEADERS)
        async with transport.connect() as link:
            with caplog.at_level(logging.WARNING, "proxy.outbound.over_http.redirects"):
                error = await initialize(link)
    assert other.requests == [], "the other origin was sent the request"
    assert len(server.requests) == 1
    assert secrets_seen(server.requests)  # the configured origin has them
    assert error.server_id == "search"
    assert "redirect refused" in error.reason
    assert "another origin" in error.reason
    assert other.url.removeprefix("http://") in error.reason
    assert any("redirect refused" in record.getMessage() for record in caplog.records)


async def test_a_get_stream_of_the_legacy_transport_redirected_elsewhere_is_refused() -> None:
    async with recorder() as other, redirecting_to(other.url, status=302) as server:
        transport = LegacySseTransport("legacy", server.url + "/sse", HEADERS)
        with anyio.fail_after(10), pytest.raises(ServerUnavailable, match="another origin") as caught:
            async with transport.connect():
                pass
    assert other.requests == []
    assert caught.value.server_id == "legacy"


async def test_a_redirect_within_the_origin_is_followed_with_the_configured_headers() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        if request.path == "/old":
            await stream.send(http_response(308, headers={"Location": "/mcp"}))
            return
        result = jsonrpc.result_response(
            1,
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "serverInfo": {"name": "x", "version": "0"},
            },
        )
        await stream.send(http_response(200, orjson.dumps(result), content_type="application/json"))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("search", server.url + "/old", HEADERS).connect() as link,
    ):
        with anyio.fail_after(10):
            await link.send(INIT)
            answer, _ = await link.receive()
    assert "result" in answered(answer)
    moved = [r for r in server.requests if r.path == "/mcp"]
    assert len(moved) == 1
    assert moved[0].method == "POST"
    assert orjson.loads(moved[0].body)["method"] == "initialize"
    assert moved[0].headers["x-api-key"] == SECRET


async def test_a_redirect_loop_within_the_origin_ends_after_ten_hops_failing_the_request() -> None:
    async def handler(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        await stream.send(http_response(307, headers={"Location": "/mcp"}))

    async with (
        scripted_http_server(handler) as server,
        StreamableHttpTransport("search", server.url + "/mcp", HEADERS).connect() as link,
    ):
        error = await initialize(link)
    assert len(server.requests) == 10
    assert error.server_id == "search"
    assert "TooManyRedirects" in error.reason
