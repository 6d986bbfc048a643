"""The gateway: every configured server behind one MCP endpoint.

``Gateway`` owns the server connections, the merged catalog and the client sessions. The
inbound transports (``proxy.inbound.http``, ``proxy.inbound.stdio``) hand it whole messages
with :meth:`Gateway.handle` and deliver what it answers; they hold no MCP logic of their own.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import orjson
from cachetools import LRUCache

from proxy import __version__
from proxy.catalog.cursors import CursorCodec, paginate
from proxy.catalog.merge import EMPTY_CATALOG, Catalog, ServerSlice, build_catalog, replace_slice
from proxy.catalog.naming import NamingCodec
from proxy.config import Config, ServerConfig
from proxy.errors import InvalidParams, InvalidRequest, MethodNotFound
from proxy.inbound.session import ClientSession
from proxy.outbound.connection import ServerConnection, ServerState
from proxy.outbound.stdio import StdioTransport
from proxy.outbound.transport import Transport
from proxy.pipeline import CallContext, Handler, compose, wire_error
from proxy.protocol import jsonrpc, versions
from proxy.protocol.jsonrpc import Message, MessageKind
from proxy.router import Router

__all__ = ["Gateway", "transport_for"]

logger = logging.getLogger("proxy.app")

_LIST_CHANGED: Final = jsonrpc.notification("notifications/tools/list_changed")


def transport_for(server: ServerConfig) -> Transport:
    if server.kind == "stdio":
        assert server.command is not None
        return StdioTransport(
            server.id, server.command, server.args, env=server.resolved_env(), cwd=server.cwd
        )
    assert server.url is not None
    assert server.transport != "stdio"
    from proxy.outbound.http import http_transport  # aiohttp loads only when an HTTP server is configured

    return http_transport(
        server.id,
        server.url,
        server.resolved_headers(),
        server.transport,
        connect_timeout=server.connect_timeout,
    )


class Gateway:
    def __init__(self, config: Config, *, cursor_key: bytes | None = None) -> None:
        self.config = config
        self.codec = NamingCodec(config.naming.separator, config.naming.max_length)
        self.cursors = CursorCodec(cursor_key or secrets.token_bytes(32))
        self.sessions: dict[str, ClientSession] = {}
        self.connections: dict[str, ServerConnection] = {
            server.id: ServerConnection(
                server.id,
                transport_for(server),
                self,
                connect_timeout=server.connect_timeout,
                request_timeout=server.request_timeout,
                max_pages=config.catalog.max_server_pages,
            )
            for server in config.enabled_servers()
        }
        self._slices = tuple(ServerSlice(s.id, s.prefix, ()) for s in config.enabled_servers())
        self._prefixes = {s.id: s.prefix for s in config.enabled_servers()}
        self.catalog: Catalog = EMPTY_CATALOG
        # Encoded pages of the merged list, keyed by (generation, cursor): a warm tools/list
        # costs one dict lookup and no re-encoding of the tool definitions.
        self._pages: LRUCache[tuple[str, str | None], orjson.Fragment] = LRUCache(maxsize=512)
        self._call: Handler = compose([], Router(self.connections))

    # ---- lifecycle ---------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Gateway]:
        """Start every server; yield once each has connected or failed its first attempt."""
        async with anyio.create_task_group() as tg:
            for connection in self.connections.values():
                tg.start_soon(connection.run, name=f"server {connection.server_id}")
            for connection in self.connections.values():
                with anyio.move_on_after(connection.connect_timeout + 5):
                    await connection.first_attempt_done.wait()
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    # ---- ConnectionListener ------------------------------------------------------------

    def tools_listed(self, server_id: str, tools: list[dict[str, Any]]) -> None:
        self._slices = replace_slice(self._slices, ServerSlice(server_id, self._prefixes[server_id], tools))
        catalog = build_catalog(self._slices, self.codec)
        for collision in catalog.collisions:
            if collision not in self.catalog.collisions:
                logger.warning("name collision: %s", collision.describe())
        for server, reason in catalog.invalid:
            logger.warning("server %s: skipped a tool: %s", server, reason)
        if catalog.generation == self.catalog.generation:
            return
        self.catalog = catalog
        self._pages.clear()
        for session in self.sessions.values():
            if session.initialized:
                session.notify(_LIST_CHANGED)

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        if state is ServerState.READY:
            logger.info("server %s: %s", server_id, state.value)

    # ---- inbound messages --------------------------------------------------------------

    async def handle(self, session: ClientSession, message: Message) -> Message | None:
        """Answer one validated message from ``session``; ``None`` when there is nothing to send.

        Never raises for a bad request: every failure becomes an error response here.
        Cancellation propagates (nothing is written back for a cancelled request).
        """
        kind = jsonrpc.kind_of(message)
        if kind is MessageKind.NOTIFICATION:
            self._notification(session, message)
            return None
        if kind is MessageKind.RESPONSE:
            return None  # Manifold sends clients no requests yet; nothing waits for answers
        request_id = message["id"]
        # The client may cancel this request by id (notifications/cancelled): its own scope.
        with anyio.CancelScope() as scope:
            session.in_flight[request_id] = scope
            try:
                result = await self._request(
                    session, message["method"], message.get("params") or {}, request_id
                )
            except Exception as exc:
                return wire_error(exc, request_id)
            finally:
                session.in_flight.pop(request_id, None)
            return jsonrpc.result_response(request_id, result)
        return None  # cancelled by the client: the spec says nothing is sent back

    def _notification(self, session: ClientSession, message: Message) -> None:
        method = message["method"]
        if method == "notifications/initialized":
            session.initialized = True
        elif method == "notifications/cancelled":
            request_id = (message.get("params") or {}).get("requestId")
            scope = session.in_flight.get(request_id) if isinstance(request_id, str | int) else None
            if scope is not None:
                scope.cancel()

    async def _request(
        self, session: ClientSession, method: str, params: dict[str, Any], request_id: Any
    ) -> Any:
        if method == "tools/call":
            return await self._tools_call(session, params, request_id)
        if method == "tools/list":
            return self._tools_list(params)
        if method == "ping":
            return {}
        if method == "initialize":
            return self.initialize(session, params)
        raise MethodNotFound(f"method not found: {method}")

    def initialize(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        if session.protocol_version is not None:
            raise InvalidRequest("this session is already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise InvalidParams('initialize needs a string "protocolVersion"')
        session.protocol_version = versions.negotiate(requested)
        session.capabilities = params.get("capabilities") or {}
        session.client_info = params.get("clientInfo") or {}
        return {
            "protocolVersion": session.protocol_version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "manifold", "version": __version__},
        }

    def _tools_list(self, params: dict[str, Any]) -> orjson.Fragment:
        cursor = params.get("cursor")
        key = (self.catalog.generation, cursor if isinstance(cursor, str) else None)
        cached = self._pages.get(key) if cursor is None or isinstance(cursor, str) else None
        if cached is not None:
            return cached
        page = paginate(
            self.catalog.definitions,
            cursor=cursor,
            page_size=self.config.catalog.page_size,
            codec=self.cursors,
            generation=self.catalog.generation,
        )
        result: dict[str, Any] = {"tools": page.items}
        if page.next_cursor is not None:
            result["nextCursor"] = page.next_cursor
        fragment = orjson.Fragment(orjson.dumps(result))
        self._pages[key] = fragment
        return fragment

    async def _tools_call(self, session: ClientSession, params: dict[str, Any], request_id: Any) -> Any:
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams('tools/call needs a string "name"')
        entry = self.catalog.by_name.get(name)
        if entry is None:
            raise InvalidParams(f"unknown tool: {name}")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams('"arguments" must be an object')
        ctx = CallContext(session.id, request_id, entry, arguments or {}, params)
        return await self._call(ctx)
