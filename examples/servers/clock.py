"""A tiny clock server (stdio), bundled so `make run` needs no external services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("clock")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=False))
def now() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add_days(date: str, days: int) -> str:
    """The ISO date ``days`` after ``date`` (YYYY-MM-DD)."""
    return (datetime.fromisoformat(date) + timedelta(days=days)).date().isoformat()


if __name__ == "__main__":
    server.run()
