"""Two Manifold replicas behind a plain round-robin TCP forwarder: one client session whose
requests alternate between them keeps working (list, paginate across replicas, call)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import orjson
import pytest

from tests.fixtures.spawn import free_port
from tests.interaction.harness import RunningManifold, fixture_server, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "replicas-share-this-secret-of-32+chars"


@asynccontextmanager
async def round_robin(backends: list[str]) -> AsyncIterator[str]:
    """A TCP forwarder on loopback sending each new connection to the next backend in turn."""
    targets = itertools.cycle([tuple(b.removeprefix("http://").split("/")[0].split(":")) for b in backends])
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=free_port())

    async def pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            await sink.send_eof()

    async def forward(client: anyio.abc.SocketStream) -> None:
        host, port = next(targets)
        async with (
            client,
            await anyio.connect_tcp(host, int(port)) as backend,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(pipe, client, backend)
            tg.start_soon(pipe, backend, client)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, forward)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        yield f"http://127.0.0.1:{port}/mcp"
        tg.cancel_scope.cancel()


@asynccontextmanager
async def replicas(tmp_path: Path, secret: str | None) -> AsyncIterator[list[RunningManifold]]:
    config: dict[str, Any] = {
        "catalog": {"page_size": 5},
        "servers": {"alpha": fixture_server("alpha", tools=12, page_size=4)},
    }
    if secret is not None:
        config["sessions"] = {"secret": secret}
    async with AsyncExitStack() as stack:
        running = [
            await stack.enter_async_context(running_manifold(tmp_path / f"r{i}", config)) for i in range(2)
        ]
        yield running


async def rpc(
    http: aiohttp.ClientSession, url: str, session: str | None, body: dict[str, Any]
) -> tuple[int, str | None, Any]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
    async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
        decoded = await response.json() if response.content_type == "application/json" else None
        return response.status, response.headers.get("mcp-session-id"), decoded


async def open_session(http: aiohttp.ClientSession, url: str) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    _, session, body = await rpc(
        http, url, None, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    )
    assert body["result"]["protocolVersion"] == "2025-11-25"
    assert isinstance(session, str)
    await rpc(http, url, session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session


async def test_a_session_alternating_between_replicas_lists_pages_and_calls(tmp_path: Path) -> None:
    (tmp_path / "r0").mkdir()
    (tmp_path / "r1").mkdir()
    # A fresh connection per request, so the forwarder alternates replicas on every one.
    async with (
        replicas(tmp_path, SECRET) as (a, b),
        round_robin([a.url, b.url]) as url,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
    ):
        session = await open_session(http, url)
        names: list[str] = []
        cursor: str | None = None
        for request_id in range(1, 20):
            params = {"cursor": cursor} if cursor else {}
            _, _, body = await rpc(
                http,
                url,
                session,
                {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params},
            )
            names += [tool["name"] for tool in body["result"]["tools"]]
            cursor = body["result"].get("nextCursor")
            if cursor is None:
                break
        call = {"name": "alpha.echo", "arguments": {"replica": "either"}}
        _, _, answer = await rpc(
            http, url, session, {"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": call}
        )
    assert len(names) == len(set(names)) == 12 + 7  # every tool once, pages cut on both replicas
    assert orjson.loads(answer["result"]["content"][0]["text"])["arguments"] == {"replica": "either"}
    assert "taken over from its signed id" in a.log() + b.log()


async def test_without_a_shared_secret_the_other_replica_does_not_know_the_session(tmp_path: Path) -> None:
    (tmp_path / "r0").mkdir()
    (tmp_path / "r1").mkdir()
    async with (
        replicas(tmp_path, None) as (a, b),
        round_robin([a.url, b.url]) as url,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
    ):
        session = await open_session(http, url)
        pings = [
            await rpc(http, url, session, {"jsonrpc": "2.0", "id": n, "method": "ping"}) for n in range(1, 5)
        ]
    statuses = [status for status, _, _ in pings]
    assert sorted(set(statuses)) == [200, 404]  # known where it was made, unknown on the other
