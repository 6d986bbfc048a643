"""End to end, issue #13: what one hostile peer sends lands on its own request, never on the
``manifold serve`` process that every other client and server shares.

Behind Manifold: ``hostile`` (tests/fixtures/hostile_server.py, a raw NDJSON server whose tools
misbehave on purpose) and ``notes`` (the well-behaved fixture server). Each attack is followed by
the same checks: the process is alive, and a session opened before the attack still calls
``notes``. orjson decodes 1024 levels of nesting but encodes only about 255, so a 300-deep message
is read fine and then breaks whatever tries to write it on.

The error texts matched here are loose on purpose (``nest``, ``deep`` or ``depth``): the fix names
the limit, but its exact words are its own.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import ListRootsResult, Root, TextContent
from pydantic import FileUrl

from tests.interaction.harness import (
    REPO,
    RunningManifold,
    fixture_server,
    post,
    raw_session,
    running_manifold,
    write_config,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

HOSTILE = str(REPO / "tests" / "fixtures" / "hostile_server.py")
DEPTH = 300
NAMES_THE_LIMIT = re.compile(r"nest|deep|depth", re.IGNORECASE)
# Long enough for any honest answer on a loaded 2-core box; far below the hostile server's
# request_timeout, so a call left waiting for it counts as a hang.
ANSWER_WITHIN = 20.0
ECHOED = {"server": "notes", "tool": "echo", "arguments": {"after": "attack"}}


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep: ``{"d": {"d": … {"d": "bottom"} …}}``."""
    value: Any = "bottom"
    for _ in range(depth - 1):
        value = {"d": value}
    return {"d": value}


def deep_json(value: Any) -> bytes:
    # orjson refuses to write this deep; the standard library does not.
    return json.dumps(value).encode()


def servers() -> dict[str, Any]:
    return {
        "hostile": {"command": sys.executable, "args": [HOSTILE], "era": "handshake", "request_timeout": 60},
        "notes": fixture_server("notes", tools=2),
    }


@pytest.fixture
async def manifold(tmp_path: Path) -> AsyncIterator[RunningManifold]:
    async with running_manifold(tmp_path, {"servers": servers()}) as running:
        yield running


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def assert_alive(manifold: RunningManifold) -> None:
    assert manifold.process.poll() is None, (
        f"manifold exited with {manifold.process.returncode}:\n{manifold.log()[-3000:]}"
    )


def server_errors(manifold: RunningManifold) -> list[str]:
    """Access-log lines of requests answered with a 5xx status."""
    lines = []
    for line in manifold.log().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("logger") == "manifold.access" and record.get("status", 0) >= 500:
            lines.append(line)
    return lines


HTTP_500 = "error -32603: Server returned an error response"  # what the SDK makes of an HTTP 500


async def outcome_of(call: Awaitable[Any], manifold: RunningManifold | None = None) -> str:
    """Run a tool call to its end: its result's text, or the JSON-RPC error it got, never a hang."""
    with anyio.move_on_after(ANSWER_WITHIN):
        try:
            result = await call
            return f"result{' (isError)' if result.is_error else ''}: {_text(result)}"
        except MCPError as exc:
            outcome = f"error {exc.error.code}: {exc.error.message}"
            assert outcome != HTTP_500, f"HTTP 500\n{manifold.log()[-3000:] if manifold else ''}"
            return outcome
    raise AssertionError(f"no answer within {ANSWER_WITHIN:g}s\n{manifold.log()[-3000:] if manifold else ''}")


async def assert_still_serving(manifold: RunningManifold, bystander: Client) -> None:
    """The process lives, and a session opened before the attack still reaches the other server."""
    assert_alive(manifold)
    echoed = await outcome_of(bystander.call_tool("notes.echo", {"after": "attack"}), manifold)
    assert json.loads(echoed.removeprefix("result: ")) == ECHOED
    assert_alive(manifold)
    assert server_errors(manifold) == []


async def test_a_server_progress_notification_too_deep_to_relay_harms_only_its_own_call(
    manifold: RunningManifold,
) -> None:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass  # asking for progress at all is what matters: the call then carries a progressToken

    async with (
        Client(manifold.url, mode="legacy") as bystander,
        Client(manifold.url, mode="legacy") as client,
    ):
        call = client.call_tool("hostile.deep_progress", {}, progress_callback=on_progress)
        outcome = await outcome_of(call, manifold)
        assert_alive(manifold)
        # Relayed whole it cannot be; dropped, or the call failed with a clear error.
        assert outcome.startswith(("result: progress sent", "error")), outcome
        await assert_still_serving(manifold, bystander)
        await assert_still_serving(manifold, client)


async def test_a_server_log_line_too_deep_to_relay_harms_nobody(manifold: RunningManifold) -> None:
    async with (
        Client(manifold.url, mode="legacy") as bystander,
        Client(manifold.url, mode="legacy") as client,
    ):
        # Both asked for log lines: a line about no request goes to every session that did.
        with anyio.fail_after(ANSWER_WITHIN):
            await bystander.set_logging_level("debug")
            await client.set_logging_level("debug")
        outcome = await outcome_of(client.call_tool("hostile.deep_log", {}), manifold)
        assert_alive(manifold)
        assert outcome.startswith(("result: log sent", "error")), outcome
        await assert_still_serving(manifold, bystander)
        await assert_still_serving(manifold, client)


async def test_two_roots_requests_under_one_id_harm_only_the_call_that_sent_them(
    manifold: RunningManifold,
) -> None:
    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl("file:///srv/project"))])

    async with (
        Client(manifold.url, mode="legacy") as bystander,
        Client(manifold.url, mode="legacy", list_roots_callback=roots) as client,
    ):
        outcome = await outcome_of(client.call_tool("hostile.ask_roots_twice_same_id", {}), manifold)
        assert_alive(manifold)
        # The server hears back once or twice (a gateway may refuse the second), or the call fails.
        assert outcome in ("result: 1 answers", "result: 2 answers") or outcome.startswith("error"), outcome
        await assert_still_serving(manifold, bystander)
        await assert_still_serving(manifold, client)


# ---- the roots answer, by hand: no SDK client sends a 300-deep result ------------------------


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, in order (priming events have no data)."""
    data: list[bytes] = []
    async for line in response.content:
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
        elif not line:
            payload, data = b"\n".join(data), []
            if payload:
                yield orjson.loads(payload)


async def test_a_client_answer_to_roots_too_deep_to_relay_harms_only_its_own_call(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode="legacy") as bystander, aiohttp.ClientSession() as http:
        status, headers, body = await post(
            http,
            manifold.url,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"roots": {}},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            },
        )
        assert status == 200, body
        session = {"Mcp-Session-Id": headers["mcp-session-id"]}
        status, _, _ = await post(
            http, manifold.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session
        )
        assert status == 202
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "hostile.ask_roots"}}
        answered: list[tuple[int, Any]] = []
        final: dict[str, Any] | None = None
        with anyio.fail_after(ANSWER_WITHIN):
            async with http.post(
                manifold.url,
                data=orjson.dumps(call),
                headers={
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                    **session,
                },
            ) as response:
                assert response.status == 200
                assert response.content_type == "text/event-stream"
                try:
                    async for message in _events(response):
                        if message.get("method") == "roots/list":
                            deep = {"roots": [], "_meta": nested(DEPTH)}
                            reply = {"jsonrpc": "2.0", "id": message["id"], "result": deep}
                            answered.append((await post(http, manifold.url, deep_json(reply), session))[::2])
                            if answered[-1][0] >= 400:
                                # Refused: answer again, sanely, as a client told of its mistake would.
                                sane = {**reply, "result": {"roots": [{"uri": "file:///srv/retry"}]}}
                                answered.append((await post(http, manifold.url, sane, session))[::2])
                        elif message.get("id") == 7:
                            final = message
                            break
                except aiohttp.ClientPayloadError as exc:
                    raise AssertionError(f"the call's stream broke: {exc}\n{manifold.log()[-3000:]}") from exc
        assert_alive(manifold)
        assert answered, "the server's roots/list never reached the client"
        deep_status, deep_body = answered[0]
        assert deep_status in (200, 202) or 400 <= deep_status < 500, answered
        if deep_status >= 400:
            assert NAMES_THE_LIMIT.search(deep_body["error"]["message"]), deep_body
        assert final is not None, f"the call's stream ended without its answer\n{manifold.log()[-3000:]}"
        assert "result" in final or "error" in final, final
        await assert_still_serving(manifold, bystander)


# ---- deep input and a deep result over raw HTTP: a clear error, never a 500 or a traceback ------


def assert_names_the_limit(status: int, body: Any, manifold: RunningManifold) -> None:
    """A 4xx (or 200) carrying a JSON-RPC error that says the input is nested too deeply."""
    assert 400 <= status < 500 or status == 200, (status, body, manifold.log()[-3000:])
    assert body is not None, status
    assert "error" in body, (status, body)
    assert NAMES_THE_LIMIT.search(body["error"]["message"]), body


async def test_an_initialize_nested_too_deep_gets_an_error_naming_the_limit(
    manifold: RunningManifold,
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"experimental": nested(DEPTH)},
            "clientInfo": {"name": "deep", "version": "0"},
        },
    }
    async with Client(manifold.url, mode="legacy") as bystander, aiohttp.ClientSession() as http:
        with anyio.fail_after(ANSWER_WITHIN):
            status, _, body = await post(http, manifold.url, deep_json(initialize))
        assert_names_the_limit(status, body, manifold)
        await assert_still_serving(manifold, bystander)
    assert "Traceback" not in manifold.log()


async def test_tool_arguments_nested_too_deep_get_an_error_naming_the_limit(
    manifold: RunningManifold,
) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "notes.echo", "arguments": nested(DEPTH)},
    }
    async with Client(manifold.url, mode="legacy") as bystander, aiohttp.ClientSession() as http:
        session = {"Mcp-Session-Id": await raw_session(http, manifold.url)}
        with anyio.fail_after(ANSWER_WITHIN):
            status, _, body = await post(http, manifold.url, deep_json(call), session)
        assert_names_the_limit(status, body, manifold)
        await assert_still_serving(manifold, bystander)
    assert "Traceback" not in manifold.log()


async def test_a_tool_result_too_deep_to_relay_over_http_fails_only_its_call(
    manifold: RunningManifold,
) -> None:
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "hostile.deep_result"}}
    async with Client(manifold.url, mode="legacy") as bystander, aiohttp.ClientSession() as http:
        session = {"Mcp-Session-Id": await raw_session(http, manifold.url)}
        with anyio.fail_after(ANSWER_WITHIN):
            status, _, body = await post(http, manifold.url, call, session)
        assert status == 200, (status, body, manifold.log()[-3000:])
        assert body is not None
        assert body["id"] == 3
        # A JSON-RPC error, or a tool result marked isError: either is the call failing clearly.
        assert "error" in body or body["result"].get("isError") is True, body
        await assert_still_serving(manifold, bystander)
    assert "Traceback" not in manifold.log()


# ---- manifold stdio ------------------------------------------------------------------------------


async def test_a_tool_result_too_deep_to_relay_over_stdio_fails_only_its_call(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m.yaml", {"servers": servers()})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            outcome = await outcome_of(client.call_tool("hostile.deep_result", {}))
            # Relayed whole it cannot be: the call fails, as a tool error or a JSON-RPC one.
            assert outcome.startswith(("error", "result (isError)")), outcome
            # The same process still serves the other server.
            echoed = await outcome_of(client.call_tool("notes.echo", {"after": "attack"}))
            assert json.loads(echoed.removeprefix("result: ")) == ECHOED
