"""End to end at revision 2026-07-28: the official SDK client, stateless, ↔ a real ``manifold
serve`` ↔ SDK servers of both eras over stdio, beside handshake clients on the same endpoint.

Behind Manifold: ``alpha`` (tests/fixtures/fixture_server.py: 12 tools, 5 a page) and ``r1``
(tests/fixtures/relay_server.py: prompts, resources, templates, completions, progress). ``alpha``
answers ``server/discover``, so Manifold speaks 2026-07-28 to it; ``r1`` is pinned to the handshake
era (``era: handshake``). Manifold serves 7 items a page.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import PromptReference, TextContent, TextResourceContents

from proxy.protocol import stateless, versions
from tests.interaction.harness import REPO, RunningManifold, fixture_server, post, running_manifold
from tests.interaction.test_metrics import samples, scrape
from tests.protocol.schemas import validator

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RELAY = str(REPO / "tests" / "fixtures" / "relay_server.py")
PAGE = 7
V = versions.LATEST_STATELESS
META = {
    stateless.PROTOCOL_VERSION_KEY: V,
    stateless.CLIENT_CAPABILITIES_KEY: {},
    stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
}


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {
        "catalog": {"page_size": PAGE},
        "servers": {
            "alpha": fixture_server("alpha", tools=12, page_size=5),
            "r1": {"command": sys.executable, "args": [RELAY, "--name", "r1"], "era": "handshake"},
        },
    }
    async with running_manifold(tmp_path_factory.mktemp("stateless"), config) as running:
        yield running


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def _tool_names(client: Client) -> tuple[list[str], int]:
    names: list[str] = []
    pages = 0
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        pages += 1
        assert len(page.tools) <= PAGE
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return names, pages


def _request(method: str, request_id: int, meta: dict[str, Any] = META, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}


def _headers(method: str, version: str = V, **more: str) -> dict[str, str]:
    return {"MCP-Protocol-Version": version, "Mcp-Method": method, **more}


async def test_an_auto_client_discovers_manifold_and_chooses_2026_07_28(manifold: RunningManifold) -> None:
    async with Client(manifold.url, mode="auto", cache=None) as client:
        assert client.protocol_version == V
        assert client.server_info is not None
        assert client.server_info.name == "manifold"
        discovered = client.session.discover_result
        assert discovered is not None
        assert discovered.supported_versions == list(versions.ADVERTISED)
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.prompts is not None
        assert capabilities.tools.list_changed  # heard on subscriptions/listen streams


async def test_a_modern_client_pages_through_the_same_merged_tools_as_a_legacy_one(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode=V, cache=None) as client:
        names, pages = await _tool_names(client)
    async with Client(manifold.url, mode="legacy") as handshake:
        handshake_names, _ = await _tool_names(handshake)
    assert names == handshake_names
    assert [n for n in names if n.startswith("alpha.tool_")] == [f"alpha.tool_{i:03d}" for i in range(12)]
    assert {"alpha.echo", "r1.progress"} <= set(names)
    assert pages == -(-len(names) // PAGE) > 1


async def test_calls_prompts_reads_and_completions_reach_the_servers_behind(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode=V, cache=None) as client:
        echoed = json.loads(_text(await client.call_tool("alpha.echo", {"n": 1})))
        assert echoed == {"server": "alpha", "tool": "echo", "arguments": {"n": 1}}
        prompt = await client.get_prompt("r1.greet", {"name": "Ada"})
        content = prompt.messages[0].content
        assert isinstance(content, TextContent)
        assert content.text == "Hello from r1, Ada!"
        for uri, text in [
            ("note://r1/static", "static note of r1"),
            ("note://r1/cats", "r1 note about cats"),
        ]:
            contents = (await client.read_resource(uri)).contents[0]
            assert isinstance(contents, TextResourceContents)
            assert contents.text == text
        completed = await client.complete(
            PromptReference(type="ref/prompt", name="r1.greet"), {"name": "name", "value": "Al"}
        )
        assert completed.completion.values == ["Alan"]


async def test_progress_reaches_the_modern_caller_on_its_response_stream(manifold: RunningManifold) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(manifold.url, mode=V, cache=None) as client:
        result = await client.call_tool("r1.progress", {"steps": 3}, progress_callback=on_progress)
    assert _text(result) == "r1: 3 steps"
    assert seen == [1, 2, 3]


async def test_unknown_names_are_invalid_params_and_an_unknown_resource_names_its_uri(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode=V, cache=None) as client:
        with pytest.raises(MCPError) as tool:
            await client.call_tool("alpha.no_such_tool", {})
        assert tool.value.error.code == -32602
        with pytest.raises(MCPError) as resource:
            await client.read_resource("note://nowhere/x")
        assert (resource.value.error.code, resource.value.error.data) == (-32602, {"uri": "note://nowhere/x"})
    async with Client(manifold.url, mode="legacy") as handshake:
        with pytest.raises(MCPError) as old:
            await handshake.read_resource("note://nowhere/x")
        assert old.value.error.code == -32002  # what the handshake revisions define


async def _raw(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, dict[str, str], Any]:
    """One raw POST; its answer checked against the 2026-07-28 schema."""
    status, answer_headers, answer = await post(http, url, body, headers)
    validator(V, "JSONRPCMessage")(answer)
    return status, answer_headers, answer


async def test_the_wire_answers_statelessly_with_statuses_per_the_spec(manifold: RunningManifold) -> None:
    url = manifold.url
    unknown = {**META, stateless.PROTOCOL_VERSION_KEY: "v999.0.0"}
    call = _request("tools/call", 5, name="alpha.echo", arguments={})
    async with aiohttp.ClientSession() as http:
        status, headers, body = await _raw(
            http, url, _request("server/discover", 1), _headers("server/discover")
        )
        assert status == 200
        assert "mcp-session-id" not in {k.lower() for k in headers}
        validator(V, "DiscoverResult")(body["result"])

        status, _, body = await _raw(
            http, url, _request("server/discover", 2, unknown), _headers("x", "v999.0.0")
        )
        assert (status, body["id"], body["error"]["code"]) == (400, 2, -32020)  # Mcp-Method disagrees
        status, _, body = await _raw(
            http, url, _request("server/discover", 3, unknown), _headers("server/discover", "v999.0.0")
        )
        assert (status, body["id"], body["error"]["code"]) == (400, 3, -32022)
        assert body["error"]["data"] == {"supported": list(versions.ADVERTISED), "requested": "v999.0.0"}
        status, _, body = await _raw(
            http, url, _request("server/discover", 4, unknown), _headers("server/discover")
        )
        assert (status, body["id"], body["error"]["code"]) == (400, 4, -32020)  # header ≠ body version
        status, _, body = await _raw(
            http, url, call, _headers("tools/call", **{"Mcp-Name": "alpha.tool_000"})
        )
        assert (status, body["id"], body["error"]["code"]) == (400, 5, -32020)
        status, _, body = await _raw(http, url, _request("ping", 6), _headers("ping"))
        assert (status, body["id"], body["error"]["code"]) == (404, 6, -32601)

        for method in ("GET", "DELETE"):
            async with http.request(method, url, headers={"MCP-Protocol-Version": V}) as response:
                assert (response.status, response.headers["Allow"]) == (405, "POST")


async def test_closing_the_response_stream_cancels_the_call_at_the_server(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled"
    call = _request("tools/call", 7, name="r1.wait", arguments={"seconds": 60, "marker": str(marker)})
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **_headers("tools/call", **{"Mcp-Name": "r1.wait"}),
    }
    async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

        async def hold() -> None:
            async with http.post(manifold.url, data=orjson.dumps(call), headers=headers) as response:
                await response.read()

        tg.start_soon(hold)
        with anyio.fail_after(20):
            # Another process: nothing to wait on but its metrics.
            while samples(await scrape(manifold), "manifold_requests_in_flight").get((), 0) < 1:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()  # the client goes away: the connection closes
    with anyio.fail_after(20):
        while not marker.exists():  # noqa: ASYNC110 - written by the server process
            await anyio.sleep(0.05)
    assert marker.read_text() == "cancelled"


async def test_legacy_and_modern_clients_work_side_by_side(manifold: RunningManifold) -> None:
    answers: dict[str, str] = {}

    async def use(mode: str, n: int) -> None:
        async with Client(manifold.url, mode=mode, cache=None) as client:
            for i in range(5):
                payload = json.loads(_text(await client.call_tool("alpha.echo", {"who": mode, "i": i})))
                assert payload["arguments"] == {"who": mode, "i": i}
            answers[f"{mode}/{n}"] = client.protocol_version

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(2):
                tg.start_soon(use, "legacy", n)  # the SDK client's name for the handshake era
                tg.start_soon(use, V, n)
    assert answers == {"legacy/0": "2025-11-25", "legacy/1": "2025-11-25", f"{V}/0": V, f"{V}/1": V}
