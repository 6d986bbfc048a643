"""End to end: progressive discovery per endpoint (issue #18), with the official SDK client in both
protocol revisions (2025-11-25 sessions, 2026-07-28 stateless), against a real ``manifold serve``.

Behind it: the SDK fixture server twice (``alpha``, ``beta``; ``beta`` also lists a tool whose name
is too long for a 64-character profile). Over the same servers:

- ``/mcp/find`` switches discovery on for itself: it shows ``*.echo``, ``*.add`` and beta's long
  tool, named with ``__`` in at most 64 characters, and lists only the meta-tools;
- ``/mcp/plain`` (``alpha`` only) switches it off for itself: it lists its tools;
- the plain ``/mcp`` has the top-level ``discovery`` (on): the meta-tools, named with ``.``, over
  the whole catalog.

The policy denies ``alpha.add`` to everyone. The attacks: finding, describing or calling through
the meta-tools a tool the endpoint does not select (in its spelling, in another profile's, in the
whole catalog's), a tool the policy hides, or a meta-tool on an endpoint without discovery.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from proxy.protocol import versions
from tests.interaction.harness import REPO, RunningManifold, fixture_server, running_manifold, write_config
from tests.interaction.test_policy import ListChanged, connect, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
ERAS = ["legacy", V]
LONG = "create_or_update_a_pull_request_review_comment_with_suggestions"  # 62 characters
SEARCH, DESCRIBE, CALL = "manifold__search_tools", "manifold__describe_tools", "manifold__call_tool"
META = [SEARCH, DESCRIBE, CALL]
HIDE_ADD = """\
version: 1
default: allow
rules:
  - id: no-alpha-add
    effect: deny
    match: {tools: ["alpha.add"]}
"""
FIND = {
    "tools": ["*.echo", "*.add", f"beta.{LONG}"],
    "naming": {"separator": "__", "max_length": 64},
    "discovery": {"mode": "search"},
}


def servers() -> dict[str, Any]:
    beta = fixture_server("beta", tools=2)
    return {
        "alpha": fixture_server("alpha", tools=2),
        "beta": {**beta, "args": [*beta["args"], "--extra-tool", LONG]},
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("endpoint-discovery")
    (tmp_path / "policy.yaml").write_text(HIDE_ADD)
    config = {
        "policy": {"files": ["policy.yaml"]},
        "servers": servers(),
        "discovery": {"mode": "search"},
        "endpoints": {"find": FIND, "plain": {"servers": ["alpha"], "discovery": {"mode": "off"}}},
    }
    async with running_manifold(tmp_path, config) as running:
        yield running


def at(manifold: RunningManifold, endpoint: str) -> str:
    return f"{manifold.url}/{endpoint}" if endpoint else manifold.url


def options(era: str) -> dict[str, Any]:
    return {"mode": era, "cache": None} if era == V else {"mode": era}


async def listed_names(client: Client) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return names


async def meta(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


async def found(client: Client, query: str) -> list[str]:
    return [tool["name"] for tool in (await meta(client, SEARCH, {"query": query, "limit": 20}))["tools"]]


async def unknown(client: Client, name: str, arguments: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(MCPError) as caught:
        await client.call_tool(name, arguments)
    return caught.value.error.code, caught.value.error.message


@pytest.mark.parametrize("era", ERAS)
async def test_each_endpoint_lists_the_meta_tools_or_its_tools_as_its_own_discovery_says(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(at(manifold, "find"), **options(era)) as find:
        assert await listed_names(find) == META  # in its profile: no dots
        if era != V:
            assert f"use {SEARCH} to find the tools for a task" in (find.instructions or "")
    async with connect(at(manifold, "plain"), **options(era)) as plain:
        names = await listed_names(plain)
        assert {"alpha.echo", "alpha.tool_000"} <= set(names)
        assert not [name for name in names if name.startswith("manifold")]
        assert "manifold" not in (plain.instructions or "")
    async with connect(manifold.url, **options(era)) as whole:
        assert await listed_names(whole) == [name.replace("__", ".") for name in META]
        hits = await meta(whole, "manifold.search_tools", {"query": "numbered tool", "limit": 20})
        assert {"alpha.tool_000", "beta.tool_001"} <= {tool["name"] for tool in hits["tools"]}


@pytest.mark.parametrize("era", ERAS)
async def test_search_finds_only_the_endpoints_tools_in_its_profile_and_call_tool_routes_them_back(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(at(manifold, "find"), **options(era)) as client:
        everything: set[str] = set()
        for query in ["echo", "add", "numbered tool", "pull request review comment", "tool", "a b"]:
            everything |= set(await found(client, query))
        (long_name,) = [name for name in everything if name.startswith("beta__create")]
        assert len(long_name) == 64  # shortened in this profile: a head, "-" and a hash
        # alpha.add is hidden by the policy; the numbered tools are outside the selection.
        assert everything == {"alpha__echo", "beta__echo", "beta__add", long_name}
        described = await meta(client, DESCRIBE, {"names": [long_name, "beta__add"]})
        assert [tool["name"] for tool in described["tools"]] == [long_name, "beta__add"]
        assert text_of(await client.call_tool(CALL, {"name": long_name, "arguments": {}})) == f"beta:{LONG}"
        for server in ("alpha", "beta"):
            called = await client.call_tool(CALL, {"name": f"{server}__echo", "arguments": {"era": era}})
            assert json.loads(text_of(called)) == {
                "server": server,
                "tool": "echo",
                "arguments": {"era": era},
            }
        added = await client.call_tool(CALL, {"name": "beta__add", "arguments": {"a": 1, "b": 2}})
        assert not added.is_error


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_outside_the_endpoints_selection_or_hidden_answers_as_a_missing_one(
    manifold: RunningManifold, era: str
) -> None:
    outside = [
        "alpha__tool_000",  # not selected, in this endpoint's spelling
        "alpha.tool_000",  # … in the whole catalog's
        "alpha.echo",  # selected, but another profile's spelling
        f"beta.{LONG}",
        "manifold.search_tools",  # the whole catalog's meta-tool names are not this endpoint's
    ]
    hidden = ["alpha__add", "alpha.add"]
    async with connect(at(manifold, "find"), **options(era)) as client:
        for query in ["numbered tool 000", "tool_000", "alpha add", "a + b", "add"]:
            assert not {"alpha__tool_000", "alpha__tool_001", "alpha__add"} & set(await found(client, query))
        described = await meta(client, DESCRIBE, {"names": [*outside, *hidden, "alpha__nope"]})
        assert described == {"tools": [], "unknown": [*outside, *hidden, "alpha__nope"]}
        for name in [*outside, *hidden, "alpha__nope"]:
            via_meta = await unknown(client, CALL, {"name": name, "arguments": {"a": 1, "b": 2}})
            assert via_meta == (-32602, f"unknown tool: {name}")
            assert await unknown(client, name, {"a": 1, "b": 2}) == via_meta  # and called directly
    async with connect(at(manifold, "plain"), **options(era)) as plain:  # it exists, elsewhere
        assert not (await plain.call_tool("alpha.tool_000", {"x": 1})).is_error


@pytest.mark.parametrize("era", ERAS)
async def test_an_endpoint_without_discovery_has_no_meta_tools_to_call(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(at(manifold, "plain"), **options(era)) as client:
        for name in [SEARCH, "manifold.search_tools", "manifold.call_tool"]:
            arguments = {"query": "echo", "name": "alpha.echo", "arguments": {}}
            assert await unknown(client, name, arguments) == (-32602, f"unknown tool: {name}")


async def test_meta_tool_calls_are_counted_by_endpoint_tool_and_outcome(manifold: RunningManifold) -> None:
    async with connect(at(manifold, "find"), mode="legacy") as client:
        await found(client, "echo")
        await found(client, "zzzz qqqq")
        assert (await client.call_tool(SEARCH, {"query": 5})).is_error
        await client.call_tool(CALL, {"name": "beta__echo", "arguments": {}})
    async with (
        aiohttp.ClientSession() as http,
        http.get(manifold.url.replace("/mcp", "/metrics")) as response,
    ):
        metrics = await response.text()
    for tool, outcome in [
        ("search_tools", "ok"),
        ("search_tools", "no_results"),
        ("search_tools", "invalid_arguments"),
        ("call_tool", "ok"),
    ]:
        assert (
            f'manifold_discovery_calls_total{{endpoint="find",outcome="{outcome}",tool="{tool}"}}' in metrics
        )
    assert 'manifold_endpoint_tool_calls_total{endpoint="find",outcome="ok"}' in metrics  # the call itself


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_stdio_honours_the_discovery_of_the_endpoint_its_flag_names(tmp_path: Path, era: str) -> None:
    (tmp_path / "policy.yaml").write_text(HIDE_ADD)
    config = write_config(
        tmp_path / "m.yaml",
        {
            "policy": {"files": [str(tmp_path / "policy.yaml")]},
            "servers": servers(),
            "endpoints": {"find": FIND},
        },
    )
    args = ["-m", "proxy.cli", "stdio", "--config", str(config), "--endpoint", "find"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))
    with anyio.fail_after(60):
        async with Client(params, mode=era) as client:
            assert [tool.name for tool in (await client.list_tools()).tools] == META
            hits = set(await found(client, "echo add"))
            assert {"alpha__echo", "beta__echo", "beta__add"} <= hits
            assert all(
                name.startswith("beta__create") for name in hits - {"alpha__echo", "beta__echo", "beta__add"}
            )
            called = await client.call_tool(CALL, {"name": "beta__echo", "arguments": {"k": 1}})
            assert json.loads(text_of(called)) == {"server": "beta", "tool": "echo", "arguments": {"k": 1}}
            assert await unknown(client, CALL, {"name": "alpha__add", "arguments": {}}) == (
                -32602,
                "unknown tool: alpha__add",
            )


@pytest.mark.parametrize("era", ERAS)
async def test_with_a_per_client_server_an_endpoint_still_shows_and_calls_only_its_selection(
    tmp_path: Path, era: str
) -> None:
    # A client's own catalog (made once its per_client connection lists) is of the whole
    # catalog; an endpoint that used it would show, find and call what it leaves out.
    config = {
        "servers": {
            "alpha": fixture_server("alpha", tools=1),
            "beta": {**fixture_server("beta", tools=1), "session_mode": "per_client"},
        },
        "endpoints": {
            "find": {"tools": ["*.echo"], "naming": {"separator": "__"}, "discovery": {"mode": "search"}},
            "list": {"tools": ["beta.echo"]},
        },
    }
    async with running_manifold(tmp_path, config) as running:
        async with connect(at(running, "find"), **options(era)) as client:
            assert await listed_names(client) == META
            assert set(await found(client, "echo numbered tool add")) == {"alpha__echo", "beta__echo"}
            called = await client.call_tool(CALL, {"name": "beta__echo", "arguments": {"n": 1}})
            assert json.loads(text_of(called))["server"] == "beta"
            for name in ["alpha.tool_000", "beta.tool_000", "beta__tool_000", "beta.echo"]:
                assert await unknown(client, CALL, {"name": name, "arguments": {}}) == (
                    -32602,
                    f"unknown tool: {name}",
                )
            assert set(await found(client, "echo numbered tool add")) == {"alpha__echo", "beta__echo"}
        async with connect(at(running, "list"), **options(era)) as client:
            assert await listed_names(client) == ["beta.echo"]
            assert json.loads(text_of(await client.call_tool("beta.echo", {})))["server"] == "beta"
            assert await listed_names(client) == ["beta.echo"]  # after its own connection listed
            for name in ["beta.tool_000", "alpha.echo"]:
                assert await unknown(client, name, {}) == (-32602, f"unknown tool: {name}")


async def test_promote_mode_promotes_into_that_endpoint_s_session_in_its_spelling_only(
    tmp_path: Path,
) -> None:
    config = {
        "servers": servers(),
        "discovery": {"mode": "promote"},  # /mcp's
        "endpoints": {"find": {**FIND, "discovery": {"mode": "promote"}}},
    }
    async with running_manifold(tmp_path, config) as running:
        changed = ListChanged()
        async with (
            connect(at(running, "find"), mode="legacy", message_handler=changed) as client,
            connect(running.url, mode="legacy") as whole,
        ):
            told = changed.expect()
            assert await found(client, "echo") == ["alpha__echo", "beta__echo"]
            with anyio.fail_after(10):
                await told.wait()
            assert await listed_names(client) == [*META, "alpha__echo", "beta__echo"]
            echoed = await client.call_tool("beta__echo", {"promoted": True})
            assert json.loads(text_of(echoed))["server"] == "beta"
            await found(client, "numbered tool")  # outside the selection: nothing to promote
            assert await listed_names(client) == [*META, "alpha__echo", "beta__echo"]
            # /mcp's sessions promote into their own lists, in its spelling, and not into find's.
            dotted = [name.replace("__", ".") for name in META]
            assert await listed_names(whole) == dotted
            hits = await meta(whole, "manifold.search_tools", {"query": "numbered tool", "limit": 2})
            # The numbered tools differ only by their number: which of the two comes first is a tie.
            assert sorted(tool["name"] for tool in hits["tools"]) == ["alpha.tool_000", "alpha.tool_001"]
            listed = await listed_names(whole)
            assert listed[: len(dotted)] == dotted
            assert sorted(listed[len(dotted) :]) == ["alpha.tool_000", "alpha.tool_001"]
            assert await listed_names(client) == [*META, "alpha__echo", "beta__echo"]
