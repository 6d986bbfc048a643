"""A desktop-style client spawns ``manifold stdio`` and talks NDJSON over its pipes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from tests.interaction.harness import REPO, everything_server, fixture_server, write_config

pytestmark = pytest.mark.anyio


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
