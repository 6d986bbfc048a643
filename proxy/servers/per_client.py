"""``session_mode: per_client``: one connection per (client, server).

The client is its *owner* (:func:`owner`): a handshake-era session, or, for 2026-07-28 callers,
which have no session, their identity (:func:`owner_of`): every stateless request of one
identity reaches the same connection, and no other identity's. Started on the owner's first
request to the server; stopped with the session, or once it has been unused for
``limits.per_client_idle_timeout`` seconds (no request in flight, no resource subscription of
its session or its identity's listen streams on it), and started again on the owner's next
request to that server. At most ``limits.max_per_client_connections`` run at once, across
servers and owners: each is a process (stdio) or a session at a server, started for a client
that may never come back. Past it the request that would start one is refused at once, naming
the limit.

Each tells its server the capabilities its client declared (a 2026-07-28 identity's: those of
the request that started it, kept for its lifetime) and has a default relay, so a server's
request outside any call (``roots/list`` after initialize) still finds its way: a session is
asked on its standalone stream; an identity's question waits at its :class:`Doorway` for the
identity's next call, which asks it (``input_required``) before its own request goes out.
What each lists is its owner's (:attr:`ClientConnections.lists`: :mod:`proxy.views.per_client`).

A server whose ``credentials.mode`` is not ``shared`` is reached this way too (the mode implies
``per_client``), each connection built with its owner's identity's credentials
(:mod:`proxy.credentials`). They are looked up on every request that goes to the server: when
they changed since the connection started (replaced, refreshed) it is stopped and started again
with the new ones; when there are none any more (revoked) it is stopped and the request fails
with :class:`~proxy.core.errors.SignInNeeded`. Sessions of one identity do not share a connection:
each carries its own session's capabilities, roots and questions, as for any per_client server.
A session's connection logs at its session's level (``logging/setLevel``, told when it starts
and whenever the session sets one), and its log lines go to that session alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import anyio.abc

from proxy.clients.session import ClientSession, InboundRequest, StatelessCaller
from proxy.config.model import LimitsConfig, ServerConfig
from proxy.core.errors import LimitExceeded, ServerUnavailable, SignInNeeded
from proxy.credentials import Credentials, Sources
from proxy.outbound.client_tasks import ClientTasks
from proxy.outbound.connection import AnswerError, InternalErrorHook, ServerConnection
from proxy.outbound.era import Era, relayed_capabilities
from proxy.outbound.factory import transport_for
from proxy.outbound.health import ServerState
from proxy.outbound.levels import takes_levels, tell_level
from proxy.policy.model import Identity
from proxy.protocol.jsonrpc import Message
from proxy.servers.held_questions import Doorstep, Doorway

__all__ = ["ClientConnections", "PerClientLists", "PerClientNotices", "Owner", "owner", "owner_of"]

logger = logging.getLogger("proxy.servers.per_client")

_SWEEPS_PER_TIMEOUT: Final = 4  # idle connections are looked for this often per idle timeout
_SWEEP_AT_MOST: Final = 30.0  # seconds between looks, however long the timeout

# Whose a per_client connection is: a session's id, or a 2026-07-28 caller's identity key.
Owner = str | tuple[str, ...]
_Key = tuple[Owner, str]  # (owner, server id)


def owner_of(identity: Identity) -> tuple[str, ...]:
    """The owner of a 2026-07-28 caller's per_client connections and catalog: its identity's key
    (source, issuer, subject), never its name. The one place that key is made."""
    return identity.key


def owner(client: ClientSession | StatelessCaller) -> Owner:
    """Whose connections ``client`` reaches: its session's, else its identity's."""
    return client.id if isinstance(client, ClientSession) else owner_of(client.identity)


class PerClientLists(Protocol):
    """Who hears what an owner's connections list (:class:`proxy.views.per_client.PerClientCatalogs`)."""

    def listed(self, owner: Owner, server_id: str, kind: str, items: list[dict[str, Any]]) -> None: ...

    def gone(self, owner: Owner) -> None:
        """The owner has no per_client connection left."""
        ...


class PerClientNotices(Protocol):
    """Who hears what an identity's own connection says unprompted
    (:class:`proxy.notify.list_changes.Notices`)."""

    def per_client_notification(self, owner: Owner, server_id: str, message: Message) -> None: ...


class _Unheard:
    def listed(self, owner: Owner, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        return None

    def gone(self, owner: Owner) -> None:
        return None

    def per_client_notification(self, owner: Owner, server_id: str, message: Message) -> None:
        return None


class _OwnerListener:
    """Its lists are its owner's; what it says unprompted is for its session, or for its
    identity's listen streams (resource updates: a 2026-07-28 caller hears log lines only on
    its requests' streams)."""

    def __init__(
        self,
        key: Owner,
        session: ClientSession | None,
        lists: Callable[[], PerClientLists],
        notices: Callable[[], PerClientNotices],
    ) -> None:
        self._owner = key
        self._session = session
        self._lists = lists
        self._notices = notices

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        self._lists().listed(self._owner, server_id, kind, items)

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        return None

    def server_notification(self, server_id: str, message: Message) -> None:
        if self._session is None:
            self._notices().per_client_notification(self._owner, server_id, message)
        elif self._session.wants_notification(message):
            self._session.notify(message)


@dataclass(eq=False)
class _Running:
    session: ClientSession | None  # None: a 2026-07-28 identity's
    connection: ServerConnection
    scope: anyio.CancelScope
    used: float  # when a request last went out on it, or was last seen in flight
    doorway: Doorway  # where the server's questions outside a call go
    credentials: Credentials  # what it was built with (its owner's identity's; empty: shared)
    waiting: int = 0  # requests waiting for it to connect (a slow start is no idleness)
    held: int = 0  # resource subscriptions its identity's listen streams hold on it

    def idle(self, server_id: str) -> bool:
        """Whether nothing needs it now: no request waiting for it or in flight on it, no
        resource subscription of its session or its identity's listen streams."""
        return (
            not self.waiting
            and not self.held
            and not self.connection.in_flight
            and (self.session is None or server_id not in self.session.subscriptions.values())
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
        credentials: Sources | None = None,
    ) -> None:
        self._servers = servers
        self._credentials = credentials or Sources({})
        self._max_pages = max_pages
        self._limits = limits
        self._answer_error = answer_error
        self._on_internal_error = on_internal_error
        self._on_limit = on_limit
        self._max = limits.max_per_client_connections
        self._idle_timeout = limits.per_client_idle_timeout
        self._clock = clock
        self._running: dict[_Key, _Running] = {}
        self._by_connection: dict[ServerConnection, _Running] = {}
        self._tg: anyio.abc.TaskGroup | None = None  # while run() runs
        self.lists: PerClientLists = _Unheard()  # wired by the composition root
        self.notices: PerClientNotices = _Unheard()  # likewise

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

    def running(self, client: ClientSession | StatelessCaller, server_id: str) -> bool:
        """Whether ``client``'s connection to ``server_id`` runs now."""
        return (owner(client), server_id) in self._running

    async def connection(self, client: ClientSession | StatelessCaller, server_id: str) -> ServerConnection:
        """The connection of ``client`` (its session, or its identity: :func:`owner`) to
        ``server_id``, started on first use; waits (bounded) for its first attempt to finish.

        Raises:
            LimitExceeded: it would start one more than ``limits.max_per_client_connections``.
            SignInNeeded: the server takes each identity's own credentials, and this one has none.
            ServerUnavailable: Manifold is shutting down, or the credentials cannot be read now.
        """
        key = (owner(client), server_id)
        own = await self._own_credentials(key, client, server_id)
        running = self._running.get(key)
        if running is not None and running.credentials != own:
            logger.info(
                "per_client connection to %s restarted: its identity's credentials changed", server_id
            )
            running.connection.retire("its connection for this identity restarted: credentials changed")
            self._stop(key)
            running = None
        fresh = running is None
        if running is None:
            running = self._start(key, client, server_id, own)
        connection = running.connection
        running.waiting += 1
        try:
            with anyio.move_on_after(connection.connect_timeout + 1):
                await connection.first_attempt_done.wait()
            if running.session is not None and not running.doorway.settled:
                # What the server asked its session while starting (roots/list after initialize)
                # is answered before the session's first request goes out: it works with those roots.
                await connection.answered(connection.connect_timeout)
                running.doorway.settled = True
            session = running.session
            if fresh and session is not None and session.log_level is not None and takes_levels(connection):
                await tell_level(connection, session.log_level)  # it logs at its session's level
        finally:
            running.waiting -= 1
            running.used = self._clock()
        return connection

    async def _own_credentials(
        self, key: _Key, client: ClientSession | StatelessCaller, server_id: str
    ) -> Credentials:
        """The credentials ``client``'s connection to ``server_id`` is built with (empty for a
        shared-credentials server); none any more stops the one running."""
        if server_id not in self._credentials:
            return Credentials()
        try:
            return await self._credentials.credentials(client.identity, server_id)
        except SignInNeeded:
            if key in self._running:
                logger.info(
                    "per_client connection to %s stopped: its identity's credentials are gone", server_id
                )
                self._running[key].connection.retire(
                    "its connection for this identity stopped: the identity's credentials are gone"
                )
                self._stop(key)
            raise

    def find(self, client: ClientSession | StatelessCaller, server_id: str) -> ServerConnection | None:
        """``client``'s connection to ``server_id`` if it runs (none is started)."""
        running = self._running.get((owner(client), server_id))
        return None if running is None else running.connection

    def hold(self, client: ClientSession | StatelessCaller, server_id: str, count: int) -> None:
        """``count`` more (or, negative, fewer) subscriptions held on ``client``'s running
        connection to ``server_id``: one that holds any is not idle."""
        running = self._running.get((owner(client), server_id))
        if running is not None:
            running.held = max(0, running.held + count)

    def asked_through(self, connection: ServerConnection) -> ServerConnection | Doorstep:
        """``connection`` as a 2026-07-28 caller's call goes out on it
        (:mod:`proxy.servers.held_questions`)."""
        running = self._by_connection.get(connection)
        if running is None or running.session is not None:
            return connection
        return Doorstep(connection, running.doorway)

    def _start(
        self, key: _Key, client: ClientSession | StatelessCaller, server_id: str, own: Credentials
    ) -> _Running:
        if self._tg is None:
            raise ServerUnavailable(server_id, "Manifold is shutting down")
        whose = "session" if isinstance(client, ClientSession) else "identity"
        if len(self._running) >= self._max:
            raise LimitExceeded(
                f"Manifold runs as many per_client server connections as it may, so it cannot start "
                f"one for this {whose} to {server_id}; try again once others end or go idle "
                f"({self._idle_timeout:g}s unused)",
                limit="max_per_client_connections",
                maximum=self._max,
            )
        server = self._servers[server_id]
        capabilities = relayed_capabilities(client.capabilities)
        session = client if isinstance(client, ClientSession) else None
        standing = None if session is None else InboundRequest(session)
        name = f"identity-{client.identity.name}" if session is None else session.id
        doorway = Doorway(name, capabilities, hold=server.request_timeout, standing=standing)
        connection = ServerConnection(
            server_id,
            transport_for(server, limits=self._limits, headers=own.headers, env=own.env),
            _OwnerListener(key[0], session, lambda: self.lists, lambda: self.notices),
            connect_timeout=server.connect_timeout,
            request_timeout=server.request_timeout,
            max_pages=self._max_pages,
            era=Era.of(server.era),
            client_capabilities=capabilities,
            default_relay=doorway,
            answer_error=self._answer_error,
            on_internal_error=self._on_internal_error,
            max_items=self._limits.max_server_items,
            failures_until_unready=self._limits.failures_until_unready,
            on_limit=self._on_limit,
            client_tasks=ClientTasks.from_limits(server_id, self._limits),
        )
        running = _Running(session, connection, anyio.CancelScope(), self._clock(), doorway, own)
        self._running[key] = self._by_connection[connection] = running
        label = key[0][:8] if isinstance(key[0], str) else f"{whose} {client.identity.name}"
        self._tg.start_soon(_run_in, running.scope, connection, name=f"server {server_id} for {label}")
        return running

    def stop_idle(self) -> int:
        """Stop every connection unused for the idle timeout (its owner may start it again);
        how many."""
        now = self._clock()
        stale: list[_Key] = []
        for key, running in self._running.items():
            if not running.idle(key[1]):
                running.used = now  # busy: its idle time starts when it is done
            elif now - running.used >= self._idle_timeout:
                stale.append(key)
        for key in stale:
            self._stop(key)
            logger.info(
                "per_client connection to %s for %s stopped after %gs unused",
                key[1],
                f"session {key[0][:8]}" if isinstance(key[0], str) else "an identity",
                self._idle_timeout,
            )
        return len(stale)

    def of_session(self, session_id: str) -> list[ServerConnection]:
        """The connections running for a session."""
        return [running.connection for key, running in self._running.items() if key[0] == session_id]

    def close(self, key: Owner) -> None:
        """Stop every connection of an owner (a session that ended)."""
        for running_key in [k for k in self._running if k[0] == key]:
            self._stop(running_key)

    def close_server(self, server_id: str, reason: str) -> None:
        """Stop every connection to ``server_id`` (removed or replaced by a reload), failing
        the requests in flight on them with ``reason``."""
        for running_key in [k for k in self._running if k[1] == server_id]:
            self._running[running_key].connection.retire(reason)
            self._stop(running_key)

    def _stop(self, key: _Key) -> None:
        running = self._running.pop(key)
        del self._by_connection[running.connection]
        running.scope.cancel()
        if not any(k[0] == key[0] for k in self._running):
            self.lists.gone(key[0])


async def _run_in(scope: anyio.CancelScope, connection: ServerConnection) -> None:
    with scope:
        await connection.run()
