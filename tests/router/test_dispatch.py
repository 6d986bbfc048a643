"""``Router``: every client message to the code that answers it, and the boundary of each
request; in memory, in front of a real ``Gateway`` whose one server is in memory too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson
import pytest

from proxy.app.gateway import Gateway
from proxy.clients.session import ClientSession, StatelessCaller
from proxy.policy.model import Identity
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from tests.inbound.memory_server import INITIALIZE, TOOLS, Server, request, running
from tests.outbound.memory import answer

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


class Hostile(Server):
    """The memory server, plus a tool whose result is nested deeper than JSON encoders go."""

    async def __call__(self, message: Message, reply: Callable[[Message], Awaitable[None]]) -> None:
        params = message.get("params") or {}
        if message.get("method") == "tools/call" and params.get("name") == "deep":
            await reply(answer(message, {"content": [], "structuredContent": {"x": deep(300)}}))
            return
        await super().__call__(message, reply)


def decoded(response: Message | None) -> Any:
    """What the client would read: the response through the wire encoding."""
    assert response is not None
    return orjson.loads(jsonrpc.encode(response))


async def session_of(gateway: Gateway) -> ClientSession:
    session = gateway.sessions.fresh("http", ALICE)
    assert "result" in decoded(await gateway.router.handle(session, INITIALIZE))
    await gateway.sessions.admit(session)
    return session


def call(name: str, request_id: int = 2, **arguments: Any) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def internal_errors(gateway: Gateway, where: str) -> float:
    value = gateway.metrics.registry.get_sample_value("manifold_internal_errors_total", {"where": where})
    return value or 0.0


async def test_a_call_goes_to_its_server_under_the_servers_own_name() -> None:
    server = Server()
    async with running(server) as gateway:
        session = await session_of(gateway)
        response = decoded(await gateway.router.handle(session, call("mem.echo", x=1)))
    assert response["id"] == 2
    assert orjson.loads(response["result"]["content"][0]["text"]) == {"tool": "echo", "arguments": {"x": 1}}
    assert server.calls()[0]["params"]["name"] == "echo"


async def test_a_second_initialize_and_an_unknown_tool_are_the_clients_mistakes() -> None:
    async with running(Server()) as gateway:
        session = await session_of(gateway)
        again = decoded(await gateway.router.handle(session, INITIALIZE))
        unknown = decoded(await gateway.router.handle(session, call("mem.nope")))
        method = decoded(await gateway.router.handle(session, {"jsonrpc": "2.0", "id": 9, "method": "x/y"}))
    assert again["error"]["code"] == -32600
    assert "already initialized" in again["error"]["message"]
    assert unknown["error"] == {"code": -32602, "message": "unknown tool: mem.nope"}
    assert method["error"]["code"] == -32601


async def test_a_result_manifold_cannot_encode_fails_that_request_only_and_is_counted() -> None:
    hostile = Hostile(tools=[*TOOLS, {"name": "deep", "inputSchema": {"type": "object"}}])
    async with running(hostile) as gateway:
        session = await session_of(gateway)
        bad = decoded(await gateway.router.handle(session, call("mem.deep")))
        good = decoded(await gateway.router.handle(session, call("mem.echo", 3)))
        assert internal_errors(gateway, "request") == 1
    assert bad == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32603, "message": "internal error in Manifold; see its log"},
    }
    assert "result" in good


async def test_a_request_the_client_cancels_is_not_answered() -> None:
    server = Server()
    async with running(server) as gateway:
        session = await session_of(gateway)
        answers: list[Message | None] = []

        async def slow() -> None:
            answers.append(await gateway.router.handle(session, call("mem.slow", 5)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            with anyio.fail_after(5):
                await server.started.wait()
            cancel = jsonrpc.notification("notifications/cancelled", {"requestId": 5})
            assert await gateway.router.handle(session, cancel) is None
        with anyio.fail_after(5):
            await server.cancelled.wait()  # the server hears of it under its own id
    assert answers == [None]


async def test_a_stateless_caller_discovers_manifold_and_cannot_use_removed_methods() -> None:
    async with running(Server()) as gateway:
        caller = StatelessCaller("request-1", "http", "2026-07-28", {}, ALICE)
        found = decoded(
            await gateway.router.handle_stateless(caller, request("server/discover"), lambda _: None)
        )
        gone = decoded(
            await gateway.router.handle_stateless(caller, request("initialize", 2), lambda _: None)
        )
    assert "2026-07-28" in found["result"]["supportedVersions"]
    assert found["result"]["capabilities"]["tools"] == {"listChanged": True}
    assert gone["error"]["code"] == -32601
