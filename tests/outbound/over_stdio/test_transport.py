"""A connection over stdio to a real child process that misbehaves: only what it broke fails.

The server (``tests/fixtures/misbehaving_server.py``) answers too deep, writes garbage and deep
notifications, and asks the same request id twice; the connection stays up, the bad call fails
with an error that names the server and the limit, and the next call works.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest

from proxy.core.errors import ServerProtocolError, Unencodable
from proxy.observe.boundary import wire_error
from proxy.outbound.connection import ServerConnection
from proxy.outbound.health import ServerState
from proxy.outbound.over_stdio.transport import StdioTransport
from proxy.protocol.jsonrpc import Message
from tests.outbound.test_connection import Recorder

pytestmark = pytest.mark.anyio

HOSTILE = Path(__file__).parents[2] / "fixtures" / "misbehaving_server.py"


class ClientRequest:
    """The client request a call is made for: it answers roots/list, and keeps what it is told."""

    session_id = "client-1"
    capabilities: dict[str, Any] = {"roots": {}}  # noqa: RUF012 - read only
    log_level: str | None = "debug"
    asleep = False

    def __init__(self) -> None:
        self.notified: list[Message] = []
        self.asked: list[str] = []

    def notify(self, message: Message) -> None:
        self.notified.append(message)

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        self.asked.append(method)
        await anyio.lowlevel.checkpoint()  # a client takes a moment: both requests are in flight
        return {"roots": []}


@asynccontextmanager
async def hostile(**options: Any) -> AsyncIterator[tuple[ServerConnection, Recorder]]:
    recorder = Recorder()
    transport = StdioTransport("hostile", sys.executable, [str(HOSTILE)])
    connection = ServerConnection("hostile", transport, recorder, answer_error=wire_error, **options)
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run)
        with anyio.fail_after(10):
            await connection.first_attempt_done.wait()
        assert connection.state is ServerState.READY
        yield connection, recorder
        tg.cancel_scope.cancel()


@pytest.mark.slow
async def test_a_reply_nested_too_deep_fails_that_call_naming_the_server_and_the_limit() -> None:
    async with hostile() as (connection, _):
        with anyio.fail_after(10):
            with pytest.raises(ServerProtocolError) as failed:
                await connection.request("tools/call", {"name": "deep_answer"})
            assert await connection.request("tools/call", {"name": "echo"}) == {
                "content": [{"type": "text", "text": "ok"}]
            }
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)
    message = (
        "server 'hostile' broke the protocol: its answer was a message nested deeper than 64 levels"
        " (limits.max_depth)"
    )
    assert str(failed.value) == message
    # What the client is told: a JSON-RPC error for its request, naming the server and the limit.
    assert wire_error(failed.value, 5) == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": -32603, "message": message, "data": {"server": "hostile"}},
    }


@pytest.mark.slow
async def test_a_lower_configured_limit_is_the_one_applied_and_named() -> None:
    recorder = Recorder()
    transport = StdioTransport("hostile", sys.executable, [str(HOSTILE)], max_depth=8)
    connection = ServerConnection("hostile", transport, recorder, answer_error=wire_error)
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run)
        with anyio.fail_after(10):
            await connection.first_attempt_done.wait()
            with pytest.raises(ServerProtocolError, match="nested deeper than 8 levels"):
                await connection.request("tools/call", {"name": "deep_answer"})
        tg.cancel_scope.cancel()


@pytest.mark.slow
async def test_garbage_and_deep_notifications_are_dropped_and_the_call_still_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.outbound.over_stdio.transport")
    client = ClientRequest()
    async with hostile() as (connection, recorder):
        with anyio.fail_after(10):
            params = {"name": "noise", "_meta": {"progressToken": "mine"}}
            result = await connection.request("tools/call", params, relay=client)
            assert result == {"content": [{"type": "text", "text": "ok"}]}
            assert (await connection.request("tools/call", {"name": "echo"}))["content"][0]["text"] == "ok"
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)
    assert client.notified == []  # the deep progress never got past the decoder, the odd one nowhere
    assert recorder.notifications == []  # nor did the deep log line
    dropped = [r.getMessage() for r in caplog.records if "dropped a line" in r.getMessage()]
    assert len(dropped) == 6  # two deep notifications, not JSON, too deep to decode, two not JSON-RPC
    assert sum("nested deeper than 64 levels (limits.max_depth)" in line for line in dropped) == 3


class SlowClient(ClientRequest):
    """A client that takes its time to answer: the server's second request under the same id
    arrives while the first is still unanswered, however slowly the machine reads the pipe (a
    checkpoint alone was not enough on a loaded machine: the first could be answered first)."""

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        self.asked.append(method)
        await anyio.sleep(0.5)
        return {"roots": []}


@pytest.mark.slow
async def test_a_second_server_request_under_an_id_in_flight_is_refused_and_the_first_answered() -> None:
    client = SlowClient()
    async with hostile() as (connection, _):
        with anyio.fail_after(10):
            result = await connection.request("tools/call", {"name": "roots_twice"}, relay=client)
            assert (await connection.request("tools/call", {"name": "echo"}))["content"][0]["text"] == "ok"
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)
    refused, answered = orjson.loads(result["content"][0]["text"])
    assert refused == "request id 'r' is already in use by a request in flight"
    assert answered == "result"
    assert client.asked == ["roots/list"]  # the duplicate never reached the client


@pytest.mark.slow
async def test_a_request_that_cannot_be_encoded_fails_alone() -> None:
    async with hostile() as (connection, _):
        with anyio.fail_after(10):
            with pytest.raises(Unencodable, match="cannot encode"):
                await connection.request("tools/call", {"name": "echo", "arguments": {"n": 2**70}})
            assert (await connection.request("tools/call", {"name": "echo"}))["content"][0]["text"] == "ok"
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)
