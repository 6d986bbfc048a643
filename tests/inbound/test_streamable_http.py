"""GET /mcp streams of a handshake-era session: at most ``limits.max_listen_streams_per_session``
distinct streams followed at once; in memory, in front of a real ``Gateway``."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson
import pytest

from proxy.clients.session import ClientSession
from proxy.inbound.streamable_http import McpEndpoint, OriginPolicy
from tests.inbound.memory_server import INITIALIZE, Server, running

pytestmark = pytest.mark.anyio

LIMIT = "max_listen_streams_per_session"


@dataclass
class Response:
    status: int = 0
    chunks: list[bytes] = field(default_factory=list)
    started: anyio.Event = field(default_factory=anyio.Event)
    hang_up: anyio.Event = field(default_factory=anyio.Event)

    def json(self) -> Any:
        return orjson.loads(b"".join(self.chunks))


async def exchange(
    endpoint: McpEndpoint, method: str, headers: dict[str, str], response: Response, body: Any = None
) -> None:
    head = {"host": "127.0.0.1:8080", "content-type": "application/json", **headers}
    scope = {
        "type": "http",
        "method": method,
        "path": "/mcp",
        "headers": [(k.encode(), v.encode()) for k, v in head.items()],
        "client": ("127.0.0.1", 1),
    }
    sent = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent and body is not None:
            sent = True
            return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}
        await response.hang_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            response.status = message["status"]
            response.started.set()
        else:
            response.chunks.append(message.get("body", b""))

    await endpoint(scope, receive, send)


@asynccontextmanager
async def session(limit: int) -> AsyncIterator[tuple[McpEndpoint, ClientSession, dict[str, str], Any]]:
    async with running(Server(), limits={LIMIT: limit}) as gateway:
        endpoint = McpEndpoint(gateway.inbound, OriginPolicy("127.0.0.1", [], []))
        accept = {"accept": "application/json, text/event-stream"}
        answer = Response()
        with anyio.fail_after(5):
            await exchange(endpoint, "POST", accept, answer, INITIALIZE)
        (opened,) = list(gateway.sessions)
        headers = {"accept": "text/event-stream", "mcp-session-id": opened.id}
        yield endpoint, opened, headers, gateway


@asynccontextmanager
async def following(
    endpoint: McpEndpoint, headers: dict[str, str], last_event_id: str | None = None
) -> AsyncIterator[Response]:
    """A GET in flight until the block ends (the client hangs up), or answered at once."""
    response = Response()
    extra = {"last-event-id": last_event_id} if last_event_id else {}
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(exchange, endpoint, "GET", {**headers, **extra}, response)
            await response.started.wait()
            try:
                yield response
            finally:
                response.hang_up.set()


def refusals(gateway: Any) -> float:
    registry = gateway.metrics.registry
    return registry.get_sample_value("manifold_limit_refusals_total", {"limit": LIMIT}) or 0.0


async def test_a_get_past_the_sessions_open_streams_is_409_naming_the_limit() -> None:
    async with session(limit=2) as (endpoint, opened, headers, gateway):
        opened.open_stream()
        opened.open_stream()
        async with following(endpoint, headers) as standalone, following(endpoint, headers, "1.0") as first:
            assert standalone.status == first.status == 200
            async with following(endpoint, headers, "2.0") as refused:
                assert refused.status == 409
                error = refused.json()["error"]
                assert error["data"] == {"limit": LIMIT, "max": 2}
                assert f"limits.{LIMIT} is 2" in error["message"]
            assert refusals(gateway) == 1
        # Both closed: room again.
        async with following(endpoint, headers, "2.0") as again:
            assert again.status == 200


async def test_a_client_taking_over_a_stream_it_follows_is_not_refused() -> None:
    async with session(limit=1) as (endpoint, _, headers, gateway):
        async with following(endpoint, headers) as old:
            assert old.status == 200
            # The old connection may look alive to us when the client reconnects.
            async with following(endpoint, headers, "0.0") as new:
                assert new.status == 200
        assert refusals(gateway) == 0
