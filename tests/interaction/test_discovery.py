"""End to end: progressive discovery in a real ``manifold serve``, driven by the official SDK client
in both protocol revisions (2025-11-25 sessions and 2026-07-28 stateless).

Behind Manifold: the npm filesystem server (``fs``, over a scratch directory) and the SDK fixture
server (``alpha``). ``sam`` may use everything; ``rita`` only the read and list tools of ``fs``
and ``alpha``'s ``echo`` and ``add``: ``fs.write_file`` and the rest are hidden from her. The
attacks: finding, describing or calling a hidden tool through the meta-tools; getting around the
policy, the argument validation, the rate limit or the audit by calling through ``call_tool``;
hostile queries.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import jsonschema
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from proxy.protocol import versions
from tests.interaction.harness import (
    NPM_BIN,
    RunningManifold,
    fixture_server,
    names_the_limit,
    post,
    raw_session,
    running_manifold,
)
from tests.interaction.test_policy import KEYS, ListChanged, audited, bearer, connect, stored, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
ERAS = ["legacy", V]  # the SDK client's modes: a handshake session, and stateless 2026-07-28
SEARCH, DESCRIBE, CALL = "manifold.search_tools", "manifold.describe_tools", "manifold.call_tool"
META = [SEARCH, DESCRIBE, CALL]
POLICY = """\
version: 1
default: deny
rules:
  - id: staff-everything
    effect: allow
    match: {roles: [staff]}
  - id: rita-reads
    effect: allow
    match: {identities: [rita], tools: ["fs.read_*", "fs.list_*", "alpha.echo", "alpha.add"]}
limits:
  - id: add-budget
    rate: 1/hour
    burst: 2
    per: [identity]
    match: {tools: ["alpha.add"]}
"""


def api_keys() -> list[dict[str, Any]]:
    return [{"name": name, "key": stored(key), "roles": roles} for name, (key, roles) in KEYS.items()]


def gateway(directory: Path, discovery: dict[str, Any]) -> dict[str, Any]:
    (directory / "policy.yaml").write_text(POLICY)
    files = directory / "files"
    files.mkdir()
    (files / "hello.txt").write_text("hello from the scratch directory\n")
    return {
        "auth": {"api_keys": api_keys()},
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "discovery": discovery,
        "servers": {
            "fs": {"command": str(NPM_BIN / "mcp-server-filesystem"), "args": [str(files)]},
            "alpha": fixture_server("alpha", tools=4, page_size=5),
        },
    }


async def both_servers_listed(url: str) -> None:
    """Wait (bounded, on list_changed) until both servers' tools are in the catalog: on a loaded
    machine a server may still be (re)starting when /healthz first answers."""
    changed = ListChanged()
    with anyio.fail_after(60):
        async with connect(url, "sam", mode="legacy", message_handler=changed) as client:
            while True:
                told = changed.expect()
                if {"fs.write_file", "alpha.echo"} <= set(await found(client, "write file echo")):
                    return
                await told.wait()


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("discovery")
    async with running_manifold(
        tmp_path, gateway(tmp_path, {"mode": "search", "max_query_chars": 500})
    ) as running:
        await both_servers_listed(running.url)
        yield running


def options(era: str) -> dict[str, Any]:
    return {"mode": era, "cache": None} if era == V else {"mode": era}


async def meta(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    """A meta-tool's answer, decoded (it answers JSON text)."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


async def found(client: Client, query: str, limit: int = 20) -> list[str]:
    return [tool["name"] for tool in (await meta(client, SEARCH, {"query": query, "limit": limit}))["tools"]]


async def listed_names(client: Client) -> list[str]:
    page = await client.list_tools(cache_mode="bypass")
    assert page.next_cursor is None
    return [tool.name for tool in page.tools]


# ---- search, describe, call -------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_the_list_is_the_three_meta_tools_and_search_finds_a_tool_that_call_tool_calls(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, "sam", **options(era)) as client:
        assert await listed_names(client) == META
        if era != V:  # a 2026-07-28 client reads them in server/discover (below)
            assert f"use {SEARCH} to find the tools for a task" in (client.instructions or "")
        hits = await found(client, "read the text of a file", limit=5)
        assert hits[0] == "fs.read_text_file"
        [described] = (await meta(client, DESCRIBE, {"names": ["fs.read_text_file"]}))["tools"]
        assert described["name"] == "fs.read_text_file"
        assert "path" in described["inputSchema"]["properties"]
        path = str(Path(manifold.log_path.parent / "files" / "hello.txt"))
        result = await client.call_tool(CALL, {"name": "fs.read_text_file", "arguments": {"path": path}})
        assert not result.is_error
        assert text_of(result) == "hello from the scratch directory\n"
        echoed = await client.call_tool(CALL, {"name": "alpha.echo", "arguments": {"era": era}})
        assert json.loads(text_of(echoed)) == {"server": "alpha", "tool": "echo", "arguments": {"era": era}}


@pytest.mark.parametrize("era", ERAS)
async def test_a_direct_call_of_a_tool_found_by_search_still_works(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, "rita", **options(era)) as client:
        assert "alpha.echo" in await found(client, "echo")
        echoed = await client.call_tool("alpha.echo", {"n": 1})
        assert json.loads(text_of(echoed))["arguments"] == {"n": 1}


async def test_server_discover_tells_the_model_how_to_find_tools(manifold: RunningManifold) -> None:
    async with connect(manifold.url, "sam", mode="auto", cache=None) as client:
        assert client.protocol_version == V
        discovered = client.session.discover_result
        assert discovered is not None
        assert f"use {SEARCH} to find the tools for a task" in (discovered.instructions or "")


# ---- the policy: a hidden tool answers as a missing one, in each meta-tool ---------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_hidden_tool_never_appears_in_search_results(manifold: RunningManifold, era: str) -> None:
    async with connect(manifold.url, "rita", **options(era)) as client:
        hidden = {"fs.write_file", "fs.edit_file", "fs.move_file", "fs.create_directory", "alpha.tool_000"}
        for query in [
            "write a file",
            "write_file",
            "fs.write_file",
            "edit file",
            "move rename file",
            "create directory",
            "tool 000",
            "numbered tool",
            "file",
        ]:
            assert not hidden & set(await found(client, query)), query
        everything = set()
        for query in ["file", "directory", "read list", "echo add", "tool", "write edit move create"]:
            everything |= set(await found(client, query))
        assert everything <= {
            "fs.read_text_file",
            "fs.read_file",
            "fs.read_media_file",
            "fs.read_multiple_files",
            "fs.list_directory",
            "fs.list_directory_with_sizes",
            "fs.list_allowed_directories",
            "alpha.echo",
            "alpha.add",
        }
    async with connect(manifold.url, "sam", **options(era)) as staff:
        assert (await found(staff, "write a file"))[0] == "fs.write_file"  # it exists, for others


@pytest.mark.parametrize("era", ERAS)
async def test_describe_and_call_tool_answer_a_hidden_tool_exactly_as_a_missing_one(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, "rita", **options(era)) as client:
        described = await meta(
            client, DESCRIBE, {"names": ["fs.write_file", "fs.no_such_tool", "alpha.echo"]}
        )
        assert [tool["name"] for tool in described["tools"]] == ["alpha.echo"]
        assert described["unknown"] == ["fs.write_file", "fs.no_such_tool"]
        errors = {}
        for name in ["fs.write_file", "fs.no_such_tool"]:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(CALL, {"name": name, "arguments": {"path": "x", "content": "y"}})
            errors[name] = (caught.value.error.code, caught.value.error.message.replace(name, "NAME"))
            with pytest.raises(MCPError) as direct:
                await client.call_tool(name, {"path": "x", "content": "y"})
            assert (direct.value.error.code, direct.value.error.message.replace(name, "NAME")) == errors[name]
        assert errors["fs.write_file"] == errors["fs.no_such_tool"] == (-32602, "unknown tool: NAME")


# ---- call_tool is a direct call: validation, rate limits, audit --------------------------------------


async def test_call_tool_is_validated_rate_limited_and_audited_under_the_real_tool(
    manifold: RunningManifold,
) -> None:
    audit_path = manifold.log_path.parent / "audit.jsonl"
    async with connect(manifold.url, "rita", mode="legacy") as client:
        bad = await client.call_tool(CALL, {"name": "alpha.add", "arguments": {"a": "one", "b": 2}})
        assert bad.is_error
        assert (bad.meta or {}).get("dev.manifold/outcome") == "invalid_arguments"
        outcomes = []
        for _ in range(3):
            added = await client.call_tool(CALL, {"name": "alpha.add", "arguments": {"a": 1, "b": 2}})
            outcomes.append((added.is_error, (added.meta or {}).get("dev.manifold/outcome")))
        assert outcomes == [(False, None), (False, None), (True, "rate_limited")]
        await client.call_tool(CALL, {"name": "alpha.echo", "arguments": {"audited": True}})
    records = await audited(
        audit_path, 1, where=lambda r: (r["identity"], r["name"]) == ("rita", "alpha.echo")
    )
    echoes = [r for r in records if (r["identity"], r["name"]) == ("rita", "alpha.echo")]
    assert [(r["method"], r["server"], r["outcome"]) for r in echoes][-1] == ("tools/call", "alpha", "ok")
    assert not [r for r in records if r["name"].startswith("manifold.")]


@pytest.mark.parametrize("era", ERAS)
async def test_call_tool_cannot_call_a_meta_tool_or_take_arguments_that_are_not_an_object(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, "sam", **options(era)) as client:
        with pytest.raises(MCPError) as nested:
            await client.call_tool(CALL, {"name": CALL, "arguments": {"name": "alpha.echo"}})
        assert (nested.value.error.code, nested.value.error.message) == (-32602, f"unknown tool: {CALL}")
        with pytest.raises(MCPError) as not_object:
            await client.call_tool(CALL, {"name": "alpha.echo", "arguments": [1, 2]})
        assert not_object.value.error.code == -32602
        missing = await client.call_tool(CALL, {"arguments": {}})
        assert missing.is_error
        assert 'call_tool needs a string "name"' in text_of(missing)


# ---- hostile queries ----------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_hostile_queries_answer_cleanly(manifold: RunningManifold, era: str) -> None:
    async with connect(manifold.url, "sam", **options(era)) as client:
        for query in [
            "",
            "   ",
            "(a+)+$",
            ".*",
            "[",
            "\\",
            "%s%n",
            "'; DROP TABLE tools; --",
            "日本語のファイル",
            "🙂" * 100,
            "\u0000\u202e",
        ]:
            result = await meta(client, SEARCH, {"query": query})
            assert isinstance(result["tools"], list), query
        assert "fs.read_text_file" in await found(client, "READ   text\tFILE!!!")
        refusals: list[tuple[dict[str, Any], str]] = [
            ({"query": "x" * 501}, "discovery.max_query_chars"),
            ({"query": 5}, 'search_tools needs a string "query"'),
            ({}, 'search_tools needs a string "query"'),
            ({"query": "file", "limit": 0}, '"limit" must be an integer from 1 to 20'),
            ({"query": "file", "limit": 10**9}, '"limit" must be an integer from 1 to 20'),
            ({"query": "file", "limit": True}, '"limit" must be an integer from 1 to 20'),
        ]
        for arguments, problem in refusals:
            refused = await client.call_tool(SEARCH, arguments)
            assert refused.is_error, arguments
            assert problem in text_of(refused)
        for names in [[], ["x"] * 21, "fs.read_file", [1]]:
            refused = await client.call_tool(DESCRIBE, {"names": names})
            assert refused.is_error
            assert "describe_tools needs" in text_of(refused)


async def test_a_ten_megabyte_query_is_refused_by_the_request_size_limit(manifold: RunningManifold) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": SEARCH, "arguments": {"query": "file " * (2 * 1024 * 1024)}},
    }
    async with aiohttp.ClientSession() as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "0"},
            },
        }
        _, headers, _ = await post(http, manifold.url, init, bearer("sam"))
        session = {
            **bearer("sam"),
            "Mcp-Session-Id": headers["mcp-session-id"],
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        body = io.BytesIO(orjson.dumps(call))  # a stream: aiohttp warns of big bytes bodies
        async with http.post(manifold.url, data=body, headers=session) as response:
            status, answer = response.status, await response.text()
    assert status == 413
    assert names_the_limit(answer, "max_request_bytes")
    async with connect(manifold.url, "sam", mode="legacy") as client:  # and Manifold is fine
        assert "fs.read_text_file" in await found(client, "read text file")


# ---- promote mode -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def promoting(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("promote")
    settings = {"mode": "promote", "max_promoted": 3}
    async with running_manifold(tmp_path, gateway(tmp_path, settings)) as running:
        await both_servers_listed(running.url)
        yield running


async def test_promote_mode_adds_what_a_search_found_to_that_session_s_list_and_says_so(
    promoting: RunningManifold,
) -> None:
    changed = ListChanged()
    async with (
        connect(promoting.url, "rita", mode="legacy", message_handler=changed) as client,
        connect(promoting.url, "rita", mode="legacy") as other,
    ):
        assert await listed_names(client) == META
        told = changed.expect()
        assert await found(client, "echo", limit=1) == ["alpha.echo"]
        with anyio.fail_after(10):
            await told.wait()
        assert await listed_names(client) == [*META, "alpha.echo"]
        echoed = await client.call_tool("alpha.echo", {"promoted": True})
        assert json.loads(text_of(echoed))["arguments"] == {"promoted": True}
        assert await listed_names(other) == META  # another session's list is its own

        # Bounded: at most max_promoted (3), the oldest dropped first.
        await found(client, "read text file", limit=2)
        await found(client, "list directory", limit=1)
        promoted = (await listed_names(client))[len(META) :]
        assert len(promoted) == 3
        assert "alpha.echo" not in promoted
        assert promoted[-1] == (await found(client, "list directory", limit=1))[0]


async def test_promote_mode_never_promotes_a_hidden_tool_and_a_stateless_caller_sees_the_meta_tools(
    promoting: RunningManifold,
) -> None:
    async with connect(promoting.url, "rita", mode="legacy") as client:
        assert await found(client, "write a file") != []
        assert "fs.write_file" not in await listed_names(client)
    async with connect(promoting.url, "sam", **options(V)) as stateless:
        assert (await found(stateless, "write a file", limit=1)) == ["fs.write_file"]
        assert await listed_names(stateless) == META


@pytest.mark.slow
@pytest.mark.parametrize("era", ERAS)
async def test_search_and_describe_answer_structured_content_that_validates_against_their_output_schemas(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, "sam", **options(era)) as client:
        listed = {tool.name: tool for tool in (await client.list_tools(cache_mode="bypass")).tools}
        schemas: dict[str, dict[str, Any]] = {}
        for name in (SEARCH, DESCRIBE):
            schema = listed[name].output_schema
            assert schema is not None
            assert schema["type"] == "object"
            schemas[name] = schema
        # The SDK client checks structuredContent against the listed outputSchema itself; and so do we.
        searched = await client.call_tool(SEARCH, {"query": "read the text of a file", "limit": 5})
        assert not searched.is_error, text_of(searched)
        jsonschema.validate(searched.structured_content, schemas[SEARCH])
        assert json.loads(text_of(searched)) == searched.structured_content  # the same JSON as text
        first = searched.structured_content["tools"][0]
        assert first["name"] == "fs.read_text_file"
        assert first["score"] > 0
        assert {"name", "description"} <= set(first["matched"])
        described = await client.call_tool(DESCRIBE, {"names": ["fs.list_directory", "fs.nope"]})
        assert not described.is_error, text_of(described)
        jsonschema.validate(described.structured_content, schemas[DESCRIBE])
        assert described.structured_content["tools"][0]["inputSchema"]["properties"]["path"]
        assert described.structured_content["unknown"] == ["fs.nope"]


@pytest.mark.slow
@pytest.mark.parametrize("era", ERAS)
async def test_a_task_in_other_words_than_the_tools_finds_it_by_meaning(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, "sam", **options(era)) as client:
        result = await meta(client, SEARCH, {"query": "what is in notes.txt", "limit": 3})
        top = result["tools"][0]
        assert top["name"] in {"fs.read_text_file", "fs.read_file"}
        assert top["matched"] == ["meaning"]  # no word in common with its definition: found by meaning


@pytest.mark.slow
async def test_a_ten_thousand_tool_catalog_is_searched_while_other_requests_are_answered(
    tmp_path: Path,
) -> None:
    """The index of 10,000 tools (words and vectors) is built in a worker thread on the first
    search: meanwhile the event loop answers another client's pings."""
    config = {
        "discovery": {"mode": "search"},
        "catalog": {"page_size": 1000},
        "servers": {"big": fixture_server("big", tools=10_000, page_size=1000)},
    }
    async with running_manifold(tmp_path, config) as running, aiohttp.ClientSession() as http:
        session = {"Mcp-Session-Id": await raw_session(http, running.url)}
        search = {"name": SEARCH, "arguments": {"query": "numbered tool 9999", "limit": 3}}
        answered: list[Any] = []
        waits: list[float] = []

        async def searching() -> None:
            message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": search}
            status, _, body = await post(http, running.url, message, session)
            assert status == 200, body
            answered.append(body["result"])

        async def pinging() -> None:
            while not answered:
                started = anyio.current_time()
                status, _, _ = await post(
                    http, running.url, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session
                )
                assert status == 200
                waits.append(anyio.current_time() - started)
                await anyio.sleep(0.01)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(searching)
                tg.start_soon(pinging)
        found = answered[0]["structuredContent"]["tools"]
        assert found[0]["name"] == "big.tool_9999"
        assert waits, "the search answered before a ping was sent"
        assert max(waits) < 1.0, waits  # the build did not hold the event loop
