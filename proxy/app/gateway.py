"""The composition root: builds Manifold's parts, wires them together, and runs them; nothing else
happens here. The parts, and who tells whom what (tasks/*: proxy.tasks.wiring)::

    server connections ──listed──────────▶ Catalogs ──changed──▶ Notices ──▶ sessions, listen streams
                       ──state_changed───▶ ServerHealth (metrics)
                       ──server_notification──────────────────▶ Notices, ServerLogs (log lines)
    inbound transports ──messages────────▶ Router ──CallContext──▶ pipeline ──▶ Forward ──▶ Connections
                       ──sessions────────▶ Sessions ──ended──▶ Connections (per_client), Interest

``Gateway.inbound`` is all an inbound transport is given (:mod:`proxy.clients.contract`).
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Final

import anyio

from proxy.auth.authenticator import Authenticator
from proxy.catalog.cursors import CursorCodec
from proxy.catalog.naming import NamingCodec
from proxy.clients.contract import Endpoint, Inbound
from proxy.clients.listen_streams import Listens
from proxy.clients.revocations import revocations_for
from proxy.clients.session_ids import SessionTokens
from proxy.clients.sessions import Sessions
from proxy.config.model import Config
from proxy.core.keys import derive_key
from proxy.credentials.token_modes import token_modes
from proxy.credentials.wiring import open_credential_store, sources_for
from proxy.enforce.access import Access, renames
from proxy.enforce.confirm.approvals import make_approvals
from proxy.enforce.pins_writer import PinsWriter
from proxy.notify.list_changes import Notices
from proxy.notify.server_events import Heard
from proxy.notify.server_logs import ServerLogs
from proxy.notify.subscriptions import Interest
from proxy.observe.boundary import Boundary, supervised
from proxy.observe.metrics import Metrics
from proxy.outbound.transport import Transport
from proxy.pipeline.bridge.mrtr import Rounds
from proxy.pipeline.bridge.parking import ParkedCalls
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import Stage, compose
from proxy.pipeline.forward import Forward
from proxy.pipeline.order import Parts, audit_log, limiter, stages
from proxy.policy.model import MAX_CONFIRM_TIMEOUT
from proxy.router.dispatch import Router
from proxy.servers.connections import Connections, ServerHealth, WaitFor
from proxy.tasks.wiring import make_tasks
from proxy.views.catalogs import Catalogs
from proxy.views.endpoints import MakeDiscovery, Views, endpoint_inbounds, make_discovery
from proxy.views.per_client import PerClientCatalogs

__all__ = ["Gateway"]

_STATE_TTL: Final = 600.0  # seconds a client has to retry with a requestState Manifold issued
_MAX_ROUNDS: Final = 10  # input_required rounds Manifold answers for a handshake-era client


class Gateway:
    def __init__(
        self,
        config: Config,
        *,
        cursor_key: bytes | None = None,
        transports: Mapping[str, Transport] | None = None,  # by server id, instead of the config's
    ) -> None:
        self.config = config
        shared = config.sessions.secret
        secret = shared.get_secret_value().encode() if shared is not None else secrets.token_bytes(32)
        servers = config.enabled_servers()
        self.metrics = metrics = Metrics(config.metrics)
        self.pins = PinsWriter(config.policy.pins.path)  # runs only when pins are on
        self.access = access = Access(
            config.policy, {s.id: s for s in servers}, on_drift=metrics.pin_drift, pins_store=self.pins
        )
        access.load()
        self.auth = Authenticator.from_settings(config.auth, os.environ)
        self.auth.on_sign_in = metrics.sign_in
        self.audit = audit_log(config, metrics)
        self.limiter = limiter(config, metrics)
        self.boundary = Boundary(metrics)
        self.revocations = revocations_for(config, on_error=metrics.session_revocation_error)
        self.sessions = Sessions(
            SessionTokens(derive_key(secret, "session"), lifetime=config.sessions.max_lifetime),
            metrics,
            revocations=self.revocations,
            idle_timeout=config.sessions.idle_timeout,
            max_sessions=config.limits.max_sessions,
            max_per_identity=config.limits.max_sessions_per_identity,
            replay_bytes=config.limits.replay_buffer_bytes,
        )
        self.listens = Listens()  # open subscriptions/listen streams
        self.credential_store = open_credential_store(config)
        self.token_modes = token_modes(config, self.credential_store)  # credentials.mode oauth, exchange
        self.token_modes.hook(self.auth)  # the request's own bearer, when a server exchanges it
        self.connections = Connections(
            servers,
            heard := Heard(),
            max_pages=config.catalog.max_server_pages,
            limits=config.limits,
            boundary=self.boundary,
            transports=transports,
            credentials=sources_for(config, self.credential_store, self.token_modes.sources(config)),
        )
        self.notices = notices = Notices(self.sessions, self.listens, self.connections, access)
        # Changed in place by a config reload (proxy.app.reloader): every catalog reads these.
        self.prefixes = {s.id: s.prefix for s in servers}
        self.renames = renames({s.id: s for s in servers})
        catalogs = functools.partial(
            Catalogs,
            self.prefixes,
            codec=NamingCodec(config.naming.separator, config.naming.max_length),
            cursors=CursorCodec(cursor_key or derive_key(secret, "cursor")),
            access=access,
            metrics=metrics,
            page_size=config.catalog.page_size,
            hints=self.connections.shared,
            private=bool(config.policy.files),
            on_change=notices.list_changed,
            renames=self.renames,
        )
        self.catalogs = catalogs()
        # With per_client servers, each client sees what its own connections list (proxy.views.per_client).
        self.per_client_catalogs = None
        if self.connections.per_client_servers:
            self.per_client_catalogs = PerClientCatalogs(
                self.catalogs,
                lambda on_change: catalogs(on_change=on_change, measured=False, private=True),
                notices.per_client_list_changed,
            )
            self.connections.per_client_lists_to(self.per_client_catalogs, notices)
        self.logs = ServerLogs(self.sessions, self.catalogs, access, self.connections, config.endpoints)
        health = ServerHealth(metrics, [s.id for s in servers])
        states = self._states = RequestStates(derive_key(secret, "request-state"), ttl=_STATE_TTL)
        parked = self.parked = ParkedCalls.limited(states, config.limits)
        self.tasks = make_tasks(config, secret, self.connections, self.sessions, metrics, self.audit, parked)
        heard.wire(self.catalogs, health, notices, self.logs, self.per_client_catalogs, self.tasks)
        self.interest = Interest(self.sessions, self.listens, self.connections, self.connections.shared)
        self.sessions.on_end(self.connections.release)
        self.sessions.on_end(self.interest.release)
        self._questions = RequestStates(derive_key(secret, "confirm-state"), ttl=MAX_CONFIRM_TIMEOUT)
        self._sign_ins = RequestStates(derive_key(secret, "sign-in"), ttl=config.credentials.signin_timeout)
        self.approvals = make_approvals(config, derive_key(secret, "approval-form"))
        forward = Forward(self.connections, Rounds(states, max_rounds=_MAX_ROUNDS), self.parked)
        # Progressive discovery, per endpoint ("": /mcp): its own meta-tools, views and promotions.
        sessions = self.sessions
        discovering = functools.partial(make_discovery, access=access, metrics=metrics, sessions=sessions)
        pipeline = self.tasks.creating(compose(stages := self._stages(), forward), rereading=stages)
        router = functools.partial(
            Router,
            sessions=self.sessions,
            connections=self.connections,
            interest=self.interest,
            listens=self.listens,
            logs=self.logs,
            forward=pipeline,
            boundary=self.boundary,
            metrics=metrics,
            limits=config.limits,
            own=self.per_client_catalogs,
            tasks=self.tasks,
        )
        self.router = router(catalogs=self.catalogs, discovery=discovering(config, ""))
        self.inbound = Inbound(
            config,
            self.router,
            self.sessions,
            self.auth,
            metrics,
            self.connections,
            self.boundary,
            self.approvals,
            self.token_modes.on_behalf,
        )
        # Each named endpoint: a view of the one merge, its own router, and its own inbound.
        self.views = Views()  # each endpoint's view, replaceable by a reload (as are the endpoints)
        self.make_endpoints = functools.partial(
            self._endpoints, router=router, list_changed=notices.list_changed, discovering=discovering
        )
        self.endpoints = self.make_endpoints(config)

    def _endpoints(
        self,
        config: Config,
        *,
        router: Callable[..., Endpoint],
        list_changed: Callable[..., None],
        discovering: MakeDiscovery,
    ) -> dict[str, Inbound]:
        """The named endpoints ``config`` has (at start, and those a reload changes)."""
        discover = functools.partial(discovering, config)
        return endpoint_inbounds(
            config, self.catalogs, self.inbound, router, list_changed, wrap=self.views.wrap, discover=discover
        )

    def _stages(self) -> list[Stage]:
        """The call pipeline between the router and the forwarding stage (:mod:`proxy.pipeline.order`)."""
        own = (self.token_modes.on_behalf, self._sign_ins, self._states)  # sign-ins; approval marks
        parts = Parts(
            self.access, self.metrics, self.audit, self.limiter, self._questions, self.approvals, *own
        )
        return stages(self.config, parts)

    def reload_policy(self) -> None:
        """Re-read the policy files (SIGHUP); a bad file is refused and the old policy stays."""
        if self.access.reload():
            self._policy_changed()

    def _policy_changed(self) -> None:
        self.catalogs.policy_changed()
        if self.per_client_catalogs is not None:
            self.per_client_catalogs.policy_changed()

    @asynccontextmanager
    async def running(self, *, wait_for: WaitFor = "all") -> AsyncIterator[Gateway]:
        """Start every part; yield once each server ``wait_for`` names has connected or failed
        its first attempt (``serve`` waits for none: it answers /healthz at once)."""
        async with anyio.create_task_group() as tg:
            for part in (self.auth.run, self.parked.run, self.tasks.run):  # tasks: held calls
                await tg.start(part)
            await tg.start(self.approvals.unanswered.run)  # 2026 questions nobody came back for
            if self.audit is not None:
                await tg.start(self.audit.run)  # flushes what is left when cancelled, bounded
            if self.config.policy.pins.mode != "off":
                await tg.start(self.pins.run)  # likewise
            if self.config.policy.files and self.config.policy.reload:
                watch = functools.partial(self.access.watch, self._policy_changed)
                tg.start_soon(supervised, self.boundary, "policy watcher", watch)
            tg.start_soon(supervised, self.boundary, "tool search vectors", self.router.warm_search)
            await tg.start(functools.partial(self.connections.run, wait_for=wait_for))
            if self.revocations.shared:  # sessions other replicas end, ended here too
                tg.start_soon(
                    supervised, self.boundary, "session revocations", self.sessions.follow_revocations
                )
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    stores = (self.revocations, self.approvals.store, self.limiter, self.credential_store)
                    for store in (s for s in (*stores, self.token_modes, self.tasks.store) if s is not None):
                        await store.aclose()
