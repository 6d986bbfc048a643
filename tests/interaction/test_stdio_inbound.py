"""A desktop-style client spawns ``manifold stdio`` and talks NDJSON over its pipes, in either era:
the first request decides which, for the life of the process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from proxy.protocol import stateless, versions
from tests.interaction.harness import REPO, everything_server, fixture_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RELAY = str(REPO / "tests" / "fixtures" / "relay_server.py")
V = versions.LATEST_STATELESS


async def test_a_stdio_client_lists_and_calls_tools_of_every_server(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "m.yaml",
        {
            "naming": {"separator": "__", "max_length": 64},
            "servers": {
                "alpha": fixture_server("alpha", tools=3, page_size=2),
                "everything": everything_server(),
            },
        },
    )
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            tools = (await client.list_tools()).tools
            names = [tool.name for tool in tools]
            assert names[:3] == ["alpha__tool_000", "alpha__tool_001", "alpha__tool_002"]
            assert "everything__echo" in names
            assert all(len(name) <= 64 and "." not in name for name in names)
            result = await client.call_tool("alpha__echo", {"k": "v"})
            block = result.content[0]
            assert isinstance(block, TextContent)
            assert json.loads(block.text)["arguments"] == {"k": "v"}
            with pytest.raises(MCPError) as caught:
                await client.call_tool("alpha.echo", {})
            assert caught.value.error.code == -32602


def _stdio_params(tmp_path: Path, **servers: dict[str, Any]) -> StdioServerParameters:
    tmp_path.mkdir(exist_ok=True)
    config = write_config(tmp_path / "m.yaml", {"servers": servers})
    return StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_a_modern_client_lists_calls_sees_progress_and_cancels_over_stdio(tmp_path: Path) -> None:
    params = _stdio_params(
        tmp_path,
        alpha=fixture_server("alpha", tools=3, page_size=2),
        r1={"command": sys.executable, "args": [RELAY, "--name", "r1"]},
    )
    marker = tmp_path / "cancelled"
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    with anyio.fail_after(60):
        async with Client(params, mode=V, cache=None) as client:
            assert client.protocol_version == V
            names = [tool.name for tool in (await client.list_tools()).tools]
            assert {"alpha.tool_000", "alpha.echo", "r1.progress", "r1.wait"} <= set(names)
            echoed = json.loads(_text(await client.call_tool("alpha.echo", {"k": "v"})))
            assert echoed == {"server": "alpha", "tool": "echo", "arguments": {"k": "v"}}
            result = await client.call_tool("r1.progress", {"steps": 3}, progress_callback=on_progress)
            assert (_text(result), seen) == ("r1: 3 steps", [1, 2, 3])
            # The client gives up after 1 s and says so (notifications/cancelled): the server hears it.
            with pytest.raises(MCPError):
                await client.call_tool(
                    "r1.wait", {"seconds": 30, "marker": str(marker)}, read_timeout_seconds=1
                )
            while not marker.exists():  # noqa: ASYNC110 - another process writes it; no event reaches us
                await anyio.sleep(0.05)
            assert marker.read_text() == "cancelled"
            assert _text(await client.call_tool("alpha.tool_001", {})) == "alpha:tool_001"


async def test_an_auto_client_probes_and_chooses_2026_07_28_over_stdio(tmp_path: Path) -> None:
    params = _stdio_params(tmp_path, alpha=fixture_server("alpha", tools=2))
    with anyio.fail_after(60):
        async with Client(params, mode="auto", cache=None) as client:
            assert client.protocol_version == V
            assert client.server_info is not None
            assert client.server_info.name == "manifold"
            assert _text(await client.call_tool("alpha.tool_000", {})) == "alpha:tool_000"


async def test_a_modern_client_hears_of_a_change_on_its_listen_stream_over_stdio(tmp_path: Path) -> None:
    params = _stdio_params(tmp_path, alpha=fixture_server("alpha", tools=2))
    with anyio.fail_after(60):
        async with Client(params, mode=V, cache=None) as client:
            async with client.listen(tools_list_changed=True) as subscription:
                assert subscription.honored.tools_list_changed
                await client.call_tool("alpha.add_tool", {"name": "fresh"})
                event = await anext(aiter(subscription))
                assert isinstance(event, ToolsListChanged)
            # Leaving the block cancelled the stream; the connection goes on.
            names = [tool.name for tool in (await client.list_tools()).tools]
            assert "alpha.fresh" in names


class _Pipes:
    """A ``manifold stdio`` process driven line by line."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)

    async def ask(self, message: dict[str, Any]) -> Any:
        await self._stdin.send(json.dumps(message).encode() + b"\n")
        with anyio.fail_after(30):
            return json.loads(await self._stdout.receive_until(b"\n", 1 << 20))


@asynccontextmanager
async def _manifold_stdio(tmp_path: Path) -> AsyncIterator[_Pipes]:
    params = _stdio_params(tmp_path, alpha=fixture_server("alpha", tools=2))
    async with await anyio.open_process(
        [params.command, *params.args], cwd=params.cwd, stderr=subprocess.DEVNULL
    ) as process:
        try:
            yield _Pipes(process)
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()  # the client's goodbye: Manifold exits
            with anyio.fail_after(20):
                await process.wait()


async def test_the_first_request_locks_the_era_of_the_process(tmp_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    meta = {stateless.PROTOCOL_VERSION_KEY: V, stateless.CLIENT_CAPABILITIES_KEY: {}}
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
    async with _manifold_stdio(tmp_path / "stateless") as pipes:
        assert V in (await pipes.ask(discover))["result"]["supportedVersions"]
        refused = await pipes.ask(initialize)
        assert (refused["id"], refused["error"]["code"]) == (2, -32022)
        assert refused["error"]["data"]["supported"] == list(versions.STATELESS)
    async with _manifold_stdio(tmp_path / "handshake") as pipes:
        assert (await pipes.ask(initialize))["result"]["protocolVersion"] == "2025-11-25"
        refused = await pipes.ask({**discover, "id": 3})
        assert (refused["id"], refused["error"]["code"]) == (3, -32600)
        listed = await pipes.ask({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        assert "alpha.tool_001" in [tool["name"] for tool in listed["result"]["tools"]]
