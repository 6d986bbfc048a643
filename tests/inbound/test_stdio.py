"""``serve_stdio`` in memory, both eras: lines in, lines out, in front of a real ``Gateway`` whose
one server is an in-memory handshake-era server.

Covered here: the first request decides the era (an enveloped one → stateless, ``initialize`` or a
bare request → handshake), the other era is refused afterwards (-32022 naming only the stateless
revisions, -32600), a bad envelope before the decision leaves it undecided, stateless requests run
concurrently with their progress written before their response, ``notifications/cancelled``
cancels one (the server hears of it, nothing more is written for it), ``subscriptions/listen``
streams as tagged lines until cancelled, unreadable lines.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from proxy.app.gateway import Gateway
from proxy.inbound.stdio import serve_stdio
from proxy.protocol import jsonrpc, stateless, versions
from proxy.protocol.subscriptions import SUBSCRIPTION_ID_KEY
from tests.inbound import memory_server
from tests.inbound.memory_server import INITIALIZE, META, Server, V, request, running, valid
from tests.protocol.schemas import validator

pytestmark = pytest.mark.anyio

TOOLS = [*memory_server.TOOLS, {"name": "grow", "inputSchema": {"type": "object"}}]
NAMES = [f"mem.{tool['name']}" for tool in TOOLS]


class Client:
    """The client's end of the pipes: lines to ``manifold stdio``, lines from it."""

    def __init__(
        self, stdin: MemoryObjectSendStream[bytes], stdout: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout

    async def send(self, message: dict[str, Any] | bytes) -> None:
        await self._stdin.send(message if isinstance(message, bytes) else jsonrpc.encode(message) + b"\n")

    async def receive(self) -> Any:
        with anyio.fail_after(5):
            line = await self._stdout.receive()
        assert line.endswith(b"\n")
        assert line.count(b"\n") == 1
        return orjson.loads(line)

    async def ask(self, message: dict[str, Any] | bytes) -> Any:
        await self.send(message)
        return await self.receive()

    async def close(self) -> list[Any]:
        """Close stdin; what was written until Manifold was done."""
        await self._stdin.aclose()
        with anyio.fail_after(5):
            return [orjson.loads(line) async for line in self._stdout]


@asynccontextmanager
async def stdio(server: Server) -> AsyncIterator[tuple[Client, Gateway]]:
    """``serve_stdio`` in front of a gateway in front of ``server``."""
    stdin_send, stdin_receive = anyio.create_memory_object_stream[bytes](math.inf)
    stdout_send, stdout_receive = anyio.create_memory_object_stream[bytes](math.inf)

    async def lines() -> AsyncIterator[bytes]:
        async with stdin_receive:
            async for line in stdin_receive:
                yield line

    async def serve() -> None:
        async with stdout_send:
            await serve_stdio(gateway.inbound, lines(), stdout_send.send)

    async with (
        stdin_send,
        stdout_receive,
        running(server, catalog={"page_size": 10}) as gateway,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(serve)
        yield Client(stdin_send, stdout_receive), gateway
        await stdin_send.aclose()


@pytest.fixture
async def server() -> Server:
    return Server(tools=list(TOOLS), progress_steps=2)


async def test_an_enveloped_first_request_is_served_statelessly_and_mints_no_session(server: Server) -> None:
    async with stdio(server) as (client, gateway):
        discovered = valid(await client.ask(request("server/discover", 7)))
        validator(V, "DiscoverResult")(discovered["result"])
        assert discovered["id"] == 7
        listed = valid(await client.ask(request("tools/list", 8)))["result"]
        assert [tool["name"] for tool in listed["tools"]] == NAMES
        assert listed["resultType"] == "complete"
        assert len(gateway.sessions) == 0


async def test_initialize_on_a_modern_connection_is_refused_naming_only_the_modern_revisions(
    server: Server,
) -> None:
    async with stdio(server) as (client, _):
        await client.ask(request("tools/list", 1))
        refused = valid(await client.ask({**INITIALIZE, "id": 2}))
        assert (refused["id"], refused["error"]["code"]) == (2, -32022)
        assert refused["error"]["data"] == {"supported": list(versions.STATELESS), "requested": "2025-11-25"}
        assert V in refused["error"]["message"]
        # Still stateless: enveloped requests keep being served.
        assert "result" in await client.ask(request("tools/list", 3))


async def test_initialize_first_serves_the_handshake_era_and_refuses_enveloped_requests(
    server: Server,
) -> None:
    async with stdio(server) as (client, gateway):
        initialized = await client.ask(INITIALIZE)
        assert initialized["result"]["protocolVersion"] == "2025-11-25"
        assert len(gateway.sessions) == 1
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        refused = await client.ask(request("tools/list", 2))
        assert (refused["id"], refused["error"]["code"]) == (2, -32600)
        assert "handshake" in refused["error"]["message"]
        listed = await client.ask({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert [tool["name"] for tool in listed["result"]["tools"]] == NAMES
        assert "resultType" not in listed["result"]
    assert len(gateway.sessions) == 0  # ended with stdin


async def test_an_enveloped_initialize_still_opens_the_handshake_era(server: Server) -> None:
    async with stdio(server) as (client, _):
        initialized = await client.ask({**INITIALIZE, "params": {**INITIALIZE["params"], "_meta": META}})
        assert initialized["result"]["protocolVersion"] == "2025-11-25"
        assert (await client.ask(request("tools/list", 2)))["error"]["code"] == -32600


async def test_a_bare_first_request_opens_the_handshake_era(server: Server) -> None:
    async with stdio(server) as (client, gateway):
        await client.ask({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert len(gateway.sessions) == 1
        assert (await client.ask(request("tools/list", 2)))["error"]["code"] == -32600


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        ({**META, stateless.PROTOCOL_VERSION_KEY: "1999-01-01"}, -32022),
        ({stateless.PROTOCOL_VERSION_KEY: V}, -32602),  # no clientCapabilities
        ({**META, stateless.LOG_LEVEL_KEY: "loud"}, -32602),
    ],
)
async def test_a_bad_envelope_before_the_era_is_decided_is_answered_and_decides_nothing(
    server: Server, meta: dict[str, Any], code: int
) -> None:
    async with stdio(server) as (client, _):
        refused = valid(await client.ask(request("server/discover", 1, meta)))
        assert (refused["id"], refused["error"]["code"]) == (1, code)
        if code == -32022:  # what it names, initialize included, is really on offer
            assert refused["error"]["data"]["supported"] == list(versions.ADVERTISED)
        initialized = await client.ask({**INITIALIZE, "id": 2})
        assert initialized["result"]["protocolVersion"] == "2025-11-25"


async def test_a_bad_envelope_on_a_modern_connection_leaves_it_stateless(server: Server) -> None:
    async with stdio(server) as (client, _):
        await client.ask(request("server/discover", 1))
        missing = valid(await client.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        assert (missing["id"], missing["error"]["code"]) == (2, -32602)
        assert (await client.ask({**INITIALIZE, "id": 3}))["error"]["code"] == -32022


async def test_modern_requests_run_concurrently_and_progress_comes_before_the_response(
    server: Server,
) -> None:
    async with stdio(server) as (client, _):
        await client.send(request("tools/call", 1, name="mem.slow", arguments={}))
        with anyio.fail_after(5):
            await server.started.wait()
        meta = {**META, "progressToken": "p"}
        await client.send(request("tools/call", 2, meta, name="mem.progress", arguments={}))
        seen = [valid(await client.receive()) for _ in range(3)]
        assert [m.get("method") for m in seen] == ["notifications/progress"] * 2 + [None]
        assert [m["params"]["progressToken"] for m in seen[:2]] == ["p", "p"]
        assert [m["params"]["progress"] for m in seen[:2]] == [1, 2]
        assert seen[2]["id"] == 2
        server.release.set()
        slow = valid(await client.receive())
        assert (slow["id"], slow["result"]["resultType"]) == (1, "complete")


async def test_notifications_cancelled_cancels_the_request_and_nothing_is_written_for_it(
    server: Server,
) -> None:
    async with stdio(server) as (client, _):
        await client.send(request("tools/call", "call-1", name="mem.slow", arguments={}))
        with anyio.fail_after(5):
            await server.started.wait()
        await client.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "call-1"}}
        )
        with anyio.fail_after(5):
            await server.cancelled.wait()  # the server behind was told
        server.release.set()  # it answers anyway: that answer must go nowhere
        after = await client.ask(request("tools/call", 2, name="mem.echo", arguments={"n": 2}))
        assert after["id"] == 2
        assert await client.close() == []


async def test_a_cancel_for_an_unknown_or_finished_request_changes_nothing(server: Server) -> None:
    async with stdio(server) as (client, _):
        done = await client.ask(request("tools/call", 1, name="mem.echo", arguments={}))
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        await client.send(cancel)
        await client.send({**cancel, "params": {"requestId": "nobody"}})
        again = await client.ask(request("tools/call", 1, name="mem.echo", arguments={}))
        assert again["result"] == done["result"]


async def test_a_listen_stream_is_written_as_tagged_lines_until_the_client_cancels_it(server: Server) -> None:
    def listen(listen_id: str) -> dict[str, Any]:
        return request("subscriptions/listen", listen_id, notifications={"toolsListChanged": True})

    def tag(message: Any) -> Any:
        return message["params"]["_meta"][SUBSCRIPTION_ID_KEY]

    async def until(*request_ids: int, change: bool) -> list[Any]:
        """Lines until each of ``request_ids`` is answered (and, if ``change``, a tools change
        came); the changes seen, by their tag."""
        lines: list[Any] = []
        while not (
            {m.get("id") for m in lines} >= set(request_ids)
            and (not change or any(m.get("method") == "notifications/tools/list_changed" for m in lines))
        ):
            lines.append(valid(await client.receive()))
        return [tag(m) for m in lines if m.get("method") == "notifications/tools/list_changed"]

    async with stdio(server) as (client, _):
        acknowledged = valid(await client.ask(listen("L")))
        assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
        assert (acknowledged["params"]["notifications"], tag(acknowledged)) == (
            {"toolsListChanged": True},
            "L",
        )
        await client.send(request("tools/call", 1, name="mem.grow", arguments={}))
        assert await until(1, change=True) == ["L"]

        await client.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L"}}
        )
        assert tag(await client.ask(listen("M"))) == "M"
        await client.send(request("tools/call", 2, name="mem.grow", arguments={}))
        changes = await until(2, change=True)
        await client.send(request("server/discover", 3))  # time for a stray line of L's to show
        assert changes + await until(3, change=False) == ["M"]


async def test_a_listen_request_with_a_bad_filter_is_invalid_params(server: Server) -> None:
    async with stdio(server) as (client, _):
        refused = valid(await client.ask(request("subscriptions/listen", 4)))
        assert (refused["id"], refused["error"]["code"]) == (4, -32602)


async def test_unreadable_lines_are_answered_without_an_id_and_a_readable_id_is_kept(server: Server) -> None:
    async with stdio(server) as (client, _):
        before = await client.ask(b"{not json\n")
        assert (before["id"], before["error"]["code"]) == (None, -32700)  # undecided: JSON-RPC's null
        await client.ask(request("server/discover", 1))
        after = valid(await client.ask(b"[1, 2]\n"))
        assert "id" not in after  # stateless: the 2026-07-28 schema has no null id
        assert after["error"]["code"] == -32600
        bad = valid(await client.ask(b'{"jsonrpc": "1.0", "id": 9, "method": "tools/list"}\n'))
        assert (bad["id"], bad["error"]["code"]) == (9, -32600)
