"""Every connection to the configured servers, and which one a caller reaches a server on.

Each server has one shared, multiplexed :class:`~proxy.outbound.connection.ServerConnection`.
A server with ``session_mode: per_client`` also gets one connection per client
(:mod:`proxy.servers.per_client`), so that it sees that client's capabilities and roots, and keeps its
state apart: per handshake-era session, and per identity for 2026-07-28 callers (which have no
session). Its shared connection then serves only health reports and what a client sees of the
server before its own connection listed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Literal

import anyio
import anyio.abc

from proxy.clients.session import Client, ClientSession, InboundRequest
from proxy.config.model import LimitsConfig, ServerConfig
from proxy.core.errors import LimitExceeded, ServerUnavailable
from proxy.credentials import Sources
from proxy.observe.boundary import Boundary, wire_error
from proxy.observe.logs import redact_text
from proxy.observe.metrics import Metrics
from proxy.outbound.client_tasks import ClientTasks
from proxy.outbound.connection import ServerConnection
from proxy.outbound.era import Era, relayed_capabilities
from proxy.outbound.factory import transport_for
from proxy.outbound.health import ConnectionListener, ServerState
from proxy.outbound.transport import Transport
from proxy.pipeline.context import Caller
from proxy.protocol import extensions
from proxy.servers.held_questions import Doorstep, Doorway
from proxy.servers.per_client import ClientConnections, PerClientLists, PerClientNotices

__all__ = ["Connections", "ServerHealth", "Sharing", "WaitFor"]

logger = logging.getLogger("proxy.servers.connections")

_FIRST_ATTEMPT_SLACK: Final = 5.0  # seconds past a server's connect timeout that start-up waits
_STDERR_SHOWN: Final = 5  # last stderr lines of a server that is not ready, in /healthz

# Whose first attempt to connect start-up waits for: every server's (tests, tools that inspect),
# the ``required`` ones' (stdio: its client has no /readyz to ask), or nobody's (``serve``: it
# answers /healthz at once; /readyz waits for the required servers, and the others join later).
WaitFor = Literal["all", "required", "none"]


class Sharing:
    """Which connection a caller reaches each server on: ``session_mode``, and the caller's era."""

    def __init__(self, servers: Mapping[str, ServerConfig]) -> None:
        self._servers = servers

    def shares(self, caller: Client | Caller, server_id: str) -> bool:
        """Whether ``caller`` reaches the server on its shared connection (else on its own: its
        session's, or a 2026-07-28 caller's identity's)."""
        server = self._servers.get(server_id)  # gone: removed by a reload while asked about
        return server is None or server.session_mode == "shared"

    def own(self) -> tuple[str, ...]:
        """The servers each client reaches on a connection of its own."""
        return tuple(sid for sid, server in self._servers.items() if server.session_mode != "shared")


class Connections:
    def __init__(
        self,
        servers: Sequence[ServerConfig],
        listener: ConnectionListener,
        *,
        max_pages: int,
        limits: LimitsConfig,
        boundary: Boundary,
        transports: Mapping[str, Transport] | None = None,  # by server id (tests), else the config's
        credentials: Sources | None = None,  # each identity's own, for servers not in shared mode
    ) -> None:
        # One dict, changed in place by a reload: Sharing and the per_client connections read it.
        self._servers = {s.id: s for s in servers}
        self._boundary = boundary
        self._listener = listener
        self._max_pages = max_pages
        self._limits = limits
        self._sharing = Sharing(self._servers)
        self._per_client_ids = self._sharing.own()
        self._given = given = transports or {}
        # manifold stdio (:meth:`client_arrived`): the one client's capabilities and relay, once known.
        self._one_client = False  # for_one_client()
        self._client: tuple[dict[str, Any], Doorway] | None = None
        self._client_known = anyio.Event()
        self.shared: dict[str, ServerConnection] = {
            server.id: self._connection(server, given.get(server.id)) for server in servers
        }
        self._scopes: dict[str, anyio.CancelScope] = {}  # server id -> its shared connection's run
        self.drained: set[str] = set()  # servers an operator drained (proxy.admin): no new calls
        self._dropped: set[tuple[str, extensions.Dropped]] = set()  # extensions not relayed, logged
        self._tg: anyio.abc.TaskGroup | None = None
        self._per_client = ClientConnections(
            self._servers,
            max_pages=max_pages,
            limits=limits,
            on_limit=boundary.refused,
            answer_error=wire_error,
            on_internal_error=self._caught,
            credentials=credentials,
        )

    def _connection(self, server: ServerConfig, transport: Transport | None = None) -> ServerConnection:
        limits = self._limits
        capabilities, relay = self._client if self._client is not None else (None, None)
        return ServerConnection(
            server.id,
            transport or transport_for(server, limits=limits),
            self._listener,
            connect_timeout=server.connect_timeout,
            request_timeout=server.request_timeout,
            max_pages=self._max_pages,
            era=Era.of(server.era),
            client_capabilities=capabilities,
            default_relay=relay,
            answer_error=wire_error,
            on_internal_error=self._caught,
            max_items=limits.max_server_items,
            failures_until_unready=limits.failures_until_unready,
            on_limit=self._boundary.refused,
            client_tasks=ClientTasks.from_limits(server.id, limits),
        )

    def _start(self, tg: anyio.abc.TaskGroup, connection: ServerConnection) -> None:
        scope = self._scopes[connection.server_id] = anyio.CancelScope()
        tg.start_soon(_run_in, scope, connection, name=f"server {connection.server_id}")

    # ---- a reload (proxy.app.reloader) ----------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether :meth:`run` runs (so :meth:`add` can start a connection)."""
        return self._tg is not None

    def prepare(self, server: ServerConfig) -> ServerConnection:
        """A connection to ``server``, not started: what :meth:`add` starts."""
        return self._connection(server)

    def add(self, server: ServerConfig, connection: ServerConnection) -> None:
        """Start ``connection`` (:meth:`prepare`) to ``server``, added by a reload or replacing
        a removed one: it joins the catalogs once it lists, as a server that connects late does.
        Not running (:attr:`running`), it is only kept, never started."""
        self._servers[server.id] = server
        self._per_client_ids = self._sharing.own()
        self.shared[server.id] = connection
        if self._tg is not None and (not self._one_client or self._client is not None):
            self._start(self._tg, connection)

    def restart(self, server_id: str, reason: str) -> bool:
        """Stop ``server_id``'s connections (failing their requests in flight with ``reason``)
        and start its shared one anew, as a reload that changed it does; False if no such server."""
        server = self._servers.get(server_id)
        if server is None:
            return False
        connection = self.prepare(server)
        self.remove(server_id, reason)
        self.add(server, connection)
        return True

    def remove(self, server_id: str, reason: str) -> None:
        """Stop every connection to ``server_id`` (its shared one and each client's own), failing
        the requests in flight on them with ``reason`` (which the error names with the server)."""
        self._per_client.close_server(server_id, reason)
        connection = self.shared.pop(server_id, None)
        scope = self._scopes.pop(server_id, None)
        self._servers.pop(server_id, None)
        self._per_client_ids = self._sharing.own()
        if scope is not None:
            scope.cancel()
        if connection is not None:
            connection.retire(reason)

    def _caught(self, where: str, exc: BaseException) -> None:
        """A connection caught a failure of ours (and logged it): count it."""
        self._boundary.count("server_request" if where.endswith("server_request") else "server_connection")

    async def run(
        self,
        *,
        wait_for: WaitFor = "all",
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep every shared connection up until cancelled; ready once each server ``wait_for``
        names has connected or failed its first attempt (bounded by its connect timeout). A
        server that connects later joins the catalogs then, and clients hear list_changed."""
        async with anyio.create_task_group() as tg:
            await tg.start(self._per_client.run)
            self._tg = tg
            if self._one_client:  # started by client_arrived, which waits for their first attempts
                try:
                    task_status.started()
                    await self._client_known.wait()
                    for connection in list(self.shared.values()):
                        self._start(tg, connection)
                    await anyio.sleep_forever()
                finally:
                    self._tg = None
            for connection in self.shared.values():
                self._start(tg, connection)
            try:
                for connection in list(self.shared.values()):  # a reload may change them meanwhile
                    server = connection.server_id
                    if wait_for == "all" or (wait_for == "required" and self._servers[server].required):
                        with anyio.move_on_after(connection.connect_timeout + _FIRST_ATTEMPT_SLACK):
                            await connection.first_attempt_done.wait()
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None

    def for_one_client(self) -> None:
        """``manifold stdio``: the shared connections start only once its one client arrives
        (:meth:`client_arrived`), and speak for it. Called before :meth:`run`."""
        self._one_client = True

    async def client_arrived(self, capabilities: Mapping[str, Any]) -> Doorway:
        """``manifold stdio``'s one client said what it can do: the shared connections start,
        declaring ``capabilities`` (those a server may ask for) to their servers as a
        ``per_client`` connection does; what a server asks outside any call waits at the
        :class:`~proxy.servers.held_questions.Doorway` returned until a caller enters it (at most the longest
        ``request_timeout``). Back once each has connected or failed its first attempt (bounded
        by its connect timeout). Only the first call starts anything."""
        if self._client is not None:
            return self._client[1]
        declared = relayed_capabilities(capabilities)
        hold = max((server.request_timeout for server in self._servers.values()), default=60.0)
        doorway = Doorway("stdio", declared, hold=hold)
        if not self._one_client:
            return doorway  # nothing waits there: the shared connections ask no one client
        self._client = (declared, doorway)
        for sid in list(self.shared):  # in place: the catalogs and notices hold this dict
            self.shared[sid] = self._connection(self._servers[sid], self._given.get(sid))
        self._client_known.set()
        for connection in list(self.shared.values()):
            with anyio.move_on_after(connection.connect_timeout + _FIRST_ATTEMPT_SLACK):
                await connection.first_attempt_done.wait()
        return doorway

    def shares(self, caller: Client | Caller, server_id: str) -> bool:
        """Whether ``caller`` reaches the server on its shared connection (else on its own)."""
        return self._sharing.shares(caller, server_id)

    async def for_call(self, caller: Caller, server_id: str) -> ServerConnection:
        """The connection ``caller``'s request to ``server_id`` goes out on.

        Raises:
            LimitExceeded: a ``per_client`` connection would have to start, and as many run as
                ``limits.max_per_client_connections`` allows.
        """
        if server_id not in self._servers:  # removed by a reload after the call was routed
            raise ServerUnavailable(server_id, "it was removed from the config")
        if self.drained and server_id in self.drained:  # calls in flight finish; new ones go nowhere
            raise ServerUnavailable(server_id, "it is drained by an operator; try again later")
        if self.shares(caller, server_id):
            return self.shared[server_id]
        # Only a client's own request gets here: its session or its identity owns the connection.
        assert isinstance(caller, InboundRequest), f"{type(caller).__name__} is no client request"
        return await self._per_client.connection(caller.session, server_id)

    @property
    def per_client_servers(self) -> tuple[str, ...]:
        """The ``per_client`` servers: each client reaches them on a connection of its own."""
        return self._per_client_ids

    async def open_own(self, caller: Caller) -> None:
        """Start ``caller``'s own connections to every ``per_client`` server that is not running,
        and wait (bounded) for them to list: its catalog is theirs. One the limit refuses is left
        out: the caller sees that server's shared list, and a call to it gets the refusal."""
        if not isinstance(caller, InboundRequest):
            return
        client = caller.session
        missing = [sid for sid in self._per_client_ids if not self._per_client.running(client, sid)]
        if not missing:
            return

        async def start(server_id: str) -> None:
            try:
                await self._per_client.connection(client, server_id)
            except (LimitExceeded, ServerUnavailable) as exc:
                logger.debug("no per_client connection to %s for a listing: %s", server_id, exc)

        async with anyio.create_task_group() as tg:
            for server_id in missing:
                tg.start_soon(start, server_id)

    def asked_through(self, connection: ServerConnection) -> ServerConnection | Doorstep:
        """``connection`` as a 2026-07-28 caller's parked call goes out on it
        (:mod:`proxy.servers.held_questions`)."""
        if self._client is not None and self.shared.get(connection.server_id) is connection:
            return Doorstep(connection, self._client[1])  # manifold stdio's one 2026-07-28 client
        return self._per_client.asked_through(connection)

    def per_client_lists_to(self, lists: PerClientLists, notices: PerClientNotices) -> None:
        """Tell ``lists`` what each client's own connections list, and ``notices`` what an
        identity's say unprompted (wired once, at start)."""
        self._per_client.lists = lists
        self._per_client.notices = notices

    def per_client_running(self, caller: Caller, server_id: str) -> ServerConnection | None:
        """``caller``'s own connection to ``server_id``, if it runs (none is started)."""
        if not isinstance(caller, InboundRequest):
            return None
        return self._per_client.find(caller.session, server_id)

    def hold(self, caller: Caller, server_id: str, count: int) -> None:
        """``caller``'s listen streams hold ``count`` more (or fewer) resource subscriptions on
        its own connection to ``server_id``: it is not idle while they do."""
        if isinstance(caller, InboundRequest):
            self._per_client.hold(caller.session, server_id, count)

    def own(self, session: ClientSession) -> list[ServerConnection]:
        """The ``per_client`` connections running for ``session``."""
        return self._per_client.of_session(session.id)

    async def release(self, session: ClientSession) -> None:
        """A session ended: stop its own connections."""
        self._per_client.close(session.id)

    def health(self) -> dict[str, dict[str, Any]]:
        """Each server's state, for ``/healthz`` and ``/readyz``: ``limits`` says which of its lists
        were cut, and at what (``limits.max_server_items``); ``stderr``, the last lines a server that
        is not ready wrote there (stdio)."""
        report: dict[str, dict[str, Any]] = {}
        for sid, c in self.shared.items():
            entry = report[sid] = {
                "state": c.state.value,
                "required": self._servers[sid].required,
                "reason": c.reason,
            }
            if c.capped:
                entry["limits"] = {
                    kind: f"listed more than {kept}; kept the first {kept} (limits.max_server_items)"
                    for kind, kept in c.capped.items()
                }
            if c.state is not ServerState.READY and (stderr := c.stderr_tail(_STDERR_SHOWN)):
                # A failing server may print its secrets (only metrics.role sees these lines).
                entry["stderr"] = [redact_text(line) for line in stderr]
        return report

    def waiting_for(self) -> list[str]:
        """The required servers that are not up."""
        return [
            sid
            for sid, c in self.shared.items()
            if self._servers[sid].required and c.state is not ServerState.READY
        ]

    def capabilities(self, base: Mapping[str, Any], servers: Collection[str] | None = None) -> dict[str, Any]:
        """``base`` (Manifold's own capabilities) with the ``extensions`` the servers (of
        ``servers``; None: all) declared that Manifold relays (:mod:`proxy.protocol.extensions`).
        Each declaration dropped is logged once per server."""
        shown, dropped = extensions.merge(
            (sid, c.capabilities.get("extensions"))
            for sid, c in self.shared.items()
            if servers is None or sid in servers
        )
        for server_id, drop in dropped:
            if (server_id, drop) not in self._dropped:  # bounded: a few per server
                self._dropped.add((server_id, drop))
                logger.info("server %s: extension %s not relayed: %s", server_id, drop.extension, drop.reason)
        return {**base, "extensions": shown} if shown else dict(base)

    def instructions(self, servers: Collection[str] | None = None) -> str | None:
        """What the servers (of ``servers``; None: all) said to tell clients, one paragraph each."""
        notes = [
            f"{sid}: {c.instructions}"
            for sid, c in self.shared.items()
            if c.instructions and (servers is None or sid in servers)
        ]
        return "\n\n".join(notes) if notes else None


async def _run_in(scope: anyio.CancelScope, connection: ServerConnection) -> None:
    with scope:
        await connection.run()


class ServerHealth:
    """What connections say of their state, as metrics: up, restarts, time to connect."""

    def __init__(self, metrics: Metrics, server_ids: Sequence[str]) -> None:
        self._metrics = metrics
        self._starting: dict[str, float | None] = {}  # when the current start began; None once up
        for server_id in server_ids:
            metrics.server_up(server_id, False)

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        logger.debug("server %s: %s %s", server_id, state.value, reason or "")
        self._metrics.server_up(server_id, state is ServerState.READY)
        if state is ServerState.STARTING:
            if server_id in self._starting:  # a second start is a restart
                self._metrics.server_restart(server_id)
            self._starting[server_id] = time.monotonic()
        elif state is ServerState.READY and (began := self._starting.get(server_id)) is not None:
            # Only the first READY of a start: a failing server that recovers did not reconnect.
            self._metrics.server_connect_seconds(server_id, time.monotonic() - began)
            self._starting[server_id] = None
