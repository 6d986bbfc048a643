"""``manifold stdio`` has exactly one client, so its shared servers speak for it: they are told the
client's own capabilities (roots, sampling, elicitation) and their questions reach it, in either
era. The npm ``server-everything`` lists ``get-roots-list`` only to a client that declared roots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.types import ListRootsResult, Root, TextContent

from proxy.protocol import versions
from tests.interaction.harness import REPO, everything_server, fixture_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODES = [pytest.param(versions.LATEST_STATELESS, id="2026-07-28"), pytest.param("legacy", id="2025-11-25")]
ROOT = "file:///home/alice/project"


def _params(tmp_path: Path, **servers: dict[str, Any]) -> StdioServerParameters:
    config = write_config(tmp_path / "m.yaml", {"servers": servers})
    return StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )


async def _roots(context: ClientRequestContext) -> ListRootsResult:
    return ListRootsResult(roots=[Root.model_validate({"uri": ROOT, "name": "project"})])


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_listed_only_to_a_client_with_roots_is_listed_and_answers_with_its_roots(
    tmp_path: Path, mode: str
) -> None:
    params = _params(tmp_path, ev=everything_server(), alpha=fixture_server("alpha", tools=1))
    with anyio.fail_after(90):
        async with Client(params, mode=mode, list_roots_callback=_roots, cache=None) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"ev.get-roots-list", "alpha.tool_000"} <= names, sorted(names)
            result = await client.call_tool("ev.get-roots-list", {})
            assert not result.is_error, _text(result)
            assert ROOT in _text(result)
            assert _text(await client.call_tool("alpha.tool_000", {})) == "alpha:tool_000"


async def test_a_client_without_roots_is_not_said_to_have_them(tmp_path: Path) -> None:
    params = _params(tmp_path, ev=everything_server())
    with anyio.fail_after(90):
        async with Client(params, mode="legacy", cache=None) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "ev.echo" in names
            assert "ev.get-roots-list" not in names


async def test_a_hostile_client_that_refuses_the_servers_question_still_lists_and_calls(
    tmp_path: Path,
) -> None:
    """It declares roots (and junk besides, which no server hears of), then answers the
    server's ``roots/list`` with an error: the server gets the error, and the client's own
    requests are answered as ever."""
    params = _params(tmp_path, ev=everything_server())
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "roots": {"listChanged": True},
                "junk": [1] * 1000,
                "experimental": {"x": {"y": [0] * 1000}},
            },
            "clientInfo": {"name": "hostile", "version": "0"},
        },
    }
    async with await anyio.open_process(
        [params.command, *params.args], cwd=params.cwd, stderr=subprocess.DEVNULL
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)

        async def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            await process.stdin.send(json.dumps(message).encode() + b"\n")

        async def answer_to(request_id: int) -> Any:
            """The answer to our request ``request_id``; the server's questions get an error."""
            while True:
                with anyio.fail_after(60):
                    message = json.loads(await stdout.receive_until(b"\n", 1 << 22))
                if message.get("method") == "roots/list":
                    await send(
                        {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": "no"}}
                    )
                elif message.get("id") == request_id and "method" not in message:
                    return message

        await send(initialize)
        assert (await answer_to(1))["result"]["serverInfo"]["name"] == "manifold"
        await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        names = [tool["name"] for tool in (await answer_to(2))["result"]["tools"]]
        assert "ev.get-roots-list" in names
        await send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "ev.echo", "arguments": {"message": "hi"}},
            }
        )
        assert "hi" in json.dumps((await answer_to(3))["result"])
        await process.stdin.aclose()
        with anyio.fail_after(20):
            await process.wait()


async def test_a_server_a_reload_adds_speaks_for_the_client_too(tmp_path: Path) -> None:
    """The config file changes under a running ``manifold stdio`` (it is watched): the server it
    adds is told the client's roots as the first ones were."""
    params = _params(tmp_path, alpha=fixture_server("alpha", tools=1))
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    with anyio.fail_after(90):
        async with Client(
            params, mode="legacy", list_roots_callback=_roots, message_handler=on_message, cache=None
        ) as client:
            assert "alpha.tool_000" in {tool.name for tool in (await client.list_tools()).tools}
            write_config(
                tmp_path / "m.yaml",
                {"servers": {"alpha": fixture_server("alpha", tools=1), "ev": everything_server()}},
            )
            await changed.wait()
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "ev.get-roots-list" in names, sorted(names)
            assert ROOT in _text(await client.call_tool("ev.get-roots-list", {}))
