"""The /mcp endpoint at revision 2026-07-28, in memory: ASGI calls into ``McpEndpoint`` in front
of a real ``Gateway`` whose one server is an in-memory handshake-era server.

Covered here: statuses per the ladder (405/406/202/400/404), JSON answers that wait for nothing,
SSE once a notification comes first (and keep-alives while silent), a disconnect that cancels
the request (the server hears notifications/cancelled), no session ever minted, every answer
valid against the 2026-07-28 schema, and handshake sessions on the same endpoint unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from proxy.inbound import stateless_http
from proxy.inbound.streamable_http import McpEndpoint, OriginPolicy
from proxy.protocol import stateless, versions
from proxy.protocol.headers import encode_header_value
from proxy.protocol.sse import SSEDecoder
from proxy.router.dispatch import CAPABILITIES
from tests.inbound.memory_server import INITIALIZE, META, TOOLS, Server, V, request, running, valid
from tests.protocol.schemas import validator

pytestmark = pytest.mark.anyio

REGION = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    chunks: list[bytes]

    def json(self) -> Any:
        return orjson.loads(self.body)

    def events(self) -> list[Any]:
        return [orjson.loads(event.data) for event in SSEDecoder().feed(self.body)]


class Asgi:
    """Drives the endpoint like a server would: one request in, every ``send`` recorded."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint

    async def __call__(
        self,
        method: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        disconnect: anyio.Event | None = None,
        on_chunk: Callable[[bytes], None] | None = None,
    ) -> Response:
        data = body if isinstance(body, bytes) else orjson.dumps(body) if body is not None else b""
        head = {
            "host": "127.0.0.1:8080",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        head.update({k.lower(): v for k, v in (headers or {}).items()})
        scope = {
            "type": "http",
            "method": method,
            "path": "/mcp",
            "headers": [(k.encode(), v.encode("latin-1")) for k, v in head.items()],
            "client": ("127.0.0.1", 1),
        }
        delivered = False
        hang_up = disconnect or anyio.Event()

        async def receive() -> MutableMapping[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": data, "more_body": False}
            await hang_up.wait()
            return {"type": "http.disconnect"}

        response = Response(0, {}, b"", [])

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response.status = message["status"]
                response.headers = {bytes(k).decode(): bytes(v).decode() for k, v in message["headers"]}
            else:
                chunk = message.get("body", b"")
                response.chunks.append(chunk)
                response.body += chunk
                if on_chunk is not None:
                    on_chunk(chunk)

        with anyio.fail_after(10):
            await self.endpoint(scope, receive, send)
        return response


def routed(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    """The headers a 2026-07-28 client sends with a request."""
    headers = {"MCP-Protocol-Version": V, "Mcp-Method": method, **extra}
    if name is not None:
        headers["Mcp-Name"] = encode_header_value(name)
    return headers


@pytest.fixture
async def server() -> Server:
    return Server(
        tools=[*TOOLS, {"name": "where", "inputSchema": REGION}], resources=[{"uri": "mem://a", "name": "a"}]
    )


@asynccontextmanager
async def serving(server: Server, **config: Any) -> AsyncIterator[Asgi]:
    """A gateway in front of ``server``, and the endpoint in front of the gateway."""
    async with running(server, catalog={"page_size": 3}, **config) as gateway:
        yield Asgi(McpEndpoint(gateway.inbound, OriginPolicy("127.0.0.1", [], [])))


@pytest.fixture
async def asgi(server: Server) -> AsyncIterator[Asgi]:
    async with serving(server) as endpoint:
        yield endpoint


async def test_discover_answers_json_with_the_versions_capabilities_and_no_session(asgi: Asgi) -> None:
    response = await asgi("POST", request("server/discover"), routed("server/discover"))
    assert (response.status, response.headers["content-type"]) == (200, "application/json")
    assert "mcp-session-id" not in response.headers
    result = valid(response.json())["result"]
    validator(V, "DiscoverResult")(result)
    assert result["supportedVersions"] == list(versions.ADVERTISED)
    assert result["capabilities"] == CAPABILITIES
    assert result["_meta"][stateless.SERVER_INFO_KEY]["name"] == "manifold"
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == ("complete", 0, "public")


async def test_lists_are_paged_with_caching_hints_on_every_page(asgi: Asgi) -> None:
    first = valid((await asgi("POST", request("tools/list"), routed("tools/list"))).json())["result"]
    assert [t["name"] for t in first["tools"]] == ["mem.echo", "mem.slow", "mem.progress"]
    page = request("tools/list", 2, cursor=first["nextCursor"])
    second = valid((await asgi("POST", page, routed("tools/list"))).json())["result"]
    assert [t["name"] for t in second["tools"]] == ["mem.where"]
    assert "nextCursor" not in second
    for result in (first, second):
        validator(V, "ListToolsResult")(result)
        assert (result["ttlMs"], result["cacheScope"], result["resultType"]) == (0, "public", "complete")


async def test_with_a_policy_in_force_what_one_identity_is_shown_is_cached_privately(
    server: Server, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\ndefault: allow\nrules: []\n")
    async with serving(server, policy={"files": [str(policy)]}) as asgi:
        listed = (await asgi("POST", request("tools/list"), routed("tools/list"))).json()["result"]
        read = await asgi(
            "POST", request("resources/read", uri="mem://a"), routed("resources/read", "mem://a")
        )
    assert listed["cacheScope"] == "private"
    assert read.json()["result"]["cacheScope"] == "private"


async def test_a_call_reaches_the_server_without_the_callers_envelope(asgi: Asgi, server: Server) -> None:
    meta = {
        **META,
        stateless.CLIENT_INFO_KEY: {"name": "c", "version": "1"},
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    body = request("tools/call", meta=meta, name="mem.echo", arguments={"a": 1})
    response = await asgi("POST", body, routed("tools/call", "mem.echo"))
    result = valid(response.json())["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"][stateless.SERVER_INFO_KEY]["name"] == "manifold"
    forwarded = server.calls()[-1]["params"]
    assert forwarded == {
        "name": "echo",
        "arguments": {"a": 1},
        "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    }


async def test_a_read_carries_private_hints_and_an_unknown_uri_is_invalid_params_with_its_uri(
    asgi: Asgi,
) -> None:
    read = await asgi("POST", request("resources/read", uri="mem://a"), routed("resources/read", "mem://a"))
    result = valid(read.json())["result"]
    assert (result["contents"][0]["text"], result["ttlMs"], result["cacheScope"]) == ("A", 0, "private")
    missing = await asgi(
        "POST", request("resources/read", 9, uri="mem://b"), routed("resources/read", "mem://b")
    )
    assert missing.status == 400
    error = valid(missing.json())
    assert (error["id"], error["error"]["code"], error["error"]["data"]) == (9, -32602, {"uri": "mem://b"})


@pytest.mark.parametrize(
    "method", ["initialize", "ping", "logging/setLevel", "resources/subscribe", "no/such"]
)
async def test_removed_and_unknown_methods_are_404_method_not_found_with_the_id(
    asgi: Asgi, method: str
) -> None:
    response = await asgi("POST", request(method, 41, uri="mem://a"), routed(method))
    assert response.status == 404
    error = valid(response.json())
    assert (error["id"], error["error"]["code"]) == (41, -32601)


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (request("tools/list", meta=None), routed("tools/list"), 400, -32602),
        (  # no envelope and a revision nobody knows: told which are served
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"MCP-Protocol-Version": "1999-01-01", "Mcp-Session-Id": "abc"},
            400,
            -32022,
        ),
        (request("tools/list"), {**routed("tools/list"), "Mcp-Method": "prompts/list"}, 400, -32020),
        (
            request("tools/list", meta={**META, stateless.PROTOCOL_VERSION_KEY: "v9"}),
            routed("tools/list", **{"MCP-Protocol-Version": "v9"}),
            400,
            -32022,
        ),
        (request("tools/call", name="mem.echo"), routed("tools/call", "mem.slow"), 400, -32020),
        (
            request("tools/call", name="mem.where", arguments={"region": "eu"}),
            routed("tools/call", "mem.where"),
            400,
            -32020,
        ),
        (
            request("tools/call", name="mem.where", arguments={"region": "eu"}),
            routed("tools/call", "mem.where", **{"Mcp-Param-Region": "us"}),
            400,
            -32020,
        ),
        (request("tools/call", name="mem.nope"), routed("tools/call", "mem.nope"), 400, -32602),
    ],
)
async def test_refusals_carry_the_id_and_the_status_of_their_code(
    asgi: Asgi, body: Any, headers: dict[str, str], status: int, code: int
) -> None:
    response = await asgi("POST", body, headers)
    error = valid(response.json())
    assert (response.status, error["id"], error["error"]["code"]) == (status, 1, code)


async def test_an_mcp_param_header_that_matches_lets_the_call_through(asgi: Asgi) -> None:
    body = request("tools/call", name="mem.where", arguments={"region": "eu"})
    response = await asgi("POST", body, routed("tools/call", "mem.where", **{"Mcp-Param-Region": "eu"}))
    assert response.status == 200
    assert valid(response.json())["result"]["resultType"] == "complete"


async def test_an_enveloped_request_without_headers_or_session_is_told_its_headers_are_missing(
    asgi: Asgi,
) -> None:
    response = await asgi("POST", request("tools/list", 5))
    assert response.status == 400
    assert valid(response.json())["error"]["code"] == -32020


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        ([request("tools/list")], -32600),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, -32600),
    ],
)
async def test_a_body_that_is_not_one_message_is_refused_without_an_id(
    asgi: Asgi, body: Any, code: int
) -> None:
    response = await asgi("POST", body, routed("tools/list"))
    error = valid(response.json())
    assert (response.status, error["error"]["code"]) == (400, code)
    assert "id" not in error  # the 2026-07-28 schema has no null ids


@pytest.mark.parametrize(
    ("config", "headers", "status"),
    [
        ({}, {"Origin": "http://evil.example"}, 403),
        ({}, {"Host": "evil.example"}, 403),
        ({"auth": {"api_keys": [{"name": "ci", "key": "sha256:" + "0" * 64}]}}, {}, 401),
        ({"rate_limits": {"http": {"rate": "1/minute", "burst": 1}}}, {}, 429),
    ],
    ids=["origin", "host", "unauthenticated", "flood"],
)
async def test_refusals_before_the_body_is_read_carry_no_null_id_at_2026_07_28(
    server: Server, config: dict[str, Any], headers: dict[str, str], status: int
) -> None:
    async with serving(server, **config) as endpoint:
        response = await endpoint("POST", request("tools/list"), {**routed("tools/list"), **headers})
        if status == 429:  # the first request spends the burst
            response = await endpoint("POST", request("tools/list"), routed("tools/list"))
        handshake = await endpoint("POST", request("tools/list"), headers) if status != 429 else None
    assert response.status == status
    assert "id" not in valid(response.json())
    if handshake is not None:  # the handshake era keeps its id: null
        assert handshake.json()["id"] is None


async def test_a_notification_is_accepted_and_dropped(asgi: Asgi, server: Server) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    response = await asgi("POST", note, routed("notifications/cancelled"))
    assert (response.status, response.body) == (202, b"")
    unsupported = await asgi("POST", note, {"MCP-Protocol-Version": "v9"})
    assert (unsupported.status, unsupported.json()["error"]["code"]) == (400, -32022)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_other_http_methods_on_the_modern_path_are_405_allowing_post(asgi: Asgi, method: str) -> None:
    response = await asgi(method, headers={"MCP-Protocol-Version": V, "Accept": "text/event-stream"})
    assert (response.status, response.headers["allow"]) == (405, "POST")


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
async def test_an_accept_without_both_json_and_sse_is_406(asgi: Asgi, accept: str) -> None:
    response = await asgi("POST", request("tools/list"), {**routed("tools/list"), "Accept": accept})
    assert response.status == 406


async def test_progress_turns_the_answer_into_an_sse_stream_with_the_callers_token(asgi: Asgi) -> None:
    body = request("tools/call", meta={**META, "progressToken": "p-1"}, name="mem.progress")
    response = await asgi("POST", body, routed("tools/call", "mem.progress"))
    assert (response.status, response.headers["content-type"]) == (200, "text/event-stream")
    progress, final = (valid(event) for event in response.events())
    assert (progress["method"], progress["params"]["progressToken"]) == ("notifications/progress", "p-1")
    assert (final["id"], final["result"]["resultType"]) == (1, "complete")


async def test_a_silent_request_commits_to_sse_and_keeps_the_stream_alive(
    asgi: Asgi, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stateless_http, "_DEFER", 0.01)
    monkeypatch.setattr(stateless_http, "_KEEPALIVE", 0.01)

    def released_after_a_ping(chunk: bytes) -> None:
        if chunk == b": ping\n\n":
            server.release.set()

    body = request("tools/call", name="mem.slow")
    response = await asgi("POST", body, routed("tools/call", "mem.slow"), on_chunk=released_after_a_ping)
    assert (response.status, response.headers["content-type"]) == (200, "text/event-stream")
    assert response.chunks[0] == b": ping\n\n"
    (final,) = response.events()
    assert valid(final)["result"]["resultType"] == "complete"


async def test_closing_the_response_stream_cancels_the_request_at_the_server(
    asgi: Asgi, server: Server
) -> None:
    hang_up = anyio.Event()
    body = request("tools/call", name="mem.slow")
    response: list[Response] = []

    async def call() -> None:
        response.append(await asgi("POST", body, routed("tools/call", "mem.slow"), disconnect=hang_up))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(5):
            await server.started.wait()
        hang_up.set()
        with anyio.fail_after(5):
            await server.cancelled.wait()
    cancel = next(m for m in server.received if m.get("method") == "notifications/cancelled")
    assert cancel["params"]["requestId"] == server.calls()[-1]["id"]
    assert (response[0].status, response[0].chunks) == (0, [])  # nothing was sent for it


async def test_a_legacy_session_still_works_beside_modern_requests(asgi: Asgi) -> None:
    response = await asgi("POST", INITIALIZE)
    session = response.headers["mcp-session-id"]
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"
    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    listed = await asgi("POST", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers)
    result = listed.json()["result"]
    assert {"resultType", "ttlMs", "cacheScope", "_meta"}.isdisjoint(result)
    validator("2025-11-25", "ListToolsResult")(result)
    ping = await asgi("POST", {"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers)
    assert ping.json() == {"jsonrpc": "2.0", "id": 3, "result": {}}


@pytest.mark.parametrize("after_a_note", [False, True], ids=["before any answer", "on an SSE stream"])
async def test_a_failure_of_the_gateway_s_own_is_answered_and_leaves_no_task_behind(
    asgi: Asgi, monkeypatch: pytest.MonkeyPatch, after_a_note: bool
) -> None:
    # The request runs beside plain asyncio tasks (no task group): its failure must still reach
    # the endpoint's boundary (a JSON-RPC error, or the stream ended), and neither the stream's
    # writer nor the disconnect watcher may outlive the request.
    async def broken(caller: Any, message: Any, emit: Callable[[Any], None]) -> Any:
        if after_a_note:
            emit(
                {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}
            )
            await anyio.sleep(0.05)
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(asgi.endpoint._stateless._endpoint, "handle_stateless", broken)
    before = len(asyncio.all_tasks())
    response = await asgi("POST", request("tools/call", name="mem.echo"), routed("tools/call", "mem.echo"))
    if after_a_note:
        assert (response.status, response.headers["content-type"]) == (200, "text/event-stream")
        assert [event["method"] for event in response.events()] == ["notifications/message"]
        assert response.chunks[-1] == b""  # the stream was ended, not left open
    else:
        assert response.json()["error"]["code"] == -32603
        assert "a bug of ours" not in response.body.decode()
    assert len(asyncio.all_tasks()) == before
