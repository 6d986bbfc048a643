"""``session_mode: per_client``: one connection per (client session, server).

Started on the session's first request to the server; stopped with the session, or once it has
been unused for ``limits.per_client_idle_timeout`` seconds (no request in flight, no resource
subscription of its session on it), and started again on the session's next request to that
server. At most ``limits.max_per_client_connections`` run at once, across servers and sessions:
each is a process (stdio) or a session at a server, started for a client that may never come
back. Past it the request that would start one is refused at once, naming the limit.

Each tells its server exactly the capabilities its client declared, and has that client as its
default relay, so a server's request outside any call (``roots/list`` after initialize) still
finds its way. It logs at its session's level (``logging/setLevel``, told when it starts and
whenever the session sets one), and its log lines go to that session alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc

from proxy.config import LimitsConfig, ServerConfig
from proxy.errors import LimitExceeded, ServerUnavailable
from proxy.inbound.session import ClientSession, InboundRequest
from proxy.outbound.connection import AnswerError, InternalErrorHook, ServerConnection, ServerState
from proxy.outbound.era import RELAYED, Era
from proxy.outbound.factory import transport_for
from proxy.outbound.levels import takes_levels, tell_level
from proxy.protocol.jsonrpc import Message

__all__ = ["ClientConnections"]

logger = logging.getLogger("proxy.per_client")

_SWEEPS_PER_TIMEOUT: Final = 4  # idle connections are looked for this often per idle timeout
_SWEEP_AT_MOST: Final = 30.0  # seconds between looks, however long the timeout

_Key = tuple[str, str]  # (session id, server id)


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


@dataclass(eq=False)
class _Running:
    session: ClientSession
    connection: ServerConnection
    scope: anyio.CancelScope
    used: float  # when a request last went out on it, or was last seen in flight
    waiting: int = 0  # requests waiting for it to connect (a slow start is no idleness)

    def idle(self, server_id: str) -> bool:
        """Whether nothing needs it now: no request waiting for it or in flight on it, no
        resource subscription of its session."""
        return (
            not self.waiting
            and not self.connection.in_flight
            and server_id not in self.session.subscriptions.values()
        )


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._servers = servers
        self._max_pages = max_pages
        self._limits = limits
        self._answer_error = answer_error
        self._on_internal_error = on_internal_error
        self._on_limit = on_limit
        self._max = limits.max_per_client_connections
        self._idle_timeout = limits.per_client_idle_timeout
        self._clock = clock
        self._running: dict[_Key, _Running] = {}
        self._tg: anyio.abc.TaskGroup | None = None  # while run() runs

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the connections' tasks until cancelled, stopping idle ones; ready once started."""
        sweep = min(_SWEEP_AT_MOST, self._idle_timeout / _SWEEPS_PER_TIMEOUT)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                task_status.started()
                while True:
                    await anyio.sleep(sweep)
                    self.stop_idle()
            finally:
                self._tg = None

    async def connection(self, session: ClientSession, server_id: str) -> ServerConnection:
        """The connection of ``session`` to ``server_id``, started on first use; waits (bounded)
        for its first attempt to finish.

        Raises:
            LimitExceeded: it would start one more than ``limits.max_per_client_connections``.
            ServerUnavailable: Manifold is shutting down.
        """
        key = (session.id, server_id)
        running = self._running.get(key)
        fresh = running is None
        if running is None:
            running = self._start(key, session, server_id)
        connection = running.connection
        running.waiting += 1
        try:
            with anyio.move_on_after(connection.connect_timeout + 1):
                await connection.first_attempt_done.wait()
            if fresh and session.log_level is not None and takes_levels(connection):
                await tell_level(connection, session.log_level)  # it logs at its session's level
        finally:
            running.waiting -= 1
            running.used = self._clock()
        return connection

    def _start(self, key: _Key, session: ClientSession, server_id: str) -> _Running:
        if self._tg is None:
            raise ServerUnavailable(server_id, "Manifold is shutting down")
        if len(self._running) >= self._max:
            raise LimitExceeded(
                f"Manifold runs as many per_client server connections as it may, so it cannot start "
                f"one for this session to {server_id}; try again once others end or go idle "
                f"({self._idle_timeout:g}s unused)",
                limit="max_per_client_connections",
                maximum=self._max,
            )
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
        running = self._running[key] = _Running(session, connection, anyio.CancelScope(), self._clock())
        self._tg.start_soon(
            _run_in, running.scope, connection, name=f"server {server_id} for {session.id[:8]}"
        )
        return running

    def stop_idle(self) -> int:
        """Stop every connection unused for the idle timeout (its session may start it again);
        how many."""
        now = self._clock()
        stale: list[_Key] = []
        for key, running in self._running.items():
            if not running.idle(key[1]):
                running.used = now  # busy: its idle time starts when it is done
            elif now - running.used >= self._idle_timeout:
                stale.append(key)
        for key in stale:
            self._running.pop(key).scope.cancel()
            logger.info(
                "per_client connection to %s for session %s stopped after %gs unused",
                key[1],
                key[0][:8],
                self._idle_timeout,
            )
        return len(stale)

    def of_session(self, session_id: str) -> list[ServerConnection]:
        """The connections running for a session."""
        return [running.connection for key, running in self._running.items() if key[0] == session_id]

    def close(self, session_id: str) -> None:
        """Stop every connection of a session that ended."""
        for key in [key for key in self._running if key[0] == session_id]:
            self._running.pop(key).scope.cancel()


async def _run_in(scope: anyio.CancelScope, connection: ServerConnection) -> None:
    with scope:
        await connection.run()
