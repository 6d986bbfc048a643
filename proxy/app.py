"""The gateway: every configured server behind one MCP endpoint.

``Gateway`` owns the server connections, the merged catalogs and the client sessions. The
inbound transports (``proxy.inbound.http``, ``proxy.inbound.stdio``) hand it whole messages
with :meth:`Gateway.handle` and deliver what it answers; they hold no MCP logic of their own.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import orjson
from cachetools import LRUCache, TTLCache

from proxy import __version__
from proxy.access import Access, ServedTools
from proxy.auth.authenticator import Authenticator
from proxy.bridge.mrtr import Rounds
from proxy.bridge.parking import ParkedCalls
from proxy.bridge.state import RequestStates
from proxy.catalog.cursors import CursorCodec, paginate
from proxy.catalog.merge import EMPTY_CATALOG, Catalog, Entry, ServerSlice, build_catalog, replace_slice
from proxy.catalog.naming import NamingCodec
from proxy.catalog.resources import EMPTY_RESOURCES, ResourceIndex, build_resource_index
from proxy.config import Config
from proxy.errors import InvalidParams, InvalidRequest, MethodNotFound, ResourceNotFound
from proxy.inbound.listen import Listens, Subscription
from proxy.inbound.session import LOG_LEVELS, ClientSession, Deliver, InboundRequest
from proxy.inbound.tokens import SessionTokens, derive_key
from proxy.interest import Interest
from proxy.metrics import UNKNOWN, Metrics
from proxy.middleware.authorize import AuditLog, Authorize
from proxy.middleware.metrics import Measure
from proxy.middleware.ratelimit import RateLimit
from proxy.middleware.validate import Validate
from proxy.outbound.connection import ServerConnection, ServerState
from proxy.outbound.era import Era
from proxy.outbound.factory import transport_for
from proxy.outbound.lists import LIST_KINDS
from proxy.per_client import ClientConnections
from proxy.pipeline import CallContext, Handler, Middleware, compose, tool_error, wire_error
from proxy.policy import Identity, SchemaValidators, Subject
from proxy.protocol import jsonrpc, results, versions
from proxy.protocol.jsonrpc import Message, MessageKind, RequestId
from proxy.protocol.modern import REMOVED_METHODS, strip_envelope
from proxy.protocol.results import CacheHint
from proxy.protocol.subscriptions import MAX_RESOURCE_SUBSCRIPTIONS, UPDATED, Filter
from proxy.ratelimit import make_backend
from proxy.router import Router

__all__ = ["Gateway"]

logger = logging.getLogger("proxy.app")

_LISTS: Final = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
_CHANGED: Final = {
    "tools": jsonrpc.notification("notifications/tools/list_changed"),
    "prompts": jsonrpc.notification("notifications/prompts/list_changed"),
    "resources": jsonrpc.notification("notifications/resources/list_changed"),
    "resourceTemplates": jsonrpc.notification("notifications/resources/list_changed"),
}
CAPABILITIES: Final = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "completions": {},
    "logging": {},
}
# 2026-07-28 callers hear of the same changes on subscriptions/listen streams (Gateway.listen):
# list changes as a filter flag, resource updates as resourceSubscriptions.
MODERN_CAPABILITIES: Final[dict[str, Any]] = {name: dict(value) for name, value in CAPABILITIES.items()}
SERVER_INFO: Final = {"name": "manifold", "version": __version__}
# Freshness of what Manifold answers modern callers from its catalog when no server said more.
_DEFAULT_TTL_MS: Final = 0
_STATE_TTL: Final = 600.0  # seconds a client has to retry with a requestState Manifold issued
_MAX_ROUNDS: Final = 10  # input_required rounds Manifold answers for a handshake-era client

Params = dict[str, Any]
_Method = Callable[[InboundRequest, Params, RequestId], Awaitable[Any]]


def _string(params: Params, key: str, method: str) -> str:
    value = params.get(key)
    if not isinstance(value, str):
        raise InvalidParams(f'{method} needs a string "{key}"')
    return value


class Gateway:
    def __init__(self, config: Config, *, cursor_key: bytes | None = None) -> None:
        self.config = config
        self.codec = NamingCodec(config.naming.separator, config.naming.max_length)
        shared = config.sessions.secret
        secret = shared.get_secret_value().encode() if shared is not None else secrets.token_bytes(32)
        self.cursors = CursorCodec(cursor_key or derive_key(secret, "cursor"))
        self.session_tokens = SessionTokens(derive_key(secret, "session"))
        # Ended here (DELETE, expiry): a signed id must not bring them back on this replica.
        self.ended_sessions: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=config.sessions.idle_timeout)
        self.sessions: dict[str, ClientSession] = {}
        servers = config.enabled_servers()
        self.connections: dict[str, ServerConnection] = {
            server.id: ServerConnection(
                server.id,
                transport_for(server, max_depth=config.limits.max_depth),
                self,
                connect_timeout=server.connect_timeout,
                request_timeout=server.request_timeout,
                max_pages=config.catalog.max_server_pages,
                era=Era.of(server.era),
                answer_error=wire_error,
            )
            for server in servers
        }
        self._servers = {s.id: s for s in servers}
        self._prefixes = {s.id: s.prefix for s in servers}
        self.per_client = ClientConnections(self._servers, max_pages=config.catalog.max_server_pages)
        self._slices = {kind: tuple(ServerSlice(s.id, s.prefix, ()) for s in servers) for kind in LIST_KINDS}
        self.metrics = Metrics(config.metrics)
        for server in servers:
            self.metrics.server_up(server.id, False)
        self._starting: dict[str, float] = {}
        self.access = Access(config.policy, self._servers, on_drift=self.metrics.pin_drift)
        self.access.load()
        self.auth = Authenticator.from_settings(config.auth, os.environ)
        self._audit = AuditLog(config.policy.audit) if config.policy.audit.path else None
        # Limits live in the policy files, so without files there is nothing to count.
        backend = config.rate_limits.backend
        self.limiter = (
            make_backend(
                config.rate_limits, on_backend_error=lambda _: self.metrics.rate_limit_backend_error(backend)
            )
            if config.policy.files
            else None
        )
        self.tools: Catalog = EMPTY_CATALOG
        self.served: ServedTools = self.access.serve_tools(EMPTY_CATALOG)
        self.prompts: Catalog = EMPTY_CATALOG
        self.resources: ResourceIndex = EMPTY_RESOURCES
        # Encoded pages of the merged lists, keyed by (kind, generation, cursor): a warm list
        # request costs one dict lookup and no re-encoding of the definitions.
        self._pages: LRUCache[tuple[str, str, str | None, CacheHint | None], orjson.Fragment] = LRUCache(
            maxsize=2048
        )
        states = RequestStates(derive_key(secret, "request-state"), ttl=_STATE_TTL)
        self.parked = ParkedCalls(states)
        router = Router(self._connection_for, Rounds(states, max_rounds=_MAX_ROUNDS), self.parked)
        self._forward: Handler = compose(self._stages(), router)
        self._methods: dict[str, _Method] = {
            "tools/call": self._tools_call,
            "prompts/get": self._prompts_get,
            "resources/read": self._resources_read,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "completion/complete": self._complete,
            "logging/setLevel": self._set_level,
        }
        self.listens = Listens()  # open subscriptions/listen streams: see listen()
        self.interest = Interest(self.sessions, self.listens, self._servers, self.connections)

    def _stages(self) -> list[Middleware]:
        """The call pipeline between the errors boundary and the router, outermost first.

        A stage that has nothing to do is left out, so switched-off features cost nothing.
        """
        policy = self.config.policy
        stages: list[Middleware] = []
        if self.config.metrics.enabled:
            stages.append(Measure(self.metrics))
        if policy.files or self._audit is not None:
            stages.append(Authorize(self.access, self._audit, self.metrics))
        if policy.validate_arguments or policy.validate_results:
            validators = SchemaValidators()
            stages.append(
                Validate(validators, arguments=policy.validate_arguments, results=policy.validate_results)
            )
        if self.limiter is not None:
            stages.append(RateLimit(self.access, self.limiter, self.metrics))
        return stages

    def reload_policy(self) -> None:
        """Re-read the policy files (SIGHUP); a bad file is refused and the old policy stays."""
        if self.access.reload():
            self._policy_changed()

    # ---- lifecycle ---------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Gateway]:
        """Start every server; yield once each has connected or failed its first attempt."""
        async with anyio.create_task_group() as tg:
            self.per_client.task_group = tg
            await tg.start(self.auth.run)
            await tg.start(self.parked.run)
            if self.config.policy.files and self.config.policy.reload:
                tg.start_soon(self.access.watch, self._policy_changed)
            for connection in self.connections.values():
                tg.start_soon(connection.run, name=f"server {connection.server_id}")
            for connection in self.connections.values():
                with anyio.move_on_after(connection.connect_timeout + 5):
                    await connection.first_attempt_done.wait()
            try:
                yield self
            finally:
                self.per_client.task_group = None
                tg.cancel_scope.cancel()
                if self._audit is not None:
                    self._audit.close()
                if self.limiter is not None:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                        await self.limiter.aclose()

    def _policy_changed(self) -> None:
        """What each identity may see may have changed: clients re-list."""
        self.served = self.access.serve_tools(self.tools)
        self._pages.clear()
        for session in self.sessions.values():
            if session.initialized:
                for kind in ("tools", "prompts", "resources"):
                    session.notify(_CHANGED[kind])
        for kind in ("tools", "prompts", "resources"):
            self.listens.publish(_CHANGED[kind])

    async def end_session(self, session: ClientSession) -> None:
        """Forget a session (DELETE, idle expiry, stdin closed), stop its requests, and release
        its resource subscriptions: a URI nobody else wants is unsubscribed at its server (its
        own ``per_client`` connections just stop). Shielded and bounded: often run because the
        client went away."""
        if self.sessions.pop(session.id, None) is not None:
            self.metrics.session_closed(session.transport)
        self.ended_sessions[session.id] = True
        for scope in list(session.in_flight.values()):
            scope.cancel()
        self.per_client.close(session.id)
        await self.interest.release(session)

    # ---- ConnectionListener ------------------------------------------------------------

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        slices = replace_slice(self._slices[kind], ServerSlice(server_id, self._prefixes[server_id], items))
        self._slices[kind] = slices
        if kind == "tools":
            self.metrics.catalog_size(server_id, len(items))
        if kind in ("tools", "prompts"):
            old: Catalog = getattr(self, kind)
            catalog = build_catalog(slices, self.codec)
            for collision in catalog.collisions:
                if collision not in old.collisions:
                    logger.warning("%s name collision: %s", kind, collision.describe())
            for server, reason in catalog.invalid:
                logger.warning("server %s: skipped one of its %s: %s", server, kind, reason)
            changed = catalog.generation != old.generation
            setattr(self, kind, catalog)
            if kind == "tools":
                blocked_before = self.served.blocked
                self.served = self.access.serve_tools(catalog)
                changed = changed or self.served.blocked != blocked_before
        else:
            before = self.resources
            self.resources = build_resource_index(
                self._slices["resources"], self._slices["resourceTemplates"]
            )
            for uri_collision in self.resources.collisions:
                if uri_collision not in before.collisions:
                    logger.warning("URI collision: %s", uri_collision.describe())
            changed = (self.resources.generation, self.resources.templates_generation) != (
                before.generation,
                before.templates_generation,
            )
        if changed:
            for session in self.sessions.values():
                if session.initialized:
                    session.notify(_CHANGED[kind])
            self.listens.publish(_CHANGED[kind])

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        logger.debug("server %s: %s %s", server_id, state.value, reason or "")
        self.metrics.server_up(server_id, state is ServerState.READY)
        if state is ServerState.STARTING:
            if server_id in self._starting:  # a second start is a restart
                self.metrics.server_restart(server_id)
            self._starting[server_id] = time.monotonic()
        elif state is ServerState.READY and server_id in self._starting:
            self.metrics.server_connect_seconds(server_id, time.monotonic() - self._starting[server_id])

    def server_notification(self, server_id: str, message: Message) -> None:
        """What a server's shared connection says unprompted: to the sessions that reach it there
        (a ``per_client`` session hears its own connection) and to the listen streams."""
        for session in self.sessions.values():
            if session.wants_notification(message) and self.interest.shares(session, server_id):
                session.notify(message)
        if message["method"] == UPDATED:
            # Only streams whose identity may still read it (the policy may have changed).
            subject = Subject.resource(str((message.get("params") or {}).get("uri")), server_id)
            self.listens.publish(message, lambda listening: self.access.allows(listening.identity, subject))

    # ---- inbound messages --------------------------------------------------------------

    async def handle(
        self, session: ClientSession, message: Message, stream: Callable[[Message], None] | None = None
    ) -> Message | None:
        """Answer one validated message from ``session``; ``None`` when there is nothing to send.

        ``stream`` is the request's own channel back to the client, if its transport has one.
        Never raises for a bad request: every failure becomes an error response here.
        Cancellation propagates (nothing is written back for a cancelled request).
        """
        kind = jsonrpc.kind_of(message)
        if kind is MessageKind.NOTIFICATION:
            self._notification(session, message)
            return None
        if kind is MessageKind.RESPONSE:
            session.answered(message)
            return None
        request_id = message["id"]
        # The client may cancel this request by id (notifications/cancelled): its own scope.
        with anyio.CancelScope() as scope, self.metrics.in_flight():
            session.in_flight[request_id] = scope
            try:
                params = message.get("params") or {}
                result = await self._request(
                    InboundRequest(session, stream), message["method"], params, request_id
                )
            except Exception as exc:
                return wire_error(exc, request_id)
            finally:
                session.in_flight.pop(request_id, None)
            return jsonrpc.result_response(request_id, result)
        return None  # cancelled by the client: the spec says nothing is sent back

    async def handle_modern(self, session: ClientSession, message: Message, stream: Deliver) -> Message:
        """Answer one request of a 2026-07-28 caller, which the inbound transport validated.

        ``session`` is built from the request's envelope and lives only as long as the request:
        nothing is registered, so there is nothing to end. ``stream`` carries the request's
        progress and the log lines it opted into. Never raises for a bad request; cancellation
        (the client closed the response stream) propagates.
        """
        request_id = message["id"]
        with self.metrics.in_flight():
            try:
                inbound = InboundRequest(session, stream)
                params = message.get("params") or {}
                result = await self._modern_request(inbound, message["method"], params, request_id)
            except Exception as exc:
                return wire_error(exc, request_id, modern=True)
        return jsonrpc.result_response(request_id, result)

    async def _modern_request(
        self, inbound: InboundRequest, method: str, params: Params, request_id: RequestId
    ) -> Any:
        if method in REMOVED_METHODS:
            raise MethodNotFound("Method not found", data=method)
        if method == "server/discover":
            return results.modern(self._discover(), server_info=SERVER_INFO, cache=self._cache_hint())
        # The caller's envelope is about this hop: servers behind get none (or, later, Manifold's).
        result = await self._request(inbound, method, strip_envelope(params), request_id)
        if method in _LISTS:
            return result  # shaped, and cached encoded, by _list
        cache = None
        if method == "resources/read":
            cache = results.merge_cache([results.hint_of(result) or results.NO_STORE, self._cache_hint()])
        return results.modern(result, server_info=SERVER_INFO, cache=cache)

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
        self, inbound: InboundRequest, method: str, params: Params, request_id: RequestId
    ) -> Any:
        handler = self._methods.get(method)
        if handler is not None:
            return await handler(inbound, params, request_id)
        if method in _LISTS:
            hint = self._cache_hint(_LISTS[method]) if inbound.session.modern else None
            return self._list(_LISTS[method], params, inbound.session.identity, hint)
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(inbound.session, params)
        raise MethodNotFound(f"method not found: {method}")

    def _initialize(self, session: ClientSession, params: Params) -> dict[str, Any]:
        if session.protocol_version is not None:
            raise InvalidRequest("this session is already initialized")
        requested = _string(params, "protocolVersion", "initialize")
        session.protocol_version = versions.negotiate(requested)
        session.capabilities = params.get("capabilities") or {}
        session.client_info = params.get("clientInfo") or {}
        result: dict[str, Any] = {
            "protocolVersion": session.protocol_version,
            "capabilities": CAPABILITIES,
            "serverInfo": SERVER_INFO,
        }
        return self._with_instructions(result)

    def _discover(self) -> dict[str, Any]:
        result = {"supportedVersions": list(versions.ADVERTISED), "capabilities": MODERN_CAPABILITIES}
        return self._with_instructions(result)

    def _with_instructions(self, result: dict[str, Any]) -> dict[str, Any]:
        notes = [f"{sid}: {c.instructions}" for sid, c in self.connections.items() if c.instructions]
        if notes:
            result["instructions"] = "\n\n".join(notes)
        return result

    def _cache_hint(self, kind: str | None = None) -> CacheHint:
        """What a modern caller may do with an answer: for a merged list, the shortest freshness
        and the most restrictive scope of the servers in it (one that gave none: stale at once);
        and with a policy in force, what one identity is shown is not for another."""
        private = bool(self.config.policy.files)
        default = CacheHint(_DEFAULT_TTL_MS, "public")
        if kind is None:
            return CacheHint(_DEFAULT_TTL_MS, "private" if private else "public")
        servers = [piece.server_id for piece in self._slices[kind] if piece.items]
        hints = [self.connections[s].cache_hints.get(kind, default) for s in servers]
        merged = results.merge_cache(hints) if hints else default
        return CacheHint(merged.ttl_ms, "private") if private else merged

    def _view(self, kind: str, identity: Identity) -> tuple[Sequence[Mapping[str, Any]], str]:
        """What ``identity`` may see of one list, and the generation its cursors are bound to."""
        if kind == "tools":
            served = self.served
            items = self.access.tools_view(served, identity)
            return items, f"{served.catalog.generation}.{self.access.version}.{len(served.blocked)}"
        if kind == "prompts":
            return self.access.prompts_view(
                self.prompts, identity
            ), f"{self.prompts.generation}.{self.access.version}"
        index = self.resources
        templates = kind == "resourceTemplates"
        generation = index.templates_generation if templates else index.generation
        return self.access.resources_view(
            index, identity, templates=templates
        ), f"{generation}.{self.access.version}"

    def _list(
        self, kind: str, params: Params, identity: Identity, hint: CacheHint | None = None
    ) -> orjson.Fragment:
        """One page of a merged list; shaped for a 2026-07-28 caller when ``hint`` is given."""
        cursor = params.get("cursor")
        if cursor is None:
            self.metrics.list_request(kind)  # type: ignore[arg-type]
        else:
            self.metrics.list_page_served(kind)  # type: ignore[arg-type]
        items, generation = self._view(kind, identity)
        # A cursor is good only for the view it was cut from: the list kind and the identity.
        scope = f"{kind}|{identity.source}|{identity.name}|{','.join(sorted(identity.roles))}"
        key = (scope, generation, cursor if isinstance(cursor, str) else None, hint)
        cached = self._pages.get(key) if cursor is None or isinstance(cursor, str) else None
        if cached is not None:
            return cached
        page = paginate(
            items,
            cursor=cursor,
            page_size=self.config.catalog.page_size,
            codec=self.cursors,
            generation=generation,
            scope=scope,
        )
        result: dict[str, Any] = {kind: page.items}
        if page.next_cursor is not None:
            result["nextCursor"] = page.next_cursor
        if hint is not None:
            result = results.modern(result, server_info=SERVER_INFO, cache=hint)
        fragment = orjson.Fragment(orjson.dumps(result))
        self._pages[key] = fragment
        return fragment

    # ---- forwarded requests -------------------------------------------------------------

    async def _connection_for(self, ctx: CallContext) -> ServerConnection:
        # A 2026-07-28 caller has no session to own a connection, and cannot be asked anything
        # a per-client connection would exist to relay: it uses the shared one.
        if self.interest.shares(ctx.request.session, ctx.server_id):
            return self.connections[ctx.server_id]
        return await self.per_client.connection(ctx.request.session, ctx.server_id)

    async def _tools_call(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        name = _string(params, "name", "tools/call")
        entry = self.tools.by_name.get(name)
        if entry is None:
            self.metrics.tool_call(UNKNOWN, None, "invalid", 0.0)  # never the client's string as a label
            raise InvalidParams(f"unknown tool: {name}")
        if name in self.served.blocked:
            self.metrics.tool_call(entry.server_id, name, "denied", 0.0)
            return tool_error(self.served.blocked[name], outcome="denied")
        # Whether the policy hides it is the authorize stage's call: it audits, then answers.
        if params.get("arguments") is not None and not isinstance(params["arguments"], dict):
            raise InvalidParams('"arguments" must be an object')
        forwarded = {**params, "name": entry.original_name}
        return await self._forward(
            CallContext(
                inbound,
                request_id,
                "tools/call",
                entry.server_id,
                name,
                forwarded,
                entry,
                self.served.subject(name),
            )
        )

    async def _prompts_get(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        entry = self._prompt(_string(params, "name", "prompts/get"))
        forwarded = {**params, "name": entry.original_name}
        subject = Subject.prompt(entry)
        return await self._forward(
            CallContext(
                inbound, request_id, "prompts/get", entry.server_id, entry.name, forwarded, entry, subject
            )
        )

    def _prompt(self, name: str) -> Entry:
        """The prompt ``name`` names. Whether the policy hides it is the authorize stage's call
        (the context's subject): it audits, then answers as here."""
        entry = self.prompts.by_name.get(name)
        if entry is None:
            raise InvalidParams(f"unknown prompt: {name}")
        return entry

    def _resource_server(self, uri: str, identity: Identity) -> str:
        server = self.resources.route(uri)
        if server is None or not self.access.allows(identity, Subject.resource(uri, server)):
            raise ResourceNotFound.of(uri)
        return server

    async def _resources_read(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        uri = _string(params, "uri", "resources/read")
        server = self.resources.route(uri)
        if server is None:
            raise ResourceNotFound.of(uri)
        # Whether the policy hides it is the authorize stage's call, as for prompts (_prompt).
        subject = Subject.resource(uri, server)
        return await self._forward(
            CallContext(inbound, request_id, "resources/read", server, uri, params, subject=subject)
        )

    async def _subscribe(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        uri = _string(params, "uri", "resources/subscribe")
        session = inbound.session
        server = self._resource_server(uri, session.identity)
        # One subscription on a shared connection serves every session that wants the URI.
        if self.interest.must_tell(session, uri, server):
            await self._forward(CallContext(inbound, request_id, "resources/subscribe", server, uri, params))
        session.subscriptions[uri] = server
        return {}

    async def _unsubscribe(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        uri = _string(params, "uri", "resources/unsubscribe")
        session = inbound.session
        server = self._resource_server(uri, session.identity)
        session.subscriptions.pop(uri, None)
        if self.interest.must_tell(session, uri, server):
            await self._forward(
                CallContext(inbound, request_id, "resources/unsubscribe", server, uri, params)
            )
        return {}

    @asynccontextmanager
    async def listen(
        self, session: ClientSession, subscription_id: RequestId, requested: Filter
    ) -> AsyncIterator[Subscription]:
        """Open a ``subscriptions/listen`` stream for a 2026-07-28 caller, closed on exit; the
        transport writes what it yields (``proxy.inbound.listen``).

        Honoured: every list change asked for (Manifold tells of each change of its merged
        lists), and of ``resourceSubscriptions`` the first ``MAX_RESOURCE_SUBSCRIPTIONS`` URIs
        the caller may read, whose server declared ``resources.subscribe`` and (if nobody
        watched the URI yet) accepted Manifold's ``resources/subscribe``. Any other URI (unknown,
        hidden by the policy, or refused) is left out of the acknowledgement rather than failing
        the request: the spec has the acknowledgement name the subset honoured, and an unknown
        URI must look the same as one the caller may not read. Subscriptions at the servers are
        shared with every other holder (:mod:`proxy.interest`).
        """
        watched = self._watchable(requested.uris[:MAX_RESOURCE_SUBSCRIPTIONS], session.identity)
        subscription = self.listens.open(subscription_id, session.identity, requested.only(watched))
        self.metrics.listen_opened(session.transport)
        try:
            await self.interest.watch(subscription, watched)
            yield subscription
        finally:
            self.listens.close(subscription)
            self.metrics.listen_closed(session.transport)
            await self.interest.unwatch(subscription, watched)

    def _watchable(self, uris: Sequence[str], identity: Identity) -> dict[str, str]:
        """Of ``uris``, those ``identity`` may read whose server can tell of updates: by server."""
        watchable: dict[str, str] = {}
        for uri in uris:
            try:
                server = self._resource_server(uri, identity)
            except ResourceNotFound:
                continue
            connection = self.connections.get(server)
            if connection is not None and (connection.capabilities.get("resources") or {}).get("subscribe"):
                watchable[uri] = server
        return watchable

    async def _complete(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        ref = params.get("ref")
        if not isinstance(ref, dict):
            raise InvalidParams('completion/complete needs a "ref" object')
        if ref.get("type") == "ref/prompt":
            name = _string(ref, "name", "a ref/prompt")
            entry = self._prompt(name)
            forwarded = {**params, "ref": {**ref, "name": entry.original_name}}
            subject = Subject.prompt(entry)
            ctx = CallContext(
                inbound, request_id, "completion/complete", entry.server_id, name, forwarded, entry, subject
            )
        elif ref.get("type") == "ref/resource":
            uri = _string(ref, "uri", "a ref/resource")
            server = self.resources.by_template.get(uri) or self.resources.route(uri)
            if server is None:
                raise ResourceNotFound.of(uri)
            subject = Subject.resource(uri, server)
            ctx = CallContext(
                inbound, request_id, "completion/complete", server, uri, params, subject=subject
            )
        else:
            raise InvalidParams(f"unknown completion ref type: {ref.get('type')!r}")
        return await self._forward(ctx)

    async def _set_level(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        level = params.get("level")
        if level not in LOG_LEVELS:
            raise InvalidParams(f"unknown log level {level!r}; one of: {', '.join(LOG_LEVELS)}")
        inbound.session.log_level = str(level)
        # Shared connections log at the most verbose level any session asked for; each session
        # then gets only the lines at or above its own level.
        wanted = min(
            (LOG_LEVELS.index(s.log_level) for s in self.sessions.values() if s.log_level), default=None
        )
        effective = LOG_LEVELS[wanted] if wanted is not None else str(level)

        async def tell(connection: ServerConnection) -> None:
            try:
                await connection.request("logging/setLevel", {"level": effective})
            except Exception as exc:  # one server's refusal must not fail the client's request
                logger.warning("server %s: logging/setLevel failed: %s", connection.server_id, exc)

        # A 2026-07-28 server has no logging/setLevel: each request carries its caller's level.
        async with anyio.create_task_group() as tg:
            for connection in self.connections.values():
                if (
                    "logging" in connection.capabilities
                    and connection.state is ServerState.READY
                    and not connection.modern
                ):
                    tg.start_soon(tell, connection)
        return {}
