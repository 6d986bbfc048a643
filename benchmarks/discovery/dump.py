"""Regenerate the vendored catalogs of real servers (an authoring step; the evaluation never runs it).

Starts each server over stdio with the official SDK client, drains ``tools/list`` and writes
``catalogs/<name>.json`` (``{"source": ..., "tools": [...]}``). Needs the npm servers of
tests/npm (``npm ci`` there) and the repository's fixture servers::

    python -m benchmarks.discovery.dump
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import PaginatedRequestParams

REPO = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "catalogs"
NPM = REPO / "tests" / "npm" / "node_modules" / ".bin"
FIXTURES = REPO / "tests" / "fixtures"

SERVERS: dict[str, tuple[str, list[str], str]] = {
    "everything": (
        str(NPM / "mcp-server-everything"),
        ["stdio"],
        "npm @modelcontextprotocol/server-everything (tests/npm), tools/list as served",
    ),
    "filesystem": (
        str(NPM / "mcp-server-filesystem"),
        [str(REPO)],
        "npm @modelcontextprotocol/server-filesystem (tests/npm), tools/list as served",
    ),
    "fixture": (
        sys.executable,
        [str(FIXTURES / "fixture_server.py"), "--name", "fixture", "--tools", "25"],
        "tests/fixtures/fixture_server.py --tools 25 (Python SDK), tools/list as served",
    ),
    "relay": (
        sys.executable,
        [str(FIXTURES / "relay_server.py"), "--name", "relay"],
        "tests/fixtures/relay_server.py (Python SDK), tools/list as served",
    ),
}


async def listed_tools(server: StdioServerParameters) -> list[dict[str, Any]]:
    """Every page of a stdio server's tools/list, as served (bounded: 60 s)."""
    tools: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            cursor: str | None = None
            while True:
                paging = None if cursor is None else PaginatedRequestParams(cursor=cursor)
                page = await session.list_tools(params=paging)
                tools += [
                    tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools
                ]
                cursor = page.next_cursor
                if cursor is None:
                    return tools


async def dump(name: str, command: str, args: list[str], source: str) -> None:
    tools = await listed_tools(StdioServerParameters(command=command, args=args))
    document = {"source": source, "tools": tools}
    (OUT / f"{name}.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"{name}: {len(tools)} tools")


async def main() -> None:
    for name, (command, args, source) in SERVERS.items():
        await dump(name, command, args, source)


if __name__ == "__main__":
    anyio.run(main)
