"""A running ``Gateway`` whose one server, ``mem``, is a handshake-era MCP server in memory, for
the inbound tests; and the requests a 2026-07-28 client sends it.

The server records what it gets; lists its tools, prompts and resources; answers reads and the
tools ``echo``, ``slow`` (waits for ``release``), ``progress`` (``progress_steps`` notifications
first) and ``grow`` (a new tool, and the news of it); grows its lists and tells of resource updates
on cue; refuses to subscribe to ``REFUSED``; and answers anything else it is asked, ``server/discover``
among them, with -32601.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import orjson

from proxy.app.gateway import Gateway
from proxy.config.loading import config_from_mapping
from proxy.protocol import jsonrpc, stateless, versions
from proxy.protocol.jsonrpc import Message
from tests.outbound.memory import MemoryTransport, answer
from tests.protocol.schemas import validator

__all__ = ["INITIALIZE", "META", "REFUSED", "TOOLS", "V", "Server", "request", "running", "valid"]

V: Final = versions.LATEST_STATELESS
META: Final = {stateless.PROTOCOL_VERSION_KEY: V, stateless.CLIENT_CAPABILITIES_KEY: {}}
TOOLS: Final[list[dict[str, Any]]] = [
    {"name": name, "inputSchema": {"type": "object"}} for name in ("echo", "slow", "progress")
]
REFUSED: Final = "mem://b"  # the server refuses to subscribe to it
INITIALIZE: Final[dict[str, Any]] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


@dataclass
class Server:
    """A handshake-era server in memory: it records what it gets and answers a few tools."""

    received: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=lambda: list(TOOLS))
    prompts: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    progress_steps: int = 1
    started: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    unsubscribed: anyio.Event = field(default_factory=anyio.Event)
    _push: Callable[[Message], Awaitable[None]] | None = None

    async def __call__(self, message: Message, reply: Callable[[Message], Awaitable[None]]) -> None:
        self.received.append(message)
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            self._push = reply
            capabilities = {
                "tools": {"listChanged": True},
                "prompts": {"listChanged": True},
                "resources": {"subscribe": True, "listChanged": True},
            }
            info = {"name": "mem", "version": "0"}
            result = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "serverInfo": info}
            await reply(answer(message, result))
        elif method in ("tools/list", "prompts/list", "resources/list"):
            kind = str(method).split("/")[0]
            await reply(answer(message, {kind: list(getattr(self, kind))}))
        elif method == "resources/templates/list":
            await reply(answer(message, {"resourceTemplates": []}))
        elif method == "resources/read":
            await reply(answer(message, {"contents": [{"uri": params["uri"], "text": "A"}]}))
        elif method == "resources/subscribe" and params["uri"] == REFUSED:
            await reply(jsonrpc.error_response(message["id"], -32603, "not today"))
        elif method in ("resources/subscribe", "resources/unsubscribe"):
            await reply(answer(message, {}))
            if method == "resources/unsubscribe":
                self.unsubscribed.set()
        elif method == "notifications/cancelled":
            self.cancelled.set()
        elif method == "tools/call":
            if params["name"] == "slow":
                self.started.set()
                await self.release.wait()
            elif params["name"] == "grow":
                await self.change("tools")
            elif params["name"] == "progress":
                token = params["_meta"]["progressToken"]
                for step in range(1, self.progress_steps + 1):
                    note = {"progressToken": token, "progress": step, "total": self.progress_steps}
                    await reply(jsonrpc.notification("notifications/progress", note))
            text = orjson.dumps({"tool": params["name"], "arguments": params.get("arguments")}).decode()
            await reply(answer(message, {"content": [{"type": "text", "text": text}]}))
        elif "id" in message:  # server/discover among them: this server is handshake-era only
            error = {"code": -32601, "message": "Method not found"}
            await reply({"jsonrpc": "2.0", "id": message["id"], "error": error})

    async def change(self, kind: str) -> None:
        """Grow the tools, prompts or resources list and say so, as a server does."""
        items = getattr(self, kind)
        name = f"{kind[0]}{len(items)}"
        items.append({**items[0], "name": name, **({"uri": f"mem://{name}"} if kind == "resources" else {})})
        await self._tell(jsonrpc.notification(f"notifications/{kind}/list_changed"))

    async def update(self, uri: str) -> None:
        await self._tell(jsonrpc.notification("notifications/resources/updated", {"uri": uri}))

    async def _tell(self, message: Message) -> None:
        assert self._push is not None
        await self._push(message)

    def calls(self) -> list[Message]:
        return [m for m in self.received if m.get("method") == "tools/call"]

    def asked(self, method: str) -> list[str]:
        """The URIs of the ``method`` requests it got, e.g. ``resources/subscribe``."""
        return [m["params"]["uri"] for m in self.received if m.get("method") == method]


@asynccontextmanager
async def running(server: Server, **config: Any) -> AsyncIterator[Gateway]:
    """A running gateway, configured by ``config``, whose one server is ``server``."""
    mem = {"command": "unused-in-memory", "connect_timeout": 5, "request_timeout": 5}
    settings = {"servers": {"mem": mem}, **config}
    gateway = Gateway(config_from_mapping(settings, environ={}), transports={"mem": MemoryTransport(server)})
    async with gateway.running():
        yield gateway


def request(method: str, request_id: int | str = 1, meta: Any = META, **params: Any) -> dict[str, Any]:
    """A 2026-07-28 request: ``params`` with the envelope ``meta`` as their ``_meta``."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}


def valid(message: Any) -> Any:
    """``message``, checked against the 2026-07-28 schema."""
    validator(V, "JSONRPCMessage")(message)
    return message
