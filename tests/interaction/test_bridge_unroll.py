"""End to end, a handshake-era client ↔ ``manifold serve`` ↔ a 2026-07-28 server.

The server (tests/conformance_modern/fixture_server.py, dual-era, over stdio) is reached with
``server/discover``, so Manifold speaks 2026-07-28 to it: it never sends requests, it answers
``input_required``. The client is the official SDK in ``mode="legacy"``: it knows nothing of
that, and is asked each question as a real request (its callbacks), while Manifold retries
downstream with the answers; its log level and subscriptions become per-request ``logLevel`` and
a listen stream downstream; what only 2026-07-28 defines never reaches it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
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
    ListRootsResult,
    LoggingMessageNotificationParams,
    Root,
    TextContent,
)
from pydantic import FileUrl

from tests.interaction.harness import REPO, RunningManifold, post, raw_session, running_manifold
from tests.protocol.schemas import validator

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    fixture = {
        "command": sys.executable,
        "args": ["-m", "tests.conformance_modern.fixture_server", "--era", "dual", "--transport", "stdio"],
        "cwd": str(REPO),
        "prefix": "",
    }
    async with running_manifold(tmp_path_factory.mktemp("unroll"), {"servers": {"fx": fixture}}) as running:
        yield running


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


class Asked:
    """Callbacks that answer like a person would, and remember what they were asked."""

    def __init__(self) -> None:
        self.elicited: list[str] = []
        self.sampled: list[str] = []
        self.roots = 0

    async def elicit(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.elicited.append(params.message)
        if "color" in params.message:
            return ElicitResult(action="accept", content={"color": "teal"})
        return ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult:
        asked = params.messages[0].content
        assert isinstance(asked, TextContent)
        self.sampled.append(asked.text)
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="Paris"), model="m"
        )

    async def list_roots(self, context: ClientRequestContext) -> ListRootsResult:
        self.roots += 1
        return ListRootsResult(roots=[Root(uri=FileUrl("file:///srv/project"))])

    def client(self, url: str, **options: Any) -> Client:
        return Client(
            url,
            mode="legacy",
            elicitation_callback=self.elicit,
            sampling_callback=self.sample,
            list_roots_callback=self.list_roots,
            **options,
        )


async def test_each_round_of_input_required_becomes_real_requests_to_the_client(
    manifold: RunningManifold,
) -> None:
    asked = Asked()
    async with asked.client(manifold.url) as client:
        result = await client.call_tool("test_input_required_result_multi_round", {})
        assert not result.is_error
        assert asked.elicited == ["Step 1: What is your name?", "Step 2: What is your favorite color?"]
        assert "Ada" in _text(result)
        assert "teal" in _text(result)

        sampled = await client.call_tool("test_input_required_result_sampling", {})
        assert _text(sampled) == "LLM response: Paris"
        assert asked.sampled == ["What is the capital of France?"]

        roots = await client.call_tool("test_input_required_result_list_roots", {})
        assert "file:///srv/project" in _text(roots)
        assert asked.roots == 1


async def test_one_round_asking_several_things_asks_each(manifold: RunningManifold) -> None:
    asked = Asked()
    async with asked.client(manifold.url) as client:
        result = await client.call_tool("test_input_required_result_multiple_inputs", {})
    assert not result.is_error
    assert (len(asked.elicited), len(asked.sampled), asked.roots) == (1, 1, 1)


async def test_a_prompt_that_needs_input_is_unrolled_too(manifold: RunningManifold) -> None:
    asked = Asked()
    async with asked.client(manifold.url) as client:
        prompt = await client.get_prompt("test_input_required_result_prompt")
    assert asked.elicited == ["What context should the prompt use?"]
    content = prompt.messages[0].content
    assert isinstance(content, TextContent)
    assert "Ada" not in content.text  # the answer was {"name": "Ada"}: no "context" key
    assert content.text.startswith("Use this context")


async def test_a_client_without_the_capability_is_not_asked_and_the_call_fails(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode="legacy") as client:
        with pytest.raises(MCPError, match="did not declare the capability elicitation/create needs"):
            await client.call_tool("test_input_required_result_elicitation", {})


async def test_the_clients_log_level_becomes_the_per_request_log_level(manifold: RunningManifold) -> None:
    lines: list[LoggingMessageNotificationParams] = []
    three = anyio.Event()

    async def logged(params: LoggingMessageNotificationParams) -> None:
        lines.append(params)
        if len(lines) == 3:
            three.set()

    async with Client(manifold.url, mode="legacy", logging_callback=logged) as client:
        await client.call_tool("test_logging_tool", {})
        assert lines == []  # no level set: the server was told none, and logged nothing
        await client.set_logging_level("info")
        await client.call_tool("test_logging_tool", {})
        with anyio.fail_after(5):
            await three.wait()
    assert {line.level for line in lines} == {"info"}


async def test_a_tool_list_change_reaches_the_client_from_the_servers_listen_stream(
    manifold: RunningManifold,
) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(getattr(message, "root", message), "method", None) == "notifications/tools/list_changed":
            changed.set()

    async with Client(manifold.url, mode="legacy", message_handler=on_message) as client:
        before = {tool.name for tool in (await client.list_tools()).tools}
        await client.call_tool("test_trigger_tool_change", {})
        with anyio.fail_after(10):
            await changed.wait()
        after = {tool.name for tool in (await client.list_tools()).tools}
        await client.call_tool("test_trigger_tool_change", {})  # and back
    assert after ^ before == {"test_dynamic_tool"}


async def test_what_only_2026_07_28_defines_never_reaches_a_legacy_client(manifold: RunningManifold) -> None:
    result_schema = {
        "tools/list": validator("2025-11-25", "ListToolsResult"),
        "resources/read": validator("2025-11-25", "ReadResourceResult"),
    }
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        status, _, listed = await post(http, manifold.url, body, headers)
        assert status == 200
        result_schema["tools/list"](listed["result"])
        uri = "test://static-text"
        read = {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}}
        status, _, answered = await post(http, manifold.url, read, headers)
        assert status == 200, answered
    for result in (listed["result"], answered["result"]):
        assert not {"resultType", "ttlMs", "cacheScope"} & set(result), json.dumps(result)[:300]
        assert "io.modelcontextprotocol/serverInfo" not in (result.get("_meta") or {})
    result_schema["resources/read"](answered["result"])


async def test_a_handshake_clients_own_request_state_never_reaches_the_2026_server(
    manifold: RunningManifold,
) -> None:
    """The attack: a handshake-era client puts a ``requestState`` of its own making into its
    call, hoping the first unrolled round carries it to the server as the server's own (a state
    replayed from elsewhere, or a guess). Manifold refuses it as it refuses any state it did not
    seal; the server, which would have opened it, never sees it."""
    crafted = "eyJ0IjoidGVzdF9pbnB1dF9yZXF1aXJlZF9yZXN1bHRfcmVxdWVzdF9zdGF0ZSJ9.Zm9yZ2Vk"
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        params = {
            "name": "test_input_required_result_request_state",
            "arguments": {},
            "requestState": crafted,
        }
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        status, _, answered = await post(http, manifold.url, body, headers)
    assert status == 200
    error = answered["error"]
    assert error["code"] == -32602
    assert error["message"] == "Invalid or expired requestState"  # Manifold's answer ...
    assert error["data"] == {"reason": "invalid_request_state"}
    assert "integrity" not in json.dumps(answered)  # ... not the server's, which never saw it
