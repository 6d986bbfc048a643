"""End to end: named endpoints over the same servers (issue #18), attacked by clients that try to
reach what their endpoint does not show: another endpoint's names, sessions and cursors, a tool
the policy hides, and paths that are no endpoint.

Behind a real ``manifold serve``: the SDK fixture server twice (``alpha``, ``beta``; ``beta`` also
lists a tool whose name is too long for a 64-character profile). ``/mcp/code`` shows ``alpha``
only, in the default profile; ``/mcp/claude`` shows both servers' ``echo`` and ``add`` and the
long tool, named with ``__`` in at most 64 characters. The policy denies ``alpha.add`` to everyone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from yarl import URL

from tests.interaction.harness import (
    REPO,
    RunningManifold,
    fixture_server,
    post,
    raw_session,
    running_manifold,
    write_config,
)
from tests.interaction.test_policy import api_keys, audit_path, audited, bearer, connect, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LONG = "create_or_update_a_pull_request_review_comment_with_suggestions"  # 62 characters
HIDE_ADD = """\
version: 1
default: allow
rules:
  - id: no-alpha-add
    effect: deny
    match: {tools: ["alpha.add"]}
"""
MODES = ["legacy", "auto"]  # a 2025-11-25 session; 2026-07-28 stateless (Manifold answers discover)


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("endpoints")
    (tmp_path / "policy.yaml").write_text(HIDE_ADD)
    beta = fixture_server("beta", tools=2)
    config = {
        "catalog": {"page_size": 3},
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "servers": {
            "alpha": fixture_server("alpha", tools=2),
            "beta": {**beta, "args": [*beta["args"], "--extra-tool", LONG, "--instructions", "beta's notes"]},
        },
        "endpoints": {
            "code": {"servers": ["alpha"]},
            "claude": {
                "tools": ["*.echo", "*.add", f"beta.{LONG}"],
                "naming": {"separator": "__", "max_length": 64},
            },
        },
    }
    async with running_manifold(tmp_path, config) as running:
        yield running


def at(manifold: RunningManifold, endpoint: str) -> str:
    return f"{manifold.url}/{endpoint}" if endpoint else manifold.url


async def listed(url: str, mode: str) -> list[str]:
    async with Client(url, mode=mode) as client:
        names: list[str] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            names += [tool.name for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                return names


@pytest.mark.parametrize("mode", MODES)
async def test_two_endpoints_over_the_same_servers_show_different_tools(
    manifold: RunningManifold, mode: str
) -> None:
    code = await listed(at(manifold, "code"), mode)
    claude = await listed(at(manifold, "claude"), mode)
    assert code == ["alpha.tool_000", "alpha.tool_001", "alpha.echo", *code[3:]]
    assert all(name.startswith("alpha.") for name in code)
    assert {"alpha__echo", "beta__echo", "beta__add"} <= set(claude)
    assert all("." not in name and len(name) <= 64 for name in claude)
    assert len(claude) == 4  # the two echoes, beta's add, the long tool; alpha.add is hidden
    whole = await listed(manifold.url, mode)
    assert {"alpha.echo", "beta.tool_000"} <= set(whole)


@pytest.mark.parametrize("mode", MODES)
async def test_names_in_each_profile_route_back_to_their_servers_tool(
    manifold: RunningManifold, mode: str
) -> None:
    claude = await listed(at(manifold, "claude"), mode)
    (long_name,) = [name for name in claude if name.startswith("beta__create")]
    assert len(long_name) == 64  # shortened: a head, "-" and a hash of the full name
    async with Client(at(manifold, "claude"), mode=mode) as client:
        assert text_of(await client.call_tool(long_name, {})) == f"beta:{LONG}"
        for server in ("alpha", "beta"):
            answer = json.loads(text_of(await client.call_tool(f"{server}__echo", {"n": 1})))
            assert answer == {"server": server, "tool": "echo", "arguments": {"n": 1}}
        # Another profile's spelling, or a tool the endpoint does not show, is unknown here.
        for name in ("alpha.echo", "alpha__tool_000", "beta.echo"):
            with pytest.raises(MCPError) as caught:
                await client.call_tool(name, {})
            assert (caught.value.error.code, caught.value.error.message) == (-32602, f"unknown tool: {name}")
    async with Client(at(manifold, "code"), mode=mode) as client:
        answer = json.loads(text_of(await client.call_tool("alpha.echo", {"n": 2})))
        assert answer["server"] == "alpha"
        with pytest.raises(MCPError):
            await client.call_tool("beta.echo", {})


@pytest.mark.parametrize("mode", MODES)
async def test_a_policy_hidden_tool_stays_hidden_in_every_endpoint(
    manifold: RunningManifold, mode: str
) -> None:
    for endpoint, name in (("", "alpha.add"), ("code", "alpha.add"), ("claude", "alpha__add")):
        assert name not in await listed(at(manifold, endpoint), mode)
        async with Client(at(manifold, endpoint), mode=mode) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(name, {"a": 1, "b": 2})
            assert (caught.value.error.code, caught.value.error.message) == (-32602, f"unknown tool: {name}")


async def test_metrics_and_the_audit_log_name_the_endpoint_a_call_came_in_on(
    manifold: RunningManifold,
) -> None:
    async with Client(at(manifold, "claude"), mode="legacy") as client:
        await client.call_tool("beta__echo", {"audited": True})
    async with (
        aiohttp.ClientSession() as http,
        http.get(manifold.url.replace("/mcp", "/metrics")) as response,
    ):
        metrics = await response.text()
    assert 'manifold_endpoint_tool_calls_total{endpoint="claude",outcome="ok"}' in metrics
    audited_here = await audited(audit_path(manifold), 1, where=lambda r: r["name"] == "beta__echo")
    records = [r for r in audited_here if r["name"] == "beta__echo"]
    assert records
    for record in records:
        assert (record["endpoint"], record["canonical_name"]) == ("claude", "beta.echo")


async def test_an_endpoint_passes_on_the_instructions_of_its_servers_only(manifold: RunningManifold) -> None:
    async with (
        Client(at(manifold, "code"), mode="legacy") as code,
        Client(manifold.url, mode="legacy") as whole,
    ):
        assert "beta's notes" not in (code.instructions or "")
        assert "beta: beta's notes" in (whole.instructions or "")


def _list(request_id: int, cursor: str | None = None) -> dict[str, Any]:
    params = {"cursor": cursor} if cursor else {}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params}


async def test_a_session_of_one_endpoint_is_unknown_on_another(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, at(manifold, "code"))
        status, _, body = await post(http, at(manifold, "code"), _list(2), {"Mcp-Session-Id": session})
        assert (status, bool(body["result"]["tools"])) == (200, True)
        for other in ("claude", ""):
            status, _, body = await post(http, at(manifold, other), _list(3), {"Mcp-Session-Id": session})
            assert status == 404
            assert body["error"]["message"] == "Not Found: unknown or expired session; initialize again"


async def test_a_cursor_of_one_endpoint_is_refused_on_another(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        code = await raw_session(http, at(manifold, "code"))
        _, _, first = await post(http, at(manifold, "code"), _list(2), {"Mcp-Session-Id": code})
        cursor = first["result"]["nextCursor"]
        claude = await raw_session(http, at(manifold, "claude"))
        _, _, body = await post(http, at(manifold, "claude"), _list(3, cursor), {"Mcp-Session-Id": claude})
        assert body["error"]["code"] == -32602


@pytest.mark.parametrize(
    "path",
    [
        "/mcp/../mcp",
        "/mcp/%2e%2e",
        "/mcp/%2e%2e/mcp",
        "/mcp/code/",
        "/mcp/code/..",
        "/mcp//code",
        "/mcp/" + "x" * 60_000,
    ],
    ids=["dotdot", "encoded-dotdot", "encoded-dotdot-mcp", "trailing-slash", "below", "double-slash", "huge"],
)
async def test_a_path_that_is_no_endpoint_is_not_found(manifold: RunningManifold, path: str) -> None:
    base = URL(manifold.url)
    url = URL.build(scheme="http", host=base.host or "127.0.0.1", port=base.port, path=path, encoded=True)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    async with aiohttp.ClientSession() as http:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        async with http.post(url, json=initialize, headers=headers, allow_redirects=False) as response:
            assert response.status in (404, 431), await response.text()
            assert "mcp-session-id" not in response.headers
    await listed(at(manifold, "code"), "legacy")  # and the gateway is none the worse for it


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_serves_the_endpoint_its_flag_names(tmp_path: Path, mode: str) -> None:
    config = write_config(
        tmp_path / "m.yaml",
        {
            "servers": {"alpha": fixture_server("alpha", tools=1), "beta": fixture_server("beta", tools=1)},
            "endpoints": {"flat": {"tools": ["*.echo"], "naming": {"separator": "__", "max_length": 64}}},
        },
    )
    args = ["-m", "proxy.cli", "stdio", "--config", str(config), "--endpoint", "flat"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))
    with anyio.fail_after(60):
        async with Client(params, mode=mode) as client:
            assert sorted(tool.name for tool in (await client.list_tools()).tools) == [
                "alpha__echo",
                "beta__echo",
            ]
            answer = json.loads(text_of(await client.call_tool("beta__echo", {"k": 1})))
            assert answer == {"server": "beta", "tool": "echo", "arguments": {"k": 1}}


def test_stdio_refuses_an_endpoint_that_is_not_configured(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m.yaml", {"servers": {}, "endpoints": {"a": {}}})
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "stdio", "--config", str(config), "--endpoint", "../a"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert b"--endpoint '../a' is not a configured endpoint (a)" in done.stderr


async def test_an_endpoint_limited_to_roles_is_not_found_for_anyone_else(tmp_path: Path) -> None:
    config = {
        "auth": {"api_keys": api_keys()},
        "servers": {"alpha": fixture_server("alpha", tools=1)},
        "endpoints": {"staff": {"roles": ["staff"]}},
    }
    async with running_manifold(tmp_path, config) as manifold, aiohttp.ClientSession() as http:
        url = at(manifold, "staff")
        for stateless_request in (False, True):
            headers = {
                **bearer("carl"),
                **({"MCP-Protocol-Version": "2026-07-28"} if stateless_request else {}),
            }
            status, _, _ = await post(http, url, _list(1), headers)
            assert status == 404
        async with connect(url, "sam") as sam:
            assert "alpha.echo" in {tool.name for tool in (await sam.list_tools()).tools}
        async with connect(manifold.url, "carl") as carl:  # the whole catalog is still carl's
            assert "alpha.echo" in {tool.name for tool in (await carl.list_tools()).tools}
