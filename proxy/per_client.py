"""``session_mode: per_client``: one connection per (client session, server).

Started on the session's first request to the server, stopped with the session. Each tells its
server exactly the capabilities its client declared, and has that client as its default relay,
so a server's request outside any call (``roots/list`` after initialize) still finds its way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc

from proxy.config import LimitsConfig, ServerConfig
from proxy.errors import LimitExceeded, ServerUnavailable
from proxy.inbound.session import ClientSession, InboundRequest
from proxy.outbound.connection import AnswerError, InternalErrorHook, ServerConnection, ServerState
from proxy.outbound.era import RELAYED, Era
from proxy.outbound.factory import transport_for
from proxy.protocol.jsonrpc import Message

__all__ = ["ClientConnections"]


class _SessionListener:
    """Its lists are the shared connection's business; what it says unprompted is for its session."""

    def __init__(self, session: ClientSession) -> None:
        self._session = session

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        return None

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        return None

    def server_notification(self, server_id: str, message: Message) -> None:
        if self._session.wants_notification(message):
            self._session.notify(message)


class ClientConnections:
    def __init__(
        self,
        servers: Mapping[str, ServerConfig],
        *,
        max_pages: int,
        limits: LimitsConfig,
        answer_error: AnswerError,
        on_internal_error: InternalErrorHook | None = None,
        on_limit: Callable[[LimitExceeded], None] | None = None,
    ) -> None:
        self._servers = servers
        self._max_pages = max_pages
        self._limits = limits
        self._on_limit = on_limit
        self._answer_error = answer_error
        self._on_internal_error = on_internal_error
        self._connections: dict[tuple[str, str], ServerConnection] = {}
        self._scopes: dict[tuple[str, str], anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None  # while run() runs

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the connections' tasks until cancelled; ready once started."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None

    async def connection(self, session: ClientSession, server_id: str) -> ServerConnection:
        """The connection of ``session`` to ``server_id``, started on first use; waits (bounded)
        for its first attempt to finish."""
        key = (session.id, server_id)
        connection = self._connections.get(key)
        if connection is None:
            if self._tg is None:
                raise ServerUnavailable(server_id, "Manifold is shutting down")
            server = self._servers[server_id]
            connection = ServerConnection(
                server_id,
                transport_for(server, limits=self._limits),
                _SessionListener(session),
                connect_timeout=server.connect_timeout,
                request_timeout=server.request_timeout,
                max_pages=self._max_pages,
                era=Era.of(server.era),
                client_capabilities={k: v for k, v in session.capabilities.items() if k in RELAYED},
                default_relay=InboundRequest(session),
                answer_error=self._answer_error,
                on_internal_error=self._on_internal_error,
                max_items=self._limits.max_server_items,
                failures_until_unready=self._limits.failures_until_unready,
                on_limit=self._on_limit,
            )
            scope = anyio.CancelScope()
            self._connections[key] = connection
            self._scopes[key] = scope
            self._tg.start_soon(_run_in, scope, connection, name=f"server {server_id} for {session.id[:8]}")
        with anyio.move_on_after(connection.connect_timeout + 1):
            await connection.first_attempt_done.wait()
        return connection

    def close(self, session_id: str) -> None:
        """Stop every connection of a session that ended."""
        for key in [key for key in self._scopes if key[0] == session_id]:
            self._scopes.pop(key).cancel()
            del self._connections[key]


async def _run_in(scope: anyio.CancelScope, connection: ServerConnection) -> None:
    with scope:
        await connection.run()
