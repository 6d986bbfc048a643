"""The router: every client message, in either era, to the code that answers it.

The method table names what Manifold answers itself (``initialize``, ``server/discover``, ``ping``,
the merged lists, ``logging/setLevel``, ``tasks/*`` by :mod:`proxy.router.tasks`) and what it
resolves and forwards: a namespaced name or a URI becomes a :class:`~proxy.pipeline.context.CallContext`
(server, its own name, policy subject) for the pipeline (:class:`~proxy.pipeline.forward.Forward` last).
:meth:`Router.handle` and :meth:`Router.handle_stateless` are the fault boundary of a request:
whatever goes wrong answering it becomes its error response (:func:`proxy.observe.boundary.wire_error`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio

from proxy import __version__
from proxy.catalog import apps
from proxy.catalog.completions import filter_completion
from proxy.catalog.merge import Entry
from proxy.clients.listen_streams import Listens, Subscription
from proxy.clients.session import (
    LOG_LEVELS,
    ClientSession,
    Deliver,
    InboundRequest,
    StatelessCaller,
    cancel_named,
    kept_client_info,
)
from proxy.clients.sessions import Sessions
from proxy.config.model import LimitsConfig
from proxy.core.errors import InvalidParams, InvalidRequest, LimitExceeded, MethodNotFound, ResourceNotFound
from proxy.core.quotas import Quota
from proxy.notify.server_logs import ServerLogs
from proxy.notify.subscriptions import Interest, PerClientInterest
from proxy.observe.boundary import Boundary
from proxy.observe.metrics import UNKNOWN, Metrics
from proxy.outbound.lists import LIST_KINDS
from proxy.pipeline.context import CallContext, Handler, tool_error
from proxy.policy import Identity, Subject
from proxy.protocol import jsonrpc, results, versions
from proxy.protocol.asks import kept_capabilities
from proxy.protocol.jsonrpc import Message, MessageKind, RequestId
from proxy.protocol.stateless import REMOVED_METHODS, strip_envelope
from proxy.protocol.subscriptions import MAX_RESOURCE_SUBSCRIPTIONS, Filter
from proxy.protocol.uris import normalize_uri
from proxy.router.params import session_of, string_param, too_many
from proxy.router.tasks import Tasks, discovered_with_tasks, task_methods
from proxy.servers.connections import Connections
from proxy.servers.per_client import owner, owner_of
from proxy.tracing import active as tracing
from proxy.views.catalogs import Catalogs
from proxy.views.per_client import PerClientCatalogs

if TYPE_CHECKING:  # progressive discovery (meta-tools listed instead of the tools): loaded only when on
    from proxy.views.discovery import Discovery

__all__ = ["CAPABILITIES", "Router", "SERVER_INFO"]

logger = logging.getLogger("proxy.router.dispatch")

CAPABILITIES: Final = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "completions": {},
    "logging": {},
}
# 2026-07-28 callers hear of the same changes on subscriptions/listen streams (Router.listen):
# list changes as a filter flag, resource updates as resourceSubscriptions.
SERVER_INFO: Final = {"name": "manifold", "version": __version__}
_LISTS: Final = {method: kind for kind, (_, method) in LIST_KINDS.items()}

Params = dict[str, Any]
_Method = Callable[[InboundRequest, Params, RequestId], Awaitable[Any]]


class Router:
    def __init__(
        self,
        *,
        catalogs: Catalogs,
        sessions: Sessions,
        connections: Connections,
        interest: Interest,
        listens: Listens,
        logs: ServerLogs,
        forward: Handler,
        boundary: Boundary,
        metrics: Metrics,
        limits: LimitsConfig | None = None,
        own: PerClientCatalogs | None = None,
        discovery: Discovery | None = None,
        endpoint: str = "",
        servers: Collection[str] | None = None,  # the servers the endpoint selects; None: all
        tasks: Tasks | None = None,
    ) -> None:
        self._servers = servers
        limits = limits or LimitsConfig()
        self._discovery = discovery if discovery is not None and discovery.enabled else None  # None: off
        self._endpoint = endpoint  # the named endpoint this router answers for ("": /mcp)
        self._catalogs = catalogs
        # Set only when per_client servers are configured: each client's own view of the lists.
        self._per_client = own
        self._sessions = sessions
        self._connections = connections
        self._interest = interest
        self._listens = listens
        self._logs = logs
        self._own_interest = PerClientInterest(listens, connections)
        self._pipeline = forward
        self._boundary = boundary
        self._metrics = metrics
        self._max_in_flight = limits.max_in_flight_per_session
        self._max_subscriptions = limits.max_subscriptions_per_session
        self._max_uri = limits.max_uri_bytes
        # A 2026-07-28 caller has no session: its listen streams are counted by identity, which
        # may hold as many as its allowed sessions could (a stateless client is not worse off).
        streams = limits.max_listen_streams_per_session * limits.max_sessions_per_identity
        self._listening = Quota(
            "max_listen_streams_per_session",
            streams,
            f"this identity already has {streams} subscriptions/listen streams open "
            f"(limits.max_listen_streams_per_session per session it may open, "
            f"{limits.max_sessions_per_identity}); close one first",
            said=True,
        )
        self._methods: dict[str, _Method] = {
            "tools/call": self._tools_call,
            "prompts/get": self._prompts_get,
            "resources/read": self._resources_read,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "completion/complete": self._complete,
            "logging/setLevel": self._set_level,
            "initialize": self._initialize,
            "ping": self._ping,
        }
        self._methods.update(task_methods(tasks, self._methods, endpoint, self._identity_view))
        self._discovered = discovered_with_tasks(tasks, self._discover, self._identity_view)

    # ---- the boundary of one request ------------------------------------------------------

    async def handle(
        self, session: ClientSession, message: Message, stream: Deliver | None = None
    ) -> Message | None:
        """Answer one validated message of a handshake-era ``session``; ``None`` when there is
        nothing to send. ``stream`` is the request's own channel back to the client, if its
        transport has one. Never raises but cancellation: a cancelled request is not answered."""
        kind = jsonrpc.kind_of(message)
        if kind is MessageKind.NOTIFICATION:
            self._notification(session, message)
            return None
        if kind is MessageKind.RESPONSE:
            session.answered(message)
            return None
        request_id = message["id"]
        if request_id in session.in_flight or len(session.in_flight) >= self._max_in_flight:
            # Answered at once, never queued: a session's requests are bounded where they arrive.
            refusal = too_many(request_id in session.in_flight, self._max_in_flight)
            return self._boundary.answer(refusal, request_id, method=message["method"], session=session)
        # The client may cancel this request by id (notifications/cancelled): its own scope.
        with anyio.CancelScope() as scope, self._metrics.in_flight():
            session.in_flight[request_id] = scope
            traced, ended = tracing.begin(message["method"], message.get("params"), request_id, session), None
            try:
                params = message.get("params") or {}
                ended = await self._request(
                    InboundRequest(session, stream), message["method"], params, request_id
                )
                return self._boundary.respond(request_id, ended, session=session)
            except Exception as exc:
                ended = self._boundary.answer(exc, request_id, method=message["method"], session=session)
                return ended
            finally:
                session.in_flight.pop(request_id, None)
                traced.end(ended)
        return None  # cancelled by the client: the spec says nothing is sent back

    async def handle_stateless(self, caller: StatelessCaller, message: Message, stream: Deliver) -> Message:
        """Answer one request of a 2026-07-28 caller, which the inbound transport validated.

        ``caller`` is built from the request's envelope and lives as long as the request.
        ``stream`` carries the request's progress and the log lines it opted into. Never raises
        but cancellation (the client closed the response stream)."""
        request_id = message["id"]
        with self._metrics.in_flight():
            traced, ended = tracing.begin(message["method"], message.get("params"), request_id, caller), None
            try:
                params = message.get("params") or {}
                ended = await self._stateless(
                    InboundRequest(caller, stream), message["method"], params, request_id
                )
                return self._boundary.respond(request_id, ended, session=caller)
            except Exception as exc:
                ended = self._boundary.answer(exc, request_id, method=message["method"], session=caller)
                return ended
            finally:
                traced.end(ended)

    async def warm_search(self) -> None:
        """Until cancelled: the tool search's vectors embedded off the loop as the catalog changes."""
        if self._discovery is not None:
            await self._discovery.warm(self._catalogs)

    def _notification(self, session: ClientSession, message: Message) -> None:
        method = message["method"]
        if method == "notifications/initialized":
            session.initialized = True
        elif method == "notifications/cancelled":
            cancel_named(session.in_flight, message)

    # ---- the method table -----------------------------------------------------------------

    async def _request(
        self, inbound: InboundRequest, method: str, params: Params, request_id: RequestId
    ) -> Any:
        if not isinstance(params.get("_meta", {}), dict):
            # The schema's _meta is an object; Manifold adds its own keys to it on the way out.
            raise InvalidParams(f"{method}: params._meta must be an object")
        handler = self._methods.get(method)
        if handler is not None:
            return await handler(inbound, params, request_id)
        if method in _LISTS:
            kind = _LISTS[method]
            catalogs = await self._opened(inbound)
            hint = catalogs.cache_hint(kind) if inbound.stateless else None
            if kind == "tools" and self._discovery is not None:
                listed = self._discovery.page(catalogs.served, inbound, params.get("cursor"))
                if hint is None:
                    return listed
                return results.stateless(listed, server_info=SERVER_INFO, cache=hint)
            return catalogs.page(
                kind, params.get("cursor"), inbound.identity, hint=hint, server_info=SERVER_INFO
            )
        raise MethodNotFound(f"method not found: {method}")

    async def _stateless(
        self, inbound: InboundRequest, method: str, params: Params, request_id: RequestId
    ) -> Any:
        if method in REMOVED_METHODS:
            raise MethodNotFound("Method not found", data=method)
        if method == "server/discover":
            return results.stateless(
                self._discovered(inbound), server_info=SERVER_INFO, cache=self._catalogs.cache_hint()
            )
        # The caller's envelope is about this hop: servers behind get none (or Manifold's).
        result = await self._request(inbound, method, strip_envelope(params), request_id)
        if method in _LISTS:
            return result  # shaped, and cached encoded, by Catalogs.page
        cache = None
        if method == "resources/read":
            cache = results.merge_cache(
                [results.hint_of(result) or results.NO_STORE, self._catalogs.cache_hint()]
            )
        return results.stateless(result, server_info=SERVER_INFO, cache=cache)

    async def _ping(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        return {}

    async def _initialize(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        session = session_of(inbound)
        if session.protocol_version is not None:
            raise InvalidRequest("this session is already initialized")
        requested = string_param(params, "protocolVersion", "initialize")
        capabilities, client_info = params.get("capabilities") or {}, params.get("clientInfo") or {}
        if not isinstance(capabilities, dict) or not isinstance(client_info, dict):
            raise InvalidParams('initialize needs "capabilities" and "clientInfo" objects')
        session.protocol_version = versions.negotiate(requested)
        # Only what Manifold acts on is kept (it lives as long as the session, and goes into its id).
        session.capabilities = kept_capabilities(capabilities)
        session.client_info = kept_client_info(client_info)
        result: dict[str, Any] = {
            "protocolVersion": session.protocol_version,
            "capabilities": self._connections.capabilities(CAPABILITIES, self._servers),
            "serverInfo": SERVER_INFO,
        }
        return self._with_instructions(result)

    def _discover(self) -> dict[str, Any]:
        capabilities = self._connections.capabilities(CAPABILITIES, self._servers)
        result = {"supportedVersions": list(versions.ADVERTISED), "capabilities": capabilities}
        return self._with_instructions(result)

    def _with_instructions(self, result: dict[str, Any]) -> dict[str, Any]:
        instructions = self._connections.instructions(self._servers)
        if self._discovery is not None:
            guide = self._discovery.instructions()
            instructions = f"{guide}\n\n{instructions}" if instructions else guide
        if instructions:
            result["instructions"] = instructions
        return result

    # ---- the catalog a client sees ---------------------------------------------------------

    def _view(self, inbound: InboundRequest) -> Catalogs:
        """What ``inbound``'s client sees: its own view once its per_client connections listed."""
        return self._catalogs if self._per_client is None else self._per_client.of(owner(inbound.session))

    async def _opened(self, inbound: InboundRequest) -> Catalogs:
        """Its view, once its own connections to every per_client server run (they list it)."""
        if self._per_client is None:
            return self._catalogs
        await self._connections.open_own(inbound)
        return self._view(inbound)

    def _identity_view(self, identity: Identity) -> Catalogs:
        """What a 2026-07-28 caller of ``identity`` sees."""
        return self._catalogs if self._per_client is None else self._per_client.of(owner_of(identity))

    # ---- resolved and forwarded -----------------------------------------------------------

    async def _forward(self, ctx: CallContext) -> Any:
        if self._endpoint:  # metrics and the audit log say which endpoint a call came in on
            ctx = dataclasses.replace(ctx, endpoint=self._endpoint)
        return await self._pipeline(ctx)

    async def _tools_call(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        name = string_param(params, "name", "tools/call")
        discovery = self._discovery
        if discovery is not None and name in discovery.names:
            view = await self._opened(inbound)
            if name != discovery.names.call:
                await discovery.prepare(view.served, inbound)  # the index, built off the loop
            answer = discovery.answer(view.served, inbound, name, params.get("arguments"))
            if isinstance(answer, dict):  # a meta-tool's result; else the Call that call_tool asks for
                return answer
            # call_tool: exactly a direct call of the tool it names (never of a meta-tool again).
            params = {**params, "name": answer.name, "arguments": answer.arguments}
            if answer.arguments is None:
                del params["arguments"]
            return await self._call_tool(inbound, params, answer.name, request_id)
        return await self._call_tool(inbound, params, name, request_id)

    async def _call_tool(
        self, inbound: InboundRequest, params: Params, name: str, request_id: RequestId
    ) -> Any:
        catalogs = self._view(inbound)
        entry = catalogs.tool(name)
        if entry is None and self._per_client is not None:  # perhaps only its own connection lists it
            catalogs = await self._opened(inbound)
            entry = catalogs.tool(name)
        if entry is None:
            self._metrics.tool_call(UNKNOWN, None, "invalid", 0.0)  # never the client's string as a label
            raise InvalidParams(f"unknown tool: {name}")
        served = catalogs.served
        subject = served.subject(name)
        forwarded = {**params, "name": entry.original_name}
        ctx = CallContext(inbound, request_id, "tools/call", entry.server_id, name, forwarded, entry, subject)
        if catalogs.hides(subject, inbound.identity):
            # Hidden is decided before anything else can tell the tool exists (its arguments,
            # a pin drift): the authorize stage audits the call and answers it exactly as for
            # a missing tool.
            return await self._forward(ctx)
        if name in served.blocked:
            self._metrics.tool_call(entry.server_id, name, "denied", 0.0)
            return tool_error(served.blocked[name], outcome="denied")
        if params.get("arguments") is not None and not isinstance(params["arguments"], dict):
            raise InvalidParams('"arguments" must be an object')
        return await self._forward(ctx)

    async def _prompt(self, inbound: InboundRequest, name: str) -> Entry:
        """Raises: InvalidParams: no server lists a prompt of that name to this client."""
        entry = self._view(inbound).prompts.by_name.get(name)
        if entry is None:
            entry = (await self._opened(inbound)).prompt(name)
        return entry

    async def _route(self, inbound: InboundRequest, uri: str) -> str | None:
        """The server of a concrete resource URI, as this client sees the lists."""
        server = self._view(inbound).route_resource(uri, inbound.identity)
        if server is None and self._per_client is not None:
            server = (await self._opened(inbound)).route_resource(uri, inbound.identity)
        return server

    async def _prompts_get(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        entry = await self._prompt(inbound, string_param(params, "name", "prompts/get"))
        forwarded = {**params, "name": entry.original_name}
        subject = Subject.prompt(entry)
        ctx = CallContext(
            inbound, request_id, "prompts/get", entry.server_id, entry.name, forwarded, entry, subject
        )
        return await self._forward(ctx)

    async def _resources_read(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        uri = self._uri(params, "uri", "resources/read")
        server = await self._route(inbound, uri)
        index = self._view(inbound).resources
        if server is None:
            raise ResourceNotFound.of(uri)
        # Whether the policy hides it is the authorize stage's call, as for prompts. It decides
        # on the normalized URI, and the server reads that one (in its own spelling if it lists it).
        subject, forwarded = Subject.resource(uri, server), {**params, "uri": index.spelling(uri)}
        ctx = CallContext(inbound, request_id, "resources/read", server, uri, forwarded, subject=subject)
        result = await self._forward(ctx)
        return apps.namespace_read(server, result) if apps.is_ui(uri) else result

    async def _complete(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        ref = params.get("ref")
        if not isinstance(ref, dict):
            raise InvalidParams('completion/complete needs a "ref" object')
        method = "completion/complete"
        if ref.get("type") == "ref/prompt":
            name = string_param(ref, "name", "a ref/prompt")
            entry = await self._prompt(inbound, name)
            forwarded = {**params, "ref": {**ref, "name": entry.original_name}}
            subject = Subject.prompt(entry)
            ctx = CallContext(inbound, request_id, method, entry.server_id, name, forwarded, entry, subject)
        elif ref.get("type") == "ref/resource":
            return await self._complete_resource(inbound, params, request_id, ref)
        else:
            raise InvalidParams(f"unknown completion ref type: {ref.get('type')!r}")
        return await self._forward(ctx)

    async def _complete_resource(
        self, inbound: InboundRequest, params: Params, request_id: RequestId, ref: Mapping[str, Any]
    ) -> Any:
        """A completion on a resource template, or on a concrete URI.

        A template (a ``uriTemplate`` some server lists) is decided on as the list shows it: one
        hidden from the caller's ``resources/templates/list`` does not exist for it. Then each
        value the server offers is decided on as the URI it fills the template in to
        (:mod:`proxy.catalog.completions`), and left out if the policy hides that URI from the
        caller. A string with ``{`` that no server lists as a template is a missing template.
        Anything else is a concrete URI: normalized, routed and decided on as a read would be.
        """
        method = "completion/complete"
        raw = self._bounded(string_param(ref, "uri", "a ref/resource"))
        view = self._view(inbound)
        index = view.resources
        template_server = index.by_template.get(raw)
        if template_server is None:
            if "{" in raw:
                raise ResourceNotFound.of(raw)
            uri = normalize_uri(raw)
            server = index.route(uri)
            if server is None:
                raise ResourceNotFound.of(uri)
            forwarded = {**params, "ref": {**ref, "uri": index.spelling(uri)}}
            subject = Subject.resource(uri, server)
            return await self._forward(
                CallContext(inbound, request_id, method, server, uri, forwarded, subject=subject)
            )
        subject = Subject.resource(raw, template_server)
        result = await self._forward(
            CallContext(inbound, request_id, method, template_server, raw, params, subject=subject)
        )
        identity = inbound.identity

        def readable(filled: str) -> bool:
            if len(filled) > self._max_uri:  # no read of it would be let through either
                return False
            try:
                view.readable(normalize_uri(filled), identity)
            except (InvalidParams, ResourceNotFound):
                return False
            return True

        return filter_completion(result, raw, params, readable)

    def _uri(self, params: Mapping[str, Any], key: str, what: str) -> str:
        """The URI a request names, bounded and normalized (:mod:`proxy.protocol.uris`) before
        anything routes, matches or keeps it."""
        return normalize_uri(self._bounded(string_param(params, key, what)))

    def _bounded(self, uri: str) -> str:
        # Characters, not bytes: a bound as good, without encoding what may be megabytes.
        if len(uri) > self._max_uri:
            raise LimitExceeded(
                f"a URI of {len(uri)} characters", limit="max_uri_bytes", maximum=self._max_uri
            )
        return uri

    # ---- subscriptions --------------------------------------------------------------------

    async def _subscribe(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        uri = self._uri(params, "uri", "resources/subscribe")
        session = session_of(inbound)
        view = self._view(inbound)
        held = view.resources.spelling(uri) in session.subscriptions
        if not held and len(session.subscriptions) >= self._max_subscriptions:
            raise LimitExceeded(
                "this session already holds as many resource subscriptions as it may; "
                "unsubscribe from one first",
                limit="max_subscriptions_per_session",
                maximum=self._max_subscriptions,
            )
        server = view.readable(uri, session.identity)
        # Kept, and sent, as the server spells it: its resources/updated will name it so.
        uri = view.resources.spelling(uri)
        # One subscription on a shared connection serves every session that wants the URI.
        if self._interest.must_tell(session, uri, server):
            forwarded = {**params, "uri": uri}
            await self._forward(
                CallContext(inbound, request_id, "resources/subscribe", server, uri, forwarded)
            )
        session.subscriptions[uri] = server
        return {}

    async def _unsubscribe(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        uri = self._uri(params, "uri", "resources/unsubscribe")
        session = session_of(inbound)
        view = self._view(inbound)
        server = view.readable(uri, session.identity)
        uri = view.resources.spelling(uri)
        session.subscriptions.pop(uri, None)
        if self._interest.must_tell(session, uri, server):
            forwarded = {**params, "uri": uri}
            await self._forward(
                CallContext(inbound, request_id, "resources/unsubscribe", server, uri, forwarded)
            )
        return {}

    @asynccontextmanager
    async def listen(
        self, caller: StatelessCaller, subscription_id: RequestId, requested: Filter
    ) -> AsyncIterator[Subscription]:
        """Open a ``subscriptions/listen`` stream for a 2026-07-28 caller, closed on exit; the
        transport writes what it yields (:mod:`proxy.clients.listen_streams`).

        Honoured: every list change asked for (Manifold tells of each change of its merged
        lists), and of ``resourceSubscriptions`` the first ``MAX_RESOURCE_SUBSCRIPTIONS`` URIs
        the caller may read, whose server declared ``resources.subscribe`` and (if nobody
        watched the URI yet) accepted Manifold's ``resources/subscribe``. Any other URI (unknown,
        hidden by the policy, or refused) is left out of the acknowledgement rather than failing
        the request: the spec has the acknowledgement name the subset honoured, and an unknown
        URI must look the same as one the caller may not read. Subscriptions at the servers are
        shared with every other holder (:mod:`proxy.notify.subscriptions`).

        Raises:
            LimitExceeded: on entry, the caller's identity has as many streams open as
                ``limits.max_listen_streams_per_session`` times ``max_sessions_per_identity``
                (counted here: the transport answers it).
        """
        try:
            self._listening.take(caller.identity.key, caller)
        except LimitExceeded as exc:
            self._boundary.refused(exc)  # the transport answers it, outside the boundary
            raise
        try:
            watched = self._watchable(requested.uris[:MAX_RESOURCE_SUBSCRIPTIONS], caller.identity)
            # Watched (and acknowledged) as the servers spell them: their updates name them so.
            honoured = requested.watching(tuple(watched))
            subscription = self._listens.open(subscription_id, caller.identity, honoured, self._endpoint)
            self._metrics.listen_opened(caller.transport)
            inbound = InboundRequest(caller)
            # A per_client server's resources are watched on the identity's own connection.
            own = {u: s for u, s in watched.items() if not self._connections.shares(inbound, s)}
            shared = {u: s for u, s in watched.items() if u not in own}
            try:
                await self._interest.watch(subscription, shared)
                await self._own_interest.watch(inbound, subscription, own)
                yield subscription
            finally:
                self._listens.close(subscription)
                self._metrics.listen_closed(caller.transport)
                await self._interest.unwatch(subscription, shared)
                await self._own_interest.unwatch(inbound, subscription, own)
        finally:
            self._listening.give_back(caller.identity.key, caller)

    def _watchable(self, uris: Sequence[str], identity: Identity) -> dict[str, str]:
        """Of ``uris``, those ``identity`` may read whose server can tell of updates, normalized
        and as their servers spell them: by server.

        Raises:
            LimitExceeded: a URI is longer than ``limits.max_uri_bytes``.
            InvalidParams: a URI is malformed (:func:`~proxy.protocol.uris.normalize_uri`).
        """
        watchable: dict[str, str] = {}
        for named in uris:
            uri = normalize_uri(self._bounded(named))
            view = self._identity_view(identity)
            try:
                server = view.readable(uri, identity)
            except ResourceNotFound:
                continue
            uri = view.resources.spelling(uri)
            connection = self._connections.shared.get(server)
            if connection is not None and (connection.capabilities.get("resources") or {}).get("subscribe"):
                watchable[uri] = server
        return watchable

    def tool_definition(self, name: str, identity: Identity) -> Mapping[str, Any] | None:
        """The definition of tool ``name`` as ``identity`` is shown it (2026-07-28 param headers)."""
        return self._identity_view(identity).visible_definition(name, identity)

    # ---- logging --------------------------------------------------------------------------

    async def _set_level(self, inbound: InboundRequest, params: Params, request_id: RequestId) -> Any:
        level = params.get("level")
        if level not in LOG_LEVELS:
            raise InvalidParams(f"unknown log level {level!r}; one of: {', '.join(LOG_LEVELS)}")
        # The session's own filtering always; a shared server's level only as the policy lets.
        await self._logs.set_level(session_of(inbound), str(level))
        return {}
