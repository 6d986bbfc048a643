"""End to end: the official MCP SDK client ↔ a real ``manifold serve`` ↔ real MCP servers.

Behind Manifold: two SDK fixture servers over stdio, one over Streamable HTTP, and the npm
``server-everything``; both sides page (the fixtures list 10 tools a page, Manifold 7).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    TextContent,
)

from tests.fixtures.spawn import running_http_fixture
from tests.interaction.harness import (
    OBSERVER,
    RunningManifold,
    everything_server,
    fixture_server,
    post,
    raw_session,
    running_manifold,
    wait_for_health,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PAGE = 7


async def _no_sampling(
    context: ClientRequestContext, params: CreateMessageRequestParams
) -> CreateMessageResult:
    raise AssertionError("listing tools asks the client nothing")


async def _no_elicitation(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    raise AssertionError("listing tools asks the client nothing")


async def _direct_tool_names(server: Any) -> list[str]:
    # Declared like Manifold declares them to servers: server-everything lists more tools to
    # clients that can answer sampling and elicitation requests.
    names: list[str] = []
    async with Client(
        server, mode="legacy", sampling_callback=_no_sampling, elicitation_callback=_no_elicitation
    ) as client:
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [tool.name for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                return names


async def _all_pages(client: Client) -> tuple[list[str], int]:
    names: list[str] = []
    pages = 0
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        pages += 1
        assert len(page.tools) <= PAGE
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return names, pages


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@pytest.fixture
async def gamma_url() -> AsyncIterator[str]:
    async with running_http_fixture("gamma", transport="streamable-http", tools=9, page_size=4) as url:
        yield url


@pytest.fixture
async def manifold(tmp_path: Path, gamma_url: str) -> AsyncIterator[RunningManifold]:
    config = {
        "auth": OBSERVER,  # /healthz shows each server's entry
        "catalog": {"page_size": PAGE},
        "servers": {
            "alpha": {**fixture_server("alpha", tools=25, page_size=10), "request_timeout": 3},
            "beta": fixture_server("beta", tools=12, page_size=5),
            "gamma": {"url": gamma_url, "prefix": "g"},
            "everything": everything_server(),
            "ghost": {"command": "/nonexistent/mcp-server", "connect_timeout": 2},
        },
    }
    async with running_manifold(tmp_path, config) as running:
        yield running


async def test_pages_through_manifold_are_exactly_every_servers_tools_once(
    manifold: RunningManifold, gamma_url: str
) -> None:
    expected = [f"alpha.{n}" for n in await _direct_tool_names(fixture_server_params("alpha", 25, 10))]
    expected += [f"beta.{n}" for n in await _direct_tool_names(fixture_server_params("beta", 12, 5))]
    expected += [f"g.{n}" for n in await _direct_tool_names(gamma_url)]
    expected += [f"everything.{n}" for n in await _direct_tool_names(everything_params())]
    # Manifold also declares client-side tasks (the SDK client can't): server-everything then
    # lists its two bidirectional task tools, registered last.
    expected += ["everything.trigger-sampling-request-async", "everything.trigger-elicitation-request-async"]

    async with Client(manifold.url) as client:
        names, pages = await _all_pages(client)

    assert len(names) == len(set(names)), "a tool was listed twice"
    assert names == expected  # config order, then each server's own order
    assert pages == -(-len(expected) // PAGE)


async def test_a_call_reaches_every_server_under_its_original_name(manifold: RunningManifold) -> None:
    async with Client(manifold.url) as client:
        for name in ("alpha.echo", "beta.echo", "g.echo"):
            result = await client.call_tool(name, {"n": 1})
            payload = json.loads(_text(result))
            server = {"alpha.echo": "alpha", "beta.echo": "beta", "g.echo": "gamma"}[name]
            assert payload == {"server": server, "tool": "echo", "arguments": {"n": 1}}
        everything = await client.call_tool("everything.echo", {"message": "hi"})
        assert "hi" in _text(everything)
        assert _text(await client.call_tool("alpha.tool_024", {})) == "alpha:tool_024"


async def test_unknown_tool_is_invalid_params_naming_the_tool(manifold: RunningManifold) -> None:
    async with Client(manifold.url) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("alpha.no_such_tool", {})
    assert caught.value.error.code == -32602
    assert "alpha.no_such_tool" in caught.value.error.message


async def test_tampered_and_foreign_cursors_are_invalid_params(manifold: RunningManifold) -> None:
    async with Client(manifold.url) as client:
        first = await client.list_tools()
        assert first.next_cursor is not None
        tampered = first.next_cursor[:-2] + ("AA" if not first.next_cursor.endswith("AA") else "BB")
        for cursor in (tampered, "not-a-cursor", ""):
            with pytest.raises(MCPError) as caught:
                await client.list_tools(cursor=cursor, cache_mode="bypass")
            assert caught.value.error.code == -32602


async def test_sessions_reusing_request_ids_each_get_their_own_answers(manifold: RunningManifold) -> None:
    # Every SDK session numbers its requests from the same start, so five sessions calling
    # concurrently put the same ids on the one shared connection to each server.
    failures: list[str] = []

    async def session(index: int) -> None:
        async with Client(manifold.url) as client, anyio.create_task_group() as tg:
            for call in range(12):
                tg.start_soon(one_call, client, index, call)

    async def one_call(client: Client, index: int, call: int) -> None:
        server = ("alpha", "beta", "g")[call % 3]
        arguments = {"session": index, "call": call}
        payload = json.loads(_text(await client.call_tool(f"{server}.echo", arguments)))
        if payload["arguments"] != arguments:
            failures.append(f"session {index} call {call} got {payload['arguments']}")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for index in range(5):
                tg.start_soon(session, index)
    assert failures == []
    assert manifold.log().count("alpha: started pid") == 1, "one shared stdio process, not one per call"


async def test_a_server_crashing_mid_call_fails_that_call_and_others_go_on(manifold: RunningManifold) -> None:
    async with Client(manifold.url) as client:
        with anyio.fail_after(20):
            with pytest.raises(MCPError) as caught:
                await client.call_tool("beta.crash", {})
            assert caught.value.error.code == -32000
            assert "beta" in caught.value.error.message
            assert json.loads(_text(await client.call_tool("alpha.echo", {"x": 1})))["server"] == "alpha"
            health = await wait_for_health(manifold, lambda h: h["servers"]["beta"]["state"] == "ready")
            result = await client.call_tool("beta.echo", {"again": True})
        assert json.loads(_text(result))["arguments"] == {"again": True}
        assert health["servers"]["alpha"]["state"] == "ready"
        assert manifold.log().count("beta: started pid") == 2  # restarted once


async def test_a_server_that_never_answers_gets_a_timeout_error(manifold: RunningManifold) -> None:
    async with Client(manifold.url) as client:
        with anyio.fail_after(15), pytest.raises(MCPError) as caught:
            await client.call_tool("alpha.hang", {})
        assert caught.value.error.code == -32001
        assert "alpha" in caught.value.error.message
        assert json.loads(_text(await client.call_tool("alpha.echo", {})))["server"] == "alpha"


async def test_a_server_that_never_starts_is_reported_and_blocks_nothing(manifold: RunningManifold) -> None:
    health = await wait_for_health(manifold, lambda h: h["servers"]["ghost"]["state"] != "starting")
    assert health["servers"]["ghost"]["state"] == "backoff"
    assert health["servers"]["alpha"]["state"] == "ready"
    assert "server ghost: cannot start '/nonexistent/mcp-server'" in manifold.log()


async def test_malformed_json_and_invalid_messages_get_jsonrpc_errors(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        status, _, body = await post(http, manifold.url, b"{not json")
        assert (status, body["error"]["code"]) == (400, -32700)
        status, _, body = await post(http, manifold.url, {"jsonrpc": "1.0", "id": 1, "method": "ping"})
        assert (status, body["error"]["code"]) == (400, -32600)
        session = await raw_session(http, manifold.url)
        status, _, body = await post(
            http, manifold.url, {"jsonrpc": "2.0", "id": 7, "method": "no/such"}, {"Mcp-Session-Id": session}
        )
        assert (status, body["id"], body["error"]["code"]) == (200, 7, -32601)


async def test_http_session_rules_follow_the_transport_spec(manifold: RunningManifold) -> None:
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    async with aiohttp.ClientSession() as http:
        status, _, _ = await post(http, manifold.url, ping)
        assert status == 400  # no session id
        status, _, _ = await post(http, manifold.url, ping, {"Mcp-Session-Id": "forged"})
        assert status == 404
        session = await raw_session(http, manifold.url)
        status, _, body = await post(http, manifold.url, ping, {"Mcp-Session-Id": session})
        assert (status, body) == (200, {"jsonrpc": "2.0", "id": 3, "result": {}})
        status, _, _ = await post(
            http, manifold.url, ping, {"Mcp-Session-Id": session, "Origin": "http://evil.example"}
        )
        assert status == 403
        status, _, _ = await post(
            http, manifold.url, ping, {"Mcp-Session-Id": session, "MCP-Protocol-Version": "1999-01-01"}
        )
        assert status == 400
        async with http.delete(manifold.url, headers={"Mcp-Session-Id": session}) as response:
            assert response.status == 200
        status, _, _ = await post(http, manifold.url, ping, {"Mcp-Session-Id": session})
        assert status == 404


async def test_list_changed_from_a_server_reaches_clients_and_the_new_tool_is_listed(
    manifold: RunningManifold,
) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    async with Client(manifold.url, mode="legacy", message_handler=on_message) as client:
        await client.list_tools()
        await client.call_tool("beta.add_tool", {"name": "fresh"})
        with anyio.fail_after(15):
            await changed.wait()
        names, _ = await _all_pages(client)
    assert "beta.fresh" in names


def fixture_server_params(name: str, tools: int, page_size: int) -> Any:
    from mcp import StdioServerParameters

    entry = fixture_server(name, tools=tools, page_size=page_size)
    return StdioServerParameters(command=entry["command"], args=entry["args"])


def everything_params() -> Any:
    from mcp import StdioServerParameters

    entry = everything_server()
    return StdioServerParameters(command=entry["command"], args=entry["args"])
