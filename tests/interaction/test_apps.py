"""End to end: MCP Apps and the extensions capability through a real ``manifold serve`` (#30).

Behind it, two SDK ``MCPServer`` apps servers (tests/fixtures/apps_server.py): ``a``, and ``evil``,
which also points tools at ``a``'s UI as Manifold names it, at ``javascript:`` and at an
``https:`` page. Both servers are spoken to in each era (pinned handshake, and 2026-07-28), and
the official Python SDK client asks in each era; the TypeScript SDK's (tests/npm/apps_driver.mjs)
asks as an MCP Apps host of the handshake era. The policy hides ``a.secret_panel`` from
contractors and denies them ``evil``'s UIs; endpoint ``narrow`` shows ``evil``'s tools only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClientExtension
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.fixtures.apps_driver import drive_apps
from tests.interaction.harness import REPO, RunningManifold, running_manifold, write_config
from tests.interaction.test_resource_uris import KEYS, stored

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

APPS = str(REPO / "tests" / "fixtures" / "apps_server.py")
UI = "io.modelcontextprotocol/ui"
TASKS = "io.modelcontextprotocol/tasks"
MIME = "text/html;profile=mcp-app"
POLICY = """\
version: 1
default: allow
rules:
  - id: no-secret-panel-for-contractors
    effect: deny
    match: {roles: [contractor], tools: ["a.secret_panel"]}
  - id: no-evil-uis-for-contractors
    effect: deny
    match: {roles: [contractor], resources: ["ui://evil/*"]}
"""
MODES = ["legacy", "auto"]  # a 2025-11-25 session; 2026-07-28 stateless


class Declared(ClientExtension):
    """An extension the client declares, with settings."""

    def __init__(self, identifier: str, settings: dict[str, Any]) -> None:
        self.identifier = identifier
        self._settings = settings

    def settings(self) -> dict[str, Any]:
        return self._settings


def apps_server(name: str, era: str, *options: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [APPS, "--name", name, *options], "era": era}


@pytest.fixture(scope="module", params=["handshake", "stateless"])
async def manifold(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RunningManifold]:
    era = request.param
    tmp = tmp_path_factory.mktemp(f"apps-{era}")
    (tmp / "policy.yaml").write_text(POLICY)
    config = {
        "auth": {"api_keys": [{"name": n, "key": stored(k), "roles": r} for n, (k, r) in KEYS.items()]},
        "policy": {"files": ["policy.yaml"]},
        "servers": {
            "a": apps_server(
                "a",
                era,
                "--extension",
                'com.example/solo={"a": 1}',
                "--extension",
                'com.example/maps={"zoom": 3}',
                "--extension",
                f"{TASKS}={{}}",
            ),
            "evil": apps_server("evil", era, "--steal", "a", "--extension", 'com.example/maps={"zoom": 4}'),
        },
        "endpoints": {"narrow": {"tools": ["evil.*"]}},
    }
    async with running_manifold(tmp, config) as running:
        running.era = era  # type: ignore[attr-defined]
        yield running


@asynccontextmanager
async def connect(
    manifold: RunningManifold, identity: str, mode: str, *, endpoint: str = "", **options: Any
) -> AsyncIterator[Client]:
    url = f"{manifold.url}/{endpoint}" if endpoint else manifold.url
    headers = {"Authorization": f"Bearer {KEYS[identity][0]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client,
    ):
        yield client


async def tools_meta(client: Client) -> dict[str, Any]:
    return {tool.name: tool.meta for tool in (await client.list_tools(cache_mode="bypass")).tools}


async def listed_uris(client: Client) -> set[str]:
    return {str(r.uri) for r in (await client.list_resources(cache_mode="bypass")).resources}


async def shown(client: Client) -> tuple[dict[str, Any], set[str]]:
    """The tools' ``_meta`` by name, and the resources listed."""
    return await tools_meta(client), await listed_uris(client)


async def read(client: Client, uri: str) -> tuple[str, str]:
    contents = (await client.read_resource(uri)).contents[0]
    return str(contents.uri), getattr(contents, "text", "")


async def refused(client: Client, uri: str) -> tuple[int, str]:
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri)
    return caught.value.error.code, caught.value.error.message.replace(uri, "<uri>")


@pytest.mark.parametrize("mode", MODES)
async def test_ui_references_are_namespaced_and_a_hostile_servers_removed(
    manifold: RunningManifold, mode: str
) -> None:
    async with connect(manifold, "sam", mode) as client:
        meta, listed = await shown(client)
    assert meta["a.show_panel"] == {"ui": {"resourceUri": "ui://a/panel/main"}}
    assert meta["a.secret_panel"] == {"ui": {"resourceUri": "ui://a/panel/secret"}}
    # evil points at a's UI as Manifold names it: it stays in evil's own namespace.
    assert meta["evil.steal"] == {"ui": {"resourceUri": "ui://evil/a/panel/main"}}
    assert meta["evil.script"] == {"ui": {}}  # javascript: removed, the tool kept
    assert not meta["evil.web"]  # the flat key's https: page removed
    assert {"ui://a/panel/main", "ui://a/panel/secret", "ui://evil/panel/main"} <= listed
    assert not any(uri.startswith("ui://panel/") for uri in listed)
    log = manifold.log()
    assert "server evil: tool 'script': _meta.ui.resourceUri 'javascript:alert(1)' removed" in log
    assert "server evil: tool 'web': _meta['ui/resourceUri'] 'https://evil.example/app.html' removed" in log


@pytest.mark.parametrize("mode", MODES)
async def test_a_ui_is_read_from_its_own_server_under_its_namespaced_uri(
    manifold: RunningManifold, mode: str
) -> None:
    async with connect(manifold, "sam", mode) as client:
        assert await read(client, "ui://a/panel/main") == (
            "ui://a/panel/main",
            "<!doctype html><html><body><p>a at ui://panel/main</p></body></html>",
        )
        assert (await read(client, "ui://evil/panel/main"))[1].endswith(
            "<p>evil at ui://panel/main</p></body></html>"
        )
        # Any spelling of the namespaced URI is the same resource.
        assert (await read(client, "UI://A/panel/./main"))[1].endswith(
            "<p>a at ui://panel/main</p></body></html>"
        )
        # evil's pointer at a's UI reads evil's own (which it does not have), never a's.
        _, message = await refused(client, "ui://evil/a/panel/main")
        assert "a at" not in message
        # A server's own spelling is not a client's: no namespace, no server.
        assert (await refused(client, "ui://panel/main"))[0] == (await refused(client, "ui://a/nothing"))[0]


@pytest.mark.parametrize("mode", MODES)
async def test_the_ui_of_a_tool_hidden_from_an_identity_is_neither_listed_nor_readable(
    manifold: RunningManifold, mode: str
) -> None:
    async with connect(manifold, "carl", mode) as client:
        meta, listed = await shown(client)
        assert "a.secret_panel" not in meta
        assert "ui://a/panel/secret" not in listed
        assert "ui://a/panel/main" in listed
        assert (await read(client, "ui://a/panel/main"))[0] == "ui://a/panel/main"
        # Exactly what a UI that does not exist gets.
        assert await refused(client, "ui://a/panel/secret") == await refused(client, "ui://a/panel/none")
        # The policy's resource rules apply to UIs: evil's tools are carl's, its UIs are not.
        assert "evil.steal" in meta
        assert "ui://evil/panel/main" not in listed
        assert await refused(client, "ui://evil/panel/main") == await refused(client, "ui://a/panel/none")
    async with connect(manifold, "sam", mode) as client:
        assert (await read(client, "ui://a/panel/secret"))[1].endswith(
            "a at ui://panel/secret</p></body></html>"
        )


@pytest.mark.parametrize("mode", MODES)
async def test_at_an_endpoint_only_the_uis_of_its_tools_are_readable(
    manifold: RunningManifold, mode: str
) -> None:
    async with connect(manifold, "sam", mode, endpoint="narrow") as client:
        meta = await tools_meta(client)
        assert set(meta) == {
            "evil.steal",
            "evil.script",
            "evil.web",
            "evil.show_panel",
            "evil.secret_panel",
        } | {"evil.client_extensions"}
        assert (await read(client, "ui://evil/panel/main"))[0] == "ui://evil/panel/main"
        assert await refused(client, "ui://a/panel/main") == await refused(client, "ui://a/panel/none")
        assert "ui://a/panel/main" not in await listed_uris(client)


@pytest.mark.parametrize("mode", MODES)
async def test_servers_extensions_reach_clients_by_the_rule(manifold: RunningManifold, mode: str) -> None:
    async with connect(manifold, "sam", mode) as client:
        shown = client.server_capabilities.extensions
    if manifold.era == "handshake":  # type: ignore[attr-defined]
        # The SDK's servers declare extensions from 2026-07-28 on only: nothing to relay.
        assert not shown
        return
    # a's vendor extension is relayed; maps (two settings) is dropped; tasks is not relayed but
    # served by Manifold itself to 2026-07-28 callers (a's tools run as tasks behind it), as its
    # own {}; a 2025-11-25 session is told `tasks` in its capabilities instead.
    served: dict[str, Any] = {TASKS: {}} if mode == "auto" else {}
    assert shown == {UI: {}, "com.example/solo": {"a": 1}} | served
    log = manifold.log()
    assert f"server a: extension {TASKS} not relayed: Manifold serves the tasks extension itself" in log
    assert "server evil: extension com.example/maps not relayed: declared with other settings than a's" in log


@pytest.mark.parametrize("mode", MODES)
async def test_a_clients_extensions_reach_servers_by_the_rule(manifold: RunningManifold, mode: str) -> None:
    declared = [
        Declared(UI, {"mimeTypes": [MIME]}),
        Declared("com.example/maps", {"zoom": 9}),
        Declared(TASKS, {"from": "the client"}),  # never relayed: Manifold declares its own {}
    ]
    async with connect(manifold, "sam", mode, extensions=declared) as client:
        result = await client.call_tool("a.client_extensions", {})
    heard = json.loads(result.content[0].text)  # type: ignore[union-attr]
    if manifold.era == "handshake":  # type: ignore[attr-defined]
        # One connection for every client: the server hears of Manifold's own list.
        assert heard == {UI: {"mimeTypes": [MIME]}}
    else:
        # Each request carries its client's, relayed but for tasks: that one is Manifold's own
        # declaration, made when it takes the task handle for a 2026-07-28 caller that declared
        # the extension (a 2025-11-25 session's call asked for no task: nothing declared).
        served: dict[str, Any] = {TASKS: {}} if mode == "auto" else {}
        assert heard == {UI: {"mimeTypes": [MIME]}, "com.example/maps": {"zoom": 9}} | served


async def test_the_typescript_sdk_host_sees_the_same_uis_and_the_same_refusals(
    manifold: RunningManifold,
) -> None:
    reads = ["ui://a/panel/main", "ui://a/panel/secret", "ui://evil/panel/main", "ui://a/panel/none"]
    sam = await drive_apps(manifold.url, bearer=KEYS["sam"][0], reads=reads)
    carl = await drive_apps(manifold.url, bearer=KEYS["carl"][0], reads=reads)
    assert sam["tools"]["a.show_panel"] == {"ui": {"resourceUri": "ui://a/panel/main"}}
    assert sam["tools"]["evil.steal"] == {"ui": {"resourceUri": "ui://evil/a/panel/main"}}
    assert sam["reads"]["ui://a/panel/main"] == {
        "uri": "ui://a/panel/main",
        "mimeType": MIME,
        "text": "<!doctype html><html><body><p>a at ui://panel/main</p></body></html>",
    }
    assert sam["reads"]["ui://a/panel/secret"]["uri"] == "ui://a/panel/secret"
    assert "ui://a/panel/secret" in sam["resources"]
    missing = carl["reads"]["ui://a/panel/none"]["error"]
    assert missing["code"] is not None
    for hidden in ("ui://a/panel/secret", "ui://evil/panel/main"):
        error = carl["reads"][hidden]["error"]
        assert (error["code"], error["message"].replace(hidden, "<uri>")) == (
            missing["code"],
            missing["message"].replace("ui://a/panel/none", "<uri>"),
        )
        assert hidden not in carl["resources"]
    assert carl["reads"]["ui://a/panel/main"]["uri"] == "ui://a/panel/main"
    if manifold.era == "stateless":  # type: ignore[attr-defined]
        assert sam["extensions"] == {UI: {}, "com.example/solo": {"a": 1}}


@pytest.mark.parametrize("mode", MODES)
async def test_manifold_stdio_serves_the_uis_and_relays_its_one_clients_extensions(
    tmp_path: Path, mode: str
) -> None:
    config = write_config(tmp_path / "m.yaml", {"servers": {"a": apps_server("a", "handshake")}})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )
    declared = [Declared(UI, {"mimeTypes": [MIME]}), Declared("com.example/maps", {"zoom": 9})]
    with anyio.fail_after(60):
        async with Client(params, mode=mode, extensions=declared) as client:
            meta, listed = await shown(client)
            assert meta["a.show_panel"] == {"ui": {"resourceUri": "ui://a/panel/main"}}
            assert {"ui://a/panel/main", "ui://a/panel/secret"} <= listed
            assert (await read(client, "ui://a/panel/main"))[0] == "ui://a/panel/main"
            heard = json.loads((await client.call_tool("a.client_extensions", {})).content[0].text)  # type: ignore[union-attr]
    # manifold stdio has one client: its handshake-era server hears that client's extensions.
    assert heard == {UI: {"mimeTypes": [MIME]}, "com.example/maps": {"zoom": 9}}
