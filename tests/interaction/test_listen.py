"""End to end: ``subscriptions/listen`` through a real ``manifold serve``, from the official SDK's
2026-07-28 client and from raw HTTP, to changes made by real SDK servers behind it over stdio.

Behind Manifold: ``alpha`` (tests/fixtures/fixture_server.py, reached at 2026-07-28: its
``add_tool`` grows its tool list and says so) and ``r1`` (tests/fixtures/relay_server.py, pinned
to the handshake era: its ``touch`` tells of a resource update, but only if someone sent it
``resources/subscribe`` for that resource).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

from proxy.protocol import stateless, versions
from proxy.protocol.sse import SSEDecoder
from proxy.protocol.subscriptions import SUBSCRIPTION_ID_KEY
from tests.interaction.harness import REPO, RunningManifold, fixture_server, running_manifold
from tests.protocol.schemas import validator

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RELAY = str(REPO / "tests" / "fixtures" / "relay_server.py")
V = versions.LATEST_STATELESS
META = {stateless.PROTOCOL_VERSION_KEY: V, stateless.CLIENT_CAPABILITIES_KEY: {}}
STATIC = "note://r1/static"
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": V,
    "Mcp-Method": "subscriptions/listen",
}


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {
        "servers": {
            "alpha": fixture_server("alpha", tools=2, page_size=10),
            "r1": {"command": sys.executable, "args": [RELAY, "--name", "r1"], "era": "handshake"},
        },
    }
    async with running_manifold(tmp_path_factory.mktemp("listen"), config) as running:
        yield running


async def test_an_sdk_client_hears_a_tool_list_change_of_a_server_behind(manifold: RunningManifold) -> None:
    async with Client(manifold.url, mode="auto", cache=None) as client:
        assert client.protocol_version == V
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.tools.list_changed
        assert capabilities.resources is not None
        assert capabilities.resources.subscribe
        async with client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored.tools_list_changed
            assert not subscription.honored.resource_subscriptions
            await client.call_tool("alpha.add_tool", {"name": "heard_by_sdk"})
            with anyio.fail_after(20):
                event = await anext(subscription)
            assert isinstance(event, ToolsListChanged)
        names = [tool.name for tool in (await client.list_tools()).tools]
    assert "alpha.heard_by_sdk" in names


async def test_a_resource_update_reaches_the_stream_watching_it_through_one_subscription(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode=V, cache=None) as client:
        watched = [STATIC, "note://nowhere/x"]
        async with client.listen(resource_subscriptions=watched) as subscription:
            # Unknown URIs are left out of the acknowledgement; r1 was asked to subscribe for the
            # other, or its touch below would tell nobody.
            assert subscription.honored.resource_subscriptions == [STATIC]
            async with (
                aiohttp.ClientSession() as http,
                http.get(manifold.url.replace("/mcp", "/metrics")) as got,
            ):
                assert 'manifold_listen_streams_open{transport="http"} 1.0' in await got.text()
            await client.call_tool("r1.touch", {"uri": STATIC})
            with anyio.fail_after(20):
                event = await anext(subscription)
            assert event == ResourceUpdated(uri=STATIC)


async def test_the_raw_stream_is_sse_acknowledged_first_and_every_notification_is_tagged(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "raw-1",
        "method": "subscriptions/listen",
        "params": {"_meta": META, "notifications": {"toolsListChanged": True, "promptsListChanged": True}},
    }
    events: list[Any] = []
    decoder = SSEDecoder()
    with anyio.fail_after(30):
        async with (
            aiohttp.ClientSession() as http,
            http.post(manifold.url, data=orjson.dumps(body), headers=HEADERS) as response,
        ):
            assert (response.status, response.content_type) == (200, "text/event-stream")
            async with Client(manifold.url, mode=V, cache=None) as client:
                async for chunk in response.content.iter_any():
                    events += [orjson.loads(event.data) for event in decoder.feed(chunk)]
                    if len(events) == 1:
                        await client.call_tool("alpha.add_tool", {"name": "heard_raw"})
                    if len(events) == 2:
                        break
    ack, changed = events
    for event in events:
        validator(V, "JSONRPCMessage")(event)
        assert event["params"]["_meta"][SUBSCRIPTION_ID_KEY] == "raw-1"
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
    assert changed["method"] == "notifications/tools/list_changed"


async def test_shutting_manifold_down_ends_an_open_stream_with_the_listen_response(tmp_path: Path) -> None:
    config = {"servers": {"alpha": fixture_server("alpha", tools=2, page_size=10)}}
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "subscriptions/listen",
        "params": {"_meta": META, "notifications": {}},
    }
    events: list[Any] = []
    decoder = SSEDecoder()
    async with running_manifold(tmp_path, config) as running:
        with anyio.fail_after(30):
            async with (
                aiohttp.ClientSession() as http,
                http.post(running.url, data=orjson.dumps(body), headers=HEADERS) as response,
            ):
                async for chunk in response.content.iter_any():  # until Manifold closes it
                    events += [orjson.loads(event.data) for event in decoder.feed(chunk)]
                    if len(events) == 1:
                        running.process.send_signal(signal.SIGTERM)
    ack, final = events
    assert (ack["method"], ack["params"]["notifications"]) == ("notifications/subscriptions/acknowledged", {})
    validator(V, "SubscriptionsListenResultResponse")(final)
    assert final["result"] == {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: 5}}
