"""A tiny notes server (stdio), bundled so `make run` needs no external services."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")
_notes: dict[str, str] = {}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def add_note(title: str, text: str) -> str:
    """Store a note under a title (replacing any note with that title)."""
    _notes[title] = text
    return f"saved note {title!r}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> str:
    """The titles of every stored note, one per line."""
    return "\n".join(sorted(_notes)) or "(no notes)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(title: str) -> str:
    """The text of one note."""
    return _notes.get(title, f"no note titled {title!r}")


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(title: str) -> str:
    """Delete one note."""
    return f"deleted {title!r}" if _notes.pop(title, None) is not None else f"no note titled {title!r}"


if __name__ == "__main__":
    server.run()
