"""Each server's era: server/discover first; any error or silence means initialize; remembered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from proxy.observe.boundary import wire_error
from proxy.outbound.connection import ServerConnection
from proxy.outbound.era import Era
from proxy.outbound.health import ServerState
from proxy.protocol.jsonrpc import Message
from tests.outbound.memory import MemoryTransport, answer, initialize_result
from tests.outbound.test_connection import Recorder

pytestmark = pytest.mark.anyio
# A valid W3C traceparent: a malformed one is not forwarded (proxy.tracing.w3c).
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

Reply = Callable[[Message], Awaitable[None]]
VERSION = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
LEVEL = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def error(message: Message, code: int, text: str = "no", data: Any = None) -> Message:
    body: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": message["id"], "error": body}


def discover_result(**extra: Any) -> dict[str, Any]:
    return {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}},
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "public",
        "_meta": {SERVER_INFO: {"name": "stateless-mem", "version": "2"}},
        **extra,
    }


@dataclass
class Server:
    """A memory server of a chosen era; records what it was sent."""

    stateless: bool = True
    handshake: bool = True
    silent_discover: bool = False
    refuse_initialize_once: bool = False  # -32022 to the first initialize (it went stateless-only)
    seen: list[Message] = field(default_factory=list)

    async def __call__(self, message: Message, reply: Reply) -> None:
        self.seen.append(message)
        method = message.get("method")
        if "id" not in message:
            return
        params = message.get("params") or {}
        enveloped = VERSION in (params.get("_meta") or {})
        if method == "server/discover":
            if self.silent_discover:
                return
            if self.stateless:
                await reply(answer(message, discover_result(instructions="be nice")))
            else:
                await reply(error(message, -32601, "Method not found"))
        elif method == "initialize":
            if self.refuse_initialize_once:
                self.refuse_initialize_once = False
                self.handshake, self.stateless = False, True
                await reply(error(message, -32022, "Unsupported", {"supported": ["2026-07-28"]}))
            elif self.handshake:
                await reply(answer(message, initialize_result()))
            else:
                await reply(error(message, -32022, "Unsupported", {"supported": ["2026-07-28"]}))
        elif method == "tools/list":
            await reply(answer(message, {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}))
        elif method == "tools/call":
            await reply(answer(message, {"content": [], "enveloped": enveloped, "meta": params.get("_meta")}))


@dataclass
class Caller:
    """A Relay: the client a request is for."""

    capabilities: dict[str, Any]
    log_level: str | None = None
    session_id: str = "s1"
    asleep: bool = False

    def notify(self, message: Message) -> None:
        pass

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        raise AssertionError("not asked in these tests")


@asynccontextmanager
async def connected(server: Server, **options: Any) -> AsyncIterator[ServerConnection]:
    connection = ServerConnection(
        "mem", MemoryTransport(server), Recorder(), connect_timeout=3, answer_error=wire_error, **options
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run)
        with anyio.fail_after(5):
            await connection.first_attempt_done.wait()
        yield connection
        tg.cancel_scope.cancel()


def methods(server: Server) -> list[str]:
    return [m["method"] for m in server.seen if "method" in m]


async def test_a_server_that_discovers_is_spoken_to_in_2026_07_28_without_a_handshake() -> None:
    server = Server()
    async with connected(server) as connection:
        assert (connection.era, connection.state) == (Era.STATELESS, ServerState.READY)
        assert connection.protocol_version == "2026-07-28"
        assert connection.server_info == {"name": "stateless-mem", "version": "2"}
        assert connection.instructions == "be nice"
        result = await connection.request("tools/call", {"name": "t"}, relay=Caller({"sampling": {}}))
    assert result["enveloped"] is True
    assert methods(server) == ["server/discover", "tools/list", "tools/call"]
    listed = next(m for m in server.seen if m["method"] == "tools/list")
    assert listed["params"]["_meta"][CAPS] == {}  # on nobody's behalf: nothing to ask


async def test_the_envelope_is_the_callers_capabilities_it_may_be_asked_and_its_log_level() -> None:
    server = Server()
    caller = Caller({"sampling": {}, "elicitation": {"form": {}}, "experimental": {"x": {}}}, "warning")
    async with connected(server) as connection:
        result = await connection.request(
            "tools/call",
            {"name": "t", "_meta": {"progressToken": "p", "traceparent": TRACEPARENT}},
            relay=caller,
        )
    meta = result["meta"]
    assert meta[VERSION] == "2026-07-28"
    assert meta[CAPS] == {"sampling": {}, "elicitation": {"form": {}}}
    assert meta[LEVEL] == "warning"
    assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "manifold"
    assert meta["traceparent"] == TRACEPARENT
    assert isinstance(meta["progressToken"], int)  # remapped, as for any shared connection


async def test_a_server_that_refuses_discover_gets_initialize_and_no_envelopes() -> None:
    server = Server(stateless=False)
    async with connected(server) as connection:
        assert connection.era is Era.HANDSHAKE
        assert connection.protocol_version == "2025-11-25"
        result = await connection.request("tools/call", {"name": "t"}, relay=Caller({}))
    assert result["enveloped"] is False
    assert methods(server)[:3] == ["server/discover", "initialize", "notifications/initialized"]


@pytest.mark.slow
async def test_a_server_silent_on_discover_gets_initialize_after_the_probe_timeout() -> None:
    server = Server(silent_discover=True)
    started = anyio.current_time()
    async with connected(server) as connection:
        assert connection.era is Era.HANDSHAKE
    assert anyio.current_time() - started >= 1.0  # connect_timeout / 3
    assert methods(server)[:3] == ["server/discover", "notifications/cancelled", "initialize"]


async def test_a_pinned_legacy_server_is_never_probed() -> None:
    server = Server()
    async with connected(server, era=Era.HANDSHAKE) as connection:
        assert connection.era is Era.HANDSHAKE
    assert "server/discover" not in methods(server)


async def test_a_pinned_modern_server_that_does_not_discover_is_down_not_legacy() -> None:
    server = Server(stateless=False)
    async with connected(server, era=Era.STATELESS) as connection:
        assert connection.state is ServerState.BACKOFF
        assert "era: stateless" in (connection.reason or "")
    assert "initialize" not in methods(server)


async def test_a_remembered_legacy_server_that_went_modern_is_probed_again() -> None:
    server = Server(refuse_initialize_once=True)
    connection = ServerConnection(
        "mem", MemoryTransport(server), Recorder(), connect_timeout=3, answer_error=wire_error
    )
    connection.era = Era.HANDSHAKE  # what an earlier lifetime found
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run)
        with anyio.fail_after(5):
            await connection.first_attempt_done.wait()
        assert (connection.era, connection.state) == (Era.STATELESS, ServerState.READY)
        tg.cancel_scope.cancel()
    assert methods(server)[:2] == ["initialize", "server/discover"]


async def test_a_modern_server_subscriptions_become_its_listen_filter() -> None:
    listens: list[dict[str, Any]] = []
    opened = anyio.Event()
    cancel_seen = anyio.Event()

    class Listening(Server):
        async def __call__(self, message: Message, reply: Reply) -> None:
            if message.get("method") == "notifications/cancelled":
                cancel_seen.set()
            if message.get("method") == "server/discover":
                caps = {"resources": {"subscribe": True, "listChanged": True}, "tools": {"listChanged": True}}
                await reply(answer(message, discover_result(capabilities=caps)))
            elif message.get("method") == "subscriptions/listen":
                self.seen.append(message)
                listens.append(message["params"]["notifications"])
                opened.set()
                await anyio.sleep_forever()
            elif message.get("method") in ("resources/list", "resources/templates/list"):
                key = "resources" if message["method"] == "resources/list" else "resourceTemplates"
                await reply(answer(message, {key: []}))
            else:
                await super().__call__(message, reply)

    server = Listening()
    async with connected(server) as connection:
        with anyio.fail_after(3):
            await opened.wait()
        opened = anyio.Event()
        assert await connection.request("resources/subscribe", {"uri": "r://a"}) == {}
        with anyio.fail_after(3):
            await opened.wait()
        with anyio.fail_after(3):
            await cancel_seen.wait()
        cancelled = [m for m in server.seen if m.get("method") == "notifications/cancelled"]
        assert "resources/subscribe" not in methods(server)
    assert listens[0] == {"toolsListChanged": True, "resourcesListChanged": True, "resourceSubscriptions": []}
    assert listens[1]["resourceSubscriptions"] == ["r://a"]
    first_listen = next(m for m in server.seen if m.get("method") == "subscriptions/listen")
    assert [c["params"]["requestId"] for c in cancelled] == [first_listen["id"]]  # the old one, after


async def test_a_handshake_server_hears_of_the_tasks_manifold_holds_and_a_stateless_one_does_not() -> None:
    server = Server(stateless=False)
    async with connected(server, client_capabilities={"elicitation": {}, "roots": {}}):
        pass
    initialize = next(m for m in server.seen if m.get("method") == "initialize")
    assert initialize["params"]["capabilities"] == {
        "elicitation": {},
        "roots": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"elicitation": {"create": {}}}},
    }
    stateless = Server()
    async with connected(stateless) as connection:
        await connection.request("tools/call", {"name": "t"}, relay=Caller({"sampling": {}}))
    call = next(m for m in stateless.seen if m.get("method") == "tools/call")
    assert call["params"]["_meta"][CAPS] == {"sampling": {}}  # 2026-07-28: no tasks this way round
