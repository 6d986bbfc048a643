"""Every connection to the configured servers, and which one a caller reaches a server on.

Each server has one shared, multiplexed :class:`~proxy.outbound.connection.ServerConnection`.
A server with ``session_mode: per_client`` also gets one connection per handshake-era client
session (:mod:`proxy.per_client`), so that it sees that client's capabilities and roots; a
2026-07-28 caller has no session to own one, and uses the shared connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
import anyio.abc

from proxy.boundary import Boundary, wire_error
from proxy.config import ServerConfig
from proxy.inbound.session import Client, ClientSession, InboundRequest
from proxy.metrics import Metrics
from proxy.outbound.connection import ConnectionListener, ServerConnection, ServerState
from proxy.outbound.era import Era
from proxy.outbound.factory import transport_for
from proxy.outbound.transport import Transport
from proxy.per_client import ClientConnections
from proxy.pipeline import Caller

__all__ = ["Connections", "ServerHealth", "Sharing"]

logger = logging.getLogger("proxy.connections")

_FIRST_ATTEMPT_SLACK: Final = 5.0  # seconds past a server's connect timeout that start-up waits


class Sharing:
    """Which connection a caller reaches each server on: ``session_mode``, and the caller's era."""

    def __init__(self, servers: Mapping[str, ServerConfig]) -> None:
        self._servers = servers

    def shares(self, caller: Client | Caller, server_id: str) -> bool:
        """Whether ``caller`` reaches the server on its shared connection (else on its own: a
        2026-07-28 caller has no session to own one)."""
        return self._servers[server_id].session_mode == "shared" or caller.stateless


class Connections:
    def __init__(
        self,
        servers: Sequence[ServerConfig],
        listener: ConnectionListener,
        *,
        max_pages: int,
        max_depth: int,
        boundary: Boundary,
        transports: Mapping[str, Transport] | None = None,  # by server id (tests), else the config's
        max_per_client: int = 100,  # limits.max_per_client_connections
        per_client_idle_timeout: float = 300.0,  # limits.per_client_idle_timeout
    ) -> None:
        self._servers = {s.id: s for s in servers}
        self._boundary = boundary
        self._sharing = Sharing(self._servers)
        given = transports or {}
        self.shared: dict[str, ServerConnection] = {
            server.id: ServerConnection(
                server.id,
                given.get(server.id) or transport_for(server, max_depth=max_depth),
                listener,
                connect_timeout=server.connect_timeout,
                request_timeout=server.request_timeout,
                max_pages=max_pages,
                era=Era.of(server.era),
                answer_error=wire_error,
                on_internal_error=self._caught,
            )
            for server in servers
        }
        self._per_client = ClientConnections(
            self._servers,
            max_pages=max_pages,
            max_depth=max_depth,
            answer_error=wire_error,
            on_internal_error=self._caught,
            max_connections=max_per_client,
            idle_timeout=per_client_idle_timeout,
        )

    def _caught(self, where: str, exc: BaseException) -> None:
        """A connection caught a failure of ours (and logged it): count it."""
        self._boundary.count("server_request" if where.endswith("server_request") else "server_connection")

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep every shared connection up until cancelled; ready once each has connected or
        failed its first attempt (bounded by its connect timeout)."""
        async with anyio.create_task_group() as tg:
            await tg.start(self._per_client.run)
            for connection in self.shared.values():
                tg.start_soon(connection.run, name=f"server {connection.server_id}")
            for connection in self.shared.values():
                with anyio.move_on_after(connection.connect_timeout + _FIRST_ATTEMPT_SLACK):
                    await connection.first_attempt_done.wait()
            task_status.started()

    def shares(self, caller: Client | Caller, server_id: str) -> bool:
        """Whether ``caller`` reaches the server on its shared connection (else on its own)."""
        return self._sharing.shares(caller, server_id)

    async def for_call(self, caller: Caller, server_id: str) -> ServerConnection:
        """The connection ``caller``'s request to ``server_id`` goes out on.

        Raises:
            LimitExceeded: a ``per_client`` connection would have to start, and as many run as
                ``limits.max_per_client_connections`` allows.
        """
        if self.shares(caller, server_id):
            return self.shared[server_id]
        # Only a handshake-era session's own request gets here: it has a session to own one.
        session = caller.session if isinstance(caller, InboundRequest) else None
        assert isinstance(session, ClientSession), f"{type(caller).__name__} has no session"
        return await self._per_client.connection(session, server_id)

    async def release(self, session: ClientSession) -> None:
        """A session ended: stop its own connections."""
        self._per_client.close(session.id)

    def health(self) -> dict[str, dict[str, Any]]:
        """Each server's state, for ``/healthz`` and ``/readyz``."""
        return {
            sid: {"state": c.state.value, "required": self._servers[sid].required, "reason": c.reason}
            for sid, c in self.shared.items()
        }

    def waiting_for(self) -> list[str]:
        """The required servers that are not up."""
        return [
            sid
            for sid, c in self.shared.items()
            if self._servers[sid].required and c.state is not ServerState.READY
        ]

    def instructions(self) -> str | None:
        notes = [f"{sid}: {c.instructions}" for sid, c in self.shared.items() if c.instructions]
        return "\n\n".join(notes) if notes else None


class ServerHealth:
    """What connections say of their state, as metrics: up, restarts, time to connect."""

    def __init__(self, metrics: Metrics, server_ids: Sequence[str]) -> None:
        self._metrics = metrics
        self._starting: dict[str, float] = {}
        for server_id in server_ids:
            metrics.server_up(server_id, False)

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        logger.debug("server %s: %s %s", server_id, state.value, reason or "")
        self._metrics.server_up(server_id, state is ServerState.READY)
        if state is ServerState.STARTING:
            if server_id in self._starting:  # a second start is a restart
                self._metrics.server_restart(server_id)
            self._starting[server_id] = time.monotonic()
        elif state is ServerState.READY and server_id in self._starting:
            self._metrics.server_connect_seconds(server_id, time.monotonic() - self._starting[server_id])
