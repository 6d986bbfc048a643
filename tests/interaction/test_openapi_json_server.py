"""End to end: json-server (npm) described by the OpenAPI document in ``examples/openapi/``,
served as tools through a real ``manifold serve`` with a selection (the ``admin`` tag left out),
driven by the official SDK client in both eras."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from proxy.protocol import versions
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import NPM_BIN, OBSERVER, REPO, RunningManifold, running_manifold
from tests.interaction.test_openapi import text_of
from tests.interaction.test_policy import connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("json-server")
    (tmp / "db.json").write_text(json.dumps({"notes": [{"id": 1, "title": "first", "author": "ann"}]}))
    port = free_port()
    command = [str(NPM_BIN / "json-server"), "--host", "127.0.0.1", "--port", str(port), str(tmp / "db.json")]
    config: dict[str, Any] = {
        "auth": OBSERVER,
        "servers": {
            "notes": {
                "url": f"http://127.0.0.1:{port}",
                "openapi": {
                    "document": str(REPO / "examples" / "openapi" / "notes.yaml"),
                    "exclude": {"tags": ["admin"]},
                },
            }
        },
    }
    async with running_http_process(command, port), running_manifold(tmp, config) as running:
        yield running


@pytest.mark.parametrize("era", ["legacy", V])
async def test_notes_are_created_found_changed_and_missing_ones_are_errors(
    manifold: RunningManifold, era: str
) -> None:
    async with connect(manifold.url, mode=era, cache=None) as client:
        names = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
        assert names == {"notes.listNotes", "notes.createNote", "notes.getNote", "notes.updateNote"}
        created = await client.call_tool("notes.createNote", {"body": {"title": era, "author": f"bea-{era}"}})
        assert not created.is_error, text_of(created)
        assert created.structured_content is not None
        note_id = created.structured_content["id"]
        found = await client.call_tool("notes.listNotes", {"author": f"bea-{era}"})
        assert found.structured_content == {"result": [{"id": note_id, "title": era, "author": f"bea-{era}"}]}
        changed = await client.call_tool("notes.updateNote", {"id": note_id, "body": {"title": "changed"}})
        assert changed.structured_content is not None
        assert changed.structured_content["title"] == "changed"
        missing = await client.call_tool("notes.getNote", {"id": 999999})
        assert missing.is_error
        assert "HTTP 404" in text_of(missing)
        with pytest.raises(MCPError, match=r"notes\.deleteNote"):  # left out: an unknown tool
            await client.call_tool("notes.deleteNote", {"id": note_id})
        assert (await client.call_tool("notes.getNote", {"id": note_id})).structured_content is not None
