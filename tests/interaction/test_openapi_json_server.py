"""End to end: json-server (npm) described by the OpenAPI document in ``examples/openapi/``,
served as tools through a real ``manifold serve`` with a selection (the ``admin`` tag left out),
driven by the official SDK client in both eras; a changed selection reloaded (SIGHUP)."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from proxy.protocol import versions
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import NPM_BIN, OBSERVER, REPO, RunningManifold, running_manifold, write_config
from tests.interaction.test_openapi import text_of
from tests.interaction.test_policy import ListChanged, connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS


def notes_config(port: int, selection: dict[str, Any]) -> dict[str, Any]:
    document = str(REPO / "examples" / "openapi" / "notes.yaml")
    return {
        "auth": OBSERVER,
        "servers": {
            "notes": {"url": f"http://127.0.0.1:{port}", "openapi": {"document": document, **selection}}
        },
    }


@pytest.fixture(scope="module")
async def json_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[int]:
    tmp = tmp_path_factory.mktemp("json-server")
    (tmp / "db.json").write_text(json.dumps({"notes": [{"id": 1, "title": "first", "author": "ann"}]}))
    port = free_port()
    command = [str(NPM_BIN / "json-server"), "--host", "127.0.0.1", "--port", str(port), str(tmp / "db.json")]
    async with running_http_process(command, port):
        yield port


@pytest.fixture(scope="module")
async def manifold(
    tmp_path_factory: pytest.TempPathFactory, json_server: int
) -> AsyncIterator[RunningManifold]:
    config = notes_config(json_server, {"exclude": {"tags": ["admin"]}})
    async with running_manifold(tmp_path_factory.mktemp("notes"), config) as running:
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


async def test_a_changed_selection_is_reloaded_and_clients_hear_of_it(
    tmp_path: Path, json_server: int
) -> None:
    changed = ListChanged()
    async with (
        running_manifold(tmp_path, notes_config(json_server, {"include": {"methods": ["GET"]}})) as served,
        connect(served.url, mode="legacy", message_handler=changed) as client,
    ):
        assert {t.name for t in (await client.list_tools()).tools} == {"notes.listNotes", "notes.getNote"}
        told = changed.expect()
        write_config(tmp_path / "manifold.yaml", notes_config(json_server, {"include": {"tags": ["admin"]}}))
        served.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(30):
            await told.wait()
        assert {t.name for t in (await client.list_tools(cache_mode="bypass")).tools} == {"notes.deleteNote"}
