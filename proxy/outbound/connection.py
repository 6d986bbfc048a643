"""One long-lived, multiplexed connection to one MCP server, kept alive by a supervisor.

``ServerConnection.run`` owns the server for Manifold's lifetime: it connects, performs
the ``initialize`` handshake, drains the tool list, then serves requests until the link
dies, and starts over after an exponential backoff. Requests from every client session
share the one link: each gets a fresh id from this connection's own counter, so clients
that reuse JSON-RPC ids can never receive each other's answers.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio

from proxy import __version__
from proxy.errors import ProtocolError, RemoteError, ServerTimeout, ServerUnavailable
from proxy.outbound.transport import Link, Transport
from proxy.protocol import jsonrpc, versions
from proxy.protocol.jsonrpc import Message, MessageKind

__all__ = ["ConnectionListener", "ServerConnection", "ServerState", "backoff_delay"]

logger = logging.getLogger("proxy.outbound.connection")

_STABLE_AFTER: Final = 30.0  # seconds up before a crash no longer counts toward the backoff
_CANCEL_GRACE: Final = 1.0


class ServerState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    BACKOFF = "backoff"


class ConnectionListener(Protocol):
    """What a connection tells the gateway. Called synchronously; must not block."""

    def tools_listed(self, server_id: str, tools: list[dict[str, Any]]) -> None: ...

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None: ...


def backoff_delay(attempt: int, *, base: float = 0.5, cap: float = 30.0, jitter: float = 0.2) -> float:
    """Seconds to wait before restart number ``attempt`` (0-based), with ±``jitter`` spread."""
    delay: float = min(cap, base * 2**attempt)
    return delay * random.uniform(1 - jitter, 1 + jitter)


@dataclass(slots=True)
class _Pending:
    event: anyio.Event = field(default_factory=anyio.Event)
    response: Message | None = None
    failure: ServerUnavailable | None = None


class ServerConnection:
    def __init__(
        self,
        server_id: str,
        transport: Transport,
        listener: ConnectionListener,
        *,
        connect_timeout: float = 30.0,
        request_timeout: float = 60.0,
        max_pages: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server_id = server_id
        self._transport = transport
        self._listener = listener
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._max_pages = max_pages
        self._clock = clock
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._link: Link | None = None
        self._refresh = anyio.Event()
        self.state = ServerState.STARTING
        self.reason: str | None = None
        self.restarts = 0
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self.protocol_version: str | None = None
        self.first_attempt_done = anyio.Event()

    # ---- public API -------------------------------------------------------------------

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Send one request and wait for its result.

        Raises:
            ServerUnavailable: the server is not connected, or went away mid-request.
            ServerTimeout: no answer within ``timeout`` (default: the server's request timeout).
            RemoteError: the server answered with a JSON-RPC error.
        """
        link = self._link
        if link is None or self.state is not ServerState.READY:
            raise ServerUnavailable(self.server_id, self.reason or self.state.value)
        return await self._call(link, method, params, self.request_timeout if timeout is None else timeout)

    async def run(self) -> None:
        """Keep the server connected until cancelled."""
        attempt = 0
        while True:
            started = self._clock()
            reason = await self._serve_once()
            self._link = None
            self._fail_pending(reason)
            if self._clock() - started >= _STABLE_AFTER:
                attempt = 0
            delay = backoff_delay(attempt)
            attempt += 1
            self._set_state(ServerState.BACKOFF, reason)
            logger.warning("server %s: %s; restarting in %.1fs", self.server_id, reason, delay)
            self.first_attempt_done.set()
            await anyio.sleep(delay)
            self.restarts += 1
            self._set_state(ServerState.STARTING, None)

    # ---- one connected lifetime ------------------------------------------------------

    async def _serve_once(self) -> str:
        """Connect, handshake, list, then serve until the link dies. Returns why it ended."""
        down: list[str] = []
        try:
            async with self._transport.connect() as link, anyio.create_task_group() as tg:
                tg.start_soon(self._read_loop, link, down, tg.cancel_scope)
                try:
                    with anyio.fail_after(self.connect_timeout):
                        await self._handshake(link)
                        tools = await self._list_tools(link)
                except TimeoutError:
                    down.append(f"no handshake within {self.connect_timeout:g}s (connect timeout)")
                except (ServerUnavailable, RemoteError, ProtocolError) as exc:
                    down.append(str(exc))
                if down:
                    tg.cancel_scope.cancel()
                    return down[0]
                self._link = link
                self._set_state(ServerState.READY, None)
                self._listener.tools_listed(self.server_id, tools)
                self.first_attempt_done.set()
                logger.info("server %s: ready, %d tools", self.server_id, len(tools))
                tg.start_soon(self._refresher, link, down, tg.cancel_scope)
        except ServerUnavailable as exc:
            return exc.reason if not down else down[0]
        return down[0] if down else "the connection closed"

    async def _read_loop(self, link: Link, down: list[str], scope: anyio.CancelScope) -> None:
        try:
            while True:
                await self._dispatch(link, await link.receive())
        except ServerUnavailable as exc:
            down.append(exc.reason)
        scope.cancel()

    async def _dispatch(self, link: Link, message: Message) -> None:
        kind = jsonrpc.kind_of(message)
        if kind is MessageKind.RESPONSE:
            slot = self._pending.get(message["id"]) if isinstance(message.get("id"), int) else None
            if slot is None:
                logger.debug(
                    "server %s: dropped a response to unknown id %r", self.server_id, message.get("id")
                )
                return
            slot.response = message
            slot.event.set()
        elif kind is MessageKind.REQUEST:
            await self._answer_server_request(link, message)
        elif message["method"] == "notifications/tools/list_changed":
            self._refresh.set()
        elif message["method"] == "notifications/message":
            params = message.get("params") or {}
            logger.info("server %s: log %s: %s", self.server_id, params.get("level"), params.get("data"))

    async def _answer_server_request(self, link: Link, message: Message) -> None:
        if message["method"] == "ping":
            reply = jsonrpc.result_response(message["id"], {})
        else:
            # Manifold advertises no client capabilities to servers, so a spec-abiding server
            # does not send these; answer rather than leave the server waiting.
            reply = jsonrpc.error_response(
                message["id"], -32601, f"Manifold does not relay {message['method']} to clients"
            )
        await link.send(reply)

    async def _refresher(self, link: Link, down: list[str], scope: anyio.CancelScope) -> None:
        """Re-list tools after the server says they changed; bursts coalesce into one re-list."""
        while True:
            await self._refresh.wait()
            self._refresh = anyio.Event()
            try:
                tools = await self._list_tools(link)
            except (ServerUnavailable, RemoteError, ProtocolError) as exc:
                logger.warning("server %s: re-listing tools failed: %s", self.server_id, exc)
                continue
            self._listener.tools_listed(self.server_id, tools)

    # ---- protocol steps --------------------------------------------------------------

    async def _handshake(self, link: Link) -> None:
        result = await self._call(
            link,
            "initialize",
            {
                "protocolVersion": versions.LATEST,
                "capabilities": {},
                "clientInfo": {"name": "manifold", "version": __version__},
            },
            self.connect_timeout,
        )
        if not isinstance(result, dict):
            raise ProtocolError(f"server {self.server_id!r} answered initialize with a non-object result")
        version = result.get("protocolVersion")
        if version not in versions.SUPPORTED:
            raise ServerUnavailable(
                self.server_id, f"it chose protocol revision {version!r}, which Manifold does not speak"
            )
        self.protocol_version = version
        self.capabilities = result.get("capabilities") or {}
        self.server_info = result.get("serverInfo") or {}
        await link.send(jsonrpc.notification("notifications/initialized"))

    async def _list_tools(self, link: Link) -> list[dict[str, Any]]:
        if "tools" not in self.capabilities:
            return []
        return await self._drain(link, "tools/list", "tools")

    async def _drain(self, link: Link, method: str, key: str) -> list[dict[str, Any]]:
        """Every page of a list, guarded against servers that page forever."""
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        cursor: str | None = None
        for _ in range(self._max_pages):
            result = await self._call(
                link, method, {"cursor": cursor} if cursor else None, self.request_timeout
            )
            page = result.get(key) if isinstance(result, dict) else None
            if not isinstance(page, list):
                raise ProtocolError(f"server {self.server_id!r} answered {method} without a {key!r} array")
            items.extend(page)
            cursor = result.get("nextCursor")
            if cursor is None:
                return items
            if not isinstance(cursor, str) or not cursor or cursor in seen:
                logger.warning(
                    "server %s: %s returned a bad or repeated cursor %r; keeping the %d items so far",
                    self.server_id, method, cursor, len(items),
                )  # fmt: skip
                return items
            seen.add(cursor)
        logger.warning(
            "server %s: %s still paging after %d pages; stopped", self.server_id, method, self._max_pages
        )
        return items

    async def _call(self, link: Link, method: str, params: dict[str, Any] | None, timeout: float) -> Any:
        request_id = next(self._ids)
        slot = _Pending()
        self._pending[request_id] = slot
        try:
            await link.send(jsonrpc.request(request_id, method, params))
            with anyio.move_on_after(timeout) as waited:
                await slot.event.wait()
            if waited.cancelled_caught:
                await self._cancel(link, request_id, "timeout")
                raise ServerTimeout(self.server_id, method, timeout)
        except anyio.get_cancelled_exc_class():
            # Our caller was cancelled: tell the server, under its id, and stop waiting.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_GRACE):
                await self._cancel(link, request_id, "cancelled by the client")
            raise
        finally:
            del self._pending[request_id]
        if slot.failure is not None:
            raise slot.failure
        assert slot.response is not None
        if "error" in slot.response:
            raise RemoteError(self.server_id, slot.response["error"])
        return slot.response["result"]

    async def _cancel(self, link: Link, request_id: int, reason: str) -> None:
        with contextlib.suppress(ServerUnavailable):
            await link.send(
                jsonrpc.notification("notifications/cancelled", {"requestId": request_id, "reason": reason})
            )

    def _fail_pending(self, reason: str) -> None:
        for slot in self._pending.values():
            slot.failure = ServerUnavailable(self.server_id, reason)
            slot.event.set()

    def _set_state(self, state: ServerState, reason: str | None) -> None:
        self.state, self.reason = state, reason
        self._listener.state_changed(self.server_id, state, reason)
